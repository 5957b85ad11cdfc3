//! `qemu-img measure` beside QEMU's: for sizes (cluster sizes, refcount
//! widths, extended L2 entries, preallocation, compat, raw), for images
//! (data, zero clusters, zeroes written as data, a raw file's holes, a
//! version 2 source without the bitmaps line), in both layouts, and the
//! refusals, byte for byte with their exit codes.

use super::Twins;

#[test]
fn measure_of_a_size_matches_qemu_img() {
    let t = Twins::new();
    for size in ["0", "1", "1.5k", "64M", "1G", "100T"] {
        t.same("qemu-img", &["measure", "-O", "qcow2", "--size", size]);
        t.same("qemu-img", &["measure", "--size", size]);
    }
    for opts in [
        "cluster_size=4k",
        "cluster_size=512",
        "cluster_size=2M",
        "cluster_size=2M,extended_l2=on",
        "extended_l2=on",
        "refcount_bits=1",
        "refcount_bits=8",
        "refcount_bits=64",
        "compat=0.10",
        "compat=1.1,lazy_refcounts=on",
        "preallocation=metadata",
        "preallocation=falloc",
        "preallocation=full",
        "size=2G",
        "data_file=x,compression_type=zstd",
        "lazy_refcounts",
    ] {
        t.same(
            "qemu-img",
            &["measure", "-O", "qcow2", "-o", opts, "--size", "1G"],
        );
    }
    // Repeated -o lists, JSON, -O given twice, the raw target's options.
    t.same(
        "qemu-img",
        &[
            "measure",
            "--size",
            "1G",
            "-o",
            "cluster_size=4k",
            "-o",
            "refcount_bits=8",
            "-O",
            "qcow2",
        ],
    );
    let json = t.same(
        "qemu-img",
        &["measure", "-O", "qcow2", "--output=json", "--size", "1G"],
    );
    assert_eq!(
        json,
        "{\n    \"required\": 393216,\n    \"fully-allocated\": 1074135040\n}\n"
    );
    t.same("qemu-img", &["measure", "--output=json", "--size", "1.5k"]);
    t.same(
        "qemu-img",
        &["measure", "-O", "qcow2", "-O", "raw", "--size", "1G"],
    );
    t.same("qemu-img", &["measure", "-U", "--size", "1G"]);
}

#[test]
fn measure_refuses_as_qemu_img_does() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "a.qcow2", "1M"],
    );
    for args in [
        &["measure"][..],
        &["measure", "--size", "1G", "a.qcow2"],
        &["measure", "--size", "1G", "a", "b"],
        &["measure", "-f", "raw"],
        &["measure", "--image-opts", "--size", "1G"],
        &["measure", "-l", "snap", "--size", "1G"],
        &["measure", "--size", "foo"],
        &["measure", "--size", "-1"],
        &["measure", "--size", "8E"],
        &["measure", "--output=xml", "--size", "1G"],
        &["measure", "--size", "foo", "--output=xml"],
        &["measure", "-q", "--size", "1G"],
        &["measure", "-O", "vmdk", "--size", "1G"],
        &["measure", "-O", "foo", "--size", "1G"],
        &["measure", "-O", "foo", "missing.img"],
        &["measure", "missing.img"],
        &["measure", "-O", "qcow2", "-o", "", "--size", "1G"],
        &["measure", "-O", "qcow2", "-o", "help", "--size", "1G"],
        &[
            "measure",
            "-O",
            "raw",
            "-o",
            "cluster_size=4k",
            "--size",
            "1G",
        ],
    ] {
        t.same("qemu-img", args);
    }
    for opts in [
        "foo=bar",
        "cluster_size=3k",
        "cluster_size=0",
        "cluster_size=foo",
        "size=foo",
        "refcount_bits=3",
        "refcount_bits=0",
        "refcount_bits=x",
        "compat=0.10,refcount_bits=8",
        "compat=2",
        "compat=v3",
        "compat=v2",
        "compat",
        "extended_l2=on,cluster_size=4k",
        "lazy_refcounts=foo",
        "preallocation=bad",
        "cluster_size=512,size=1T",
        "preallocation=x,refcount_bits=3",
    ] {
        t.same(
            "qemu-img",
            &["measure", "-O", "qcow2", "-o", opts, "--size", "1G"],
        );
    }
    t.same(
        "qemu-img",
        &[
            "measure",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=512",
            "--size",
            "1T",
        ],
    );
}

#[test]
fn measure_of_an_image_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "a.qcow2", "64M"],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 1 0 1M",
            "-c",
            "write -z 4M 1M",
            "-c",
            "write -P 2 10M 4k",
            "-c",
            "write -P 0 20M 64k",
            "-c",
            "write -P 3 30M 1",
            "a.qcow2",
        ],
    );
    for args in [
        &["measure", "a.qcow2"][..],
        &["measure", "-O", "qcow2", "a.qcow2"],
        &["measure", "-O", "qcow2", "--output=json", "a.qcow2"],
        &["measure", "-O", "raw", "--output=json", "a.qcow2"],
        &["measure", "-O", "qcow2", "-o", "cluster_size=2M", "a.qcow2"],
        &[
            "measure",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=512",
            "a.qcow2",
        ],
        &[
            "measure",
            "-O",
            "qcow2",
            "-o",
            "compat=0.10",
            "--output=json",
            "a.qcow2",
        ],
        &["measure", "-O", "qcow2", "-o", "backing_file=x", "a.qcow2"],
        &[
            "measure",
            "-O",
            "qcow2",
            "-o",
            "preallocation=full",
            "a.qcow2",
        ],
        &["measure", "-O", "qcow2", "-f", "qcow2", "-U", "a.qcow2"],
    ] {
        t.same("qemu-img", args);
    }
    // A version 2 source: no bitmaps line.
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=0.10",
            "b.qcow2",
            "64M",
        ],
    );
    t.same("qemu-io", &["-c", "write -P 1 1M 2M", "b.qcow2"]);
    let out = t.same("qemu-img", &["measure", "-O", "qcow2", "b.qcow2"]);
    assert!(!out.contains("bitmaps"), "{out}");
    t.same(
        "qemu-img",
        &["measure", "-O", "qcow2", "--output=json", "b.qcow2"],
    );
    // A raw file: its holes are not counted.
    t.same("qemu-img", &["create", "-q", "-f", "raw", "r.raw", "10M"]);
    t.same(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 1 0 1M",
            "-c",
            "write -P 1 5M 4k",
            "r.raw",
        ],
    );
    for args in [
        &["measure", "-O", "qcow2", "r.raw"][..],
        &["measure", "-O", "qcow2", "-f", "raw", "r.raw"],
        &[
            "measure",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "-f",
            "raw",
            "r.raw",
        ],
        &["measure", "-f", "raw", "r.raw"],
    ] {
        t.same("qemu-img", args);
    }
    // An overlay: what its backing file holds counts as data.
    t.same(
        "qemu-img",
        &[
            "create", "-q", "-f", "qcow2", "-b", "b.qcow2", "-F", "qcow2", "o.qcow2",
        ],
    );
    t.same("qemu-io", &["-c", "write -P 5 8M 1M", "o.qcow2"]);
    t.same("qemu-img", &["measure", "-O", "qcow2", "o.qcow2"]);
}

#[test]
fn measure_of_an_internal_snapshot_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "a.qcow2", "64M"],
    );
    t.same(
        "qemu-io",
        &["-c", "write -P 1 0 1M", "-c", "write -z 2M 1M", "a.qcow2"],
    );
    t.same("qemu-img", &["snapshot", "-c", "s1", "a.qcow2"]);
    t.same("qemu-io", &["-c", "write -P 2 10M 5M", "a.qcow2"]);
    t.same("qemu-img", &["snapshot", "-c", "2", "a.qcow2"]);
    t.same("qemu-io", &["-c", "write -P 3 30M 5M", "a.qcow2"]);
    // Measured at the image's size now, with the snapshot's data.
    t.same("qemu-img", &["resize", "-q", "a.qcow2", "128M"]);
    t.same("qemu-img", &["create", "-q", "-f", "raw", "r.raw", "1M"]);
    for l in [
        "s1",
        "1",
        "2",
        "snapshot.id=2",
        "snapshot.name=2",
        "snapshot.name=s1,snapshot.id=1",
        "snapshot.name=s1,snapshot.id=2",
        "3",
    ] {
        t.same("qemu-img", &["measure", "-O", "qcow2", "-l", l, "a.qcow2"]);
        t.same(
            "qemu-img",
            &[
                "measure",
                "-O",
                "qcow2",
                "-o",
                "cluster_size=4k",
                "--output=json",
                "-l",
                l,
                "a.qcow2",
            ],
        );
        t.same("qemu-img", &["measure", "-l", l, "a.qcow2"]);
    }
    t.same("qemu-img", &["measure", "-O", "qcow2", "a.qcow2"]);
    t.same("qemu-img", &["measure", "-l", "s", "r.raw"]);
    t.same("qemu-img", &["measure", "-O", "qcow2", "-l", "s", "r.raw"]);
}

#[test]
fn measure_with_luks_encryption_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1G"],
    );
    t.same("qemu-io", &["-c", "write 0 1M", "t.qcow2"]);
    for extra in [
        "",
        ",encrypt.cipher-alg=aes-128",
        ",encrypt.cipher-mode=cbc",
        ",cluster_size=4k",
    ] {
        let o = format!("encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10{extra}");
        let secret = ["--object", "secret,id=sec0,data=base"];
        let mut args = vec!["measure"];
        args.extend(secret);
        args.extend(["-o", &o, "-O", "qcow2", "--size", "1G"]);
        t.same("qemu-img", &args);
        let mut args = vec!["measure", "--output=json"];
        args.extend(secret);
        args.extend(["-o", &o, "-f", "qcow2", "-O", "qcow2", "t.qcow2"]);
        t.same("qemu-img", &args);
    }
    // No secret object, no secret named.
    for o in [
        "encrypt.format=luks,encrypt.key-secret=sec0",
        "encrypt.format=luks",
    ] {
        t.same(
            "qemu-img",
            &["measure", "-o", o, "-O", "qcow2", "--size", "1G"],
        );
    }
    // A bare snapshot option: the deprecation warning, then the refusal.
    t.same("qemu-img", &["measure", "-l", "snapshot.foo"]);
    t.same("qemu-img", &["measure", "-o", ","]);
}
