//! The file commands on qcow2 images, with QEMU as the independent oracle
//! (issue 2's interop suite, command-line half):
//! - images `qemu-img`/`qemu-io` make (cluster sizes 512 B to 2 MiB,
//!   refcount widths 1/8/16/64, compat 0.10 and 1.1, zero clusters,
//!   discards, backing chains of qcow2 and raw, lazy refcounts left dirty
//!   by `qemu-io -c abort`) read through `qcsim convert -O raw` exactly as
//!   `qemu-img convert -O raw` reads them;
//! - images `qcsim create` makes and `qcsim io` writes (seeded random
//!   writes, zeroes, discards) pass `qemu-img check` with no error and no
//!   leak, and `qemu-img convert -O raw` of them equals an in-test model;
//! - `qcsim info` agrees with `qemu-img info`; `qcsim convert -O qcow2`
//!   output passes `qemu-img check` and compares equal;
//! - backing-chain errors (loop, missing file) are reported by name.

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{assert_clean, exec, qcsim, run, QCSIM};

/// `qcsim convert -O raw` and `qemu-img convert -O raw` of `image` agree.
fn assert_converts_alike(image: &str, dir: &Path) {
    qcsim(&["convert", "-O", "raw", image, "ours.raw"], dir);
    run(
        "qemu-img",
        &["convert", "-O", "raw", image, "theirs.raw"],
        dir,
    );
    let ours = std::fs::read(dir.join("ours.raw")).unwrap();
    let theirs = std::fs::read(dir.join("theirs.raw")).unwrap();
    assert_eq!(ours.len(), theirs.len(), "{image}: sizes");
    if let Some(i) = ours.iter().zip(&theirs).position(|(a, b)| a != b) {
        panic!(
            "{image}: byte {i} is {:#04x}, qemu-img says {:#04x}",
            ours[i], theirs[i]
        );
    }
}

/// A qemu-io workload touching every kind of cluster state.
fn qemu_io_workload(image: &str, cluster: u64, dir: &Path) {
    let c = cluster;
    let cmds = [
        format!("write -P 1 0 {}", 3 * c),
        format!("write -P 2 {} {}", c / 2, c),
        format!("write -P 3 {} 1536", 7 * c + 512),
        format!("write -z {} {}", c, c),
        format!("write -z -u {} {}", 2 * c, c),
        format!("discard {} {}", 7 * c, c),
        format!("write -P 4 {} 4096", 40 * c),
        "flush".to_string(),
    ];
    let mut args = vec!["-f", "qcow2"];
    for c in &cmds {
        args.push("-c");
        args.push(c);
    }
    args.push(image);
    run("qemu-io", &args, dir);
}

#[test]
fn qemu_made_images_read_as_qemu_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let matrix: [(u64, u32, &str); 7] = [
        (512, 16, "1.1"),
        (4096, 1, "1.1"),
        (65536, 8, "1.1"),
        (65536, 16, "0.10"),
        (65536, 64, "1.1"),
        (1 << 20, 16, "1.1"),
        (2 << 20, 16, "0.10"),
    ];
    for (cluster, bits, compat) in matrix {
        let opts = format!("cluster_size={cluster},refcount_bits={bits},compat={compat}");
        let size = (64 * cluster).max(8 << 20).to_string();
        run(
            "qemu-img",
            &["create", "-f", "qcow2", "-o", &opts, "q.qcow2", &size],
            d,
        );
        qemu_io_workload("q.qcow2", cluster, d);
        assert_converts_alike("q.qcow2", d);
    }
}

#[test]
fn backing_chains_of_qcow2_and_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("base")).unwrap();
    // base/base.raw <- base/mid.qcow2 (relative name) <- top.qcow2 (names
    // "base/mid.qcow2", relative to top's directory).
    run(
        "qemu-img",
        &["create", "-f", "raw", "base/base.raw", "6M"],
        d,
    );
    run(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 9 0 6M", "base/base.raw"],
        d,
    );
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "base.raw",
            "-F",
            "raw",
            "base/mid.qcow2",
            "8M",
        ],
        d,
    );
    run(
        "qemu-io",
        &[
            "-c",
            "write -P 8 1M 100k",
            "-c",
            "write -z 3M 64k",
            "base/mid.qcow2",
        ],
        d,
    );
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "mid.qcow2",
            "-F",
            "qcow2",
            "base/top0.qcow2",
        ],
        d,
    );
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "base/top0.qcow2",
            "-F",
            "qcow2",
            "top.qcow2",
        ],
        d,
    );
    run(
        "qemu-io",
        &[
            "-c",
            "write -P 7 1050k 20k",
            "-c",
            "discard 5M 64k",
            "top.qcow2",
        ],
        d,
    );
    assert_converts_alike("top.qcow2", d);
    // Reads through qcsim io see the chain: top's data, mid's, base's, and
    // zeroes past the shorter raw base.
    let out = qcsim(
        &[
            "io",
            "-r",
            "-c",
            "read -P 7 1050k 20k",
            "-c",
            "read -P 8 1M 26k",
            "-c",
            "read -P 9 0 1M",
            "-c",
            "read -P 0 3M 64k",
            "-c",
            "read -P 0 6M 2M",
            "top.qcow2",
        ],
        d,
    );
    // Five reads, each its result line and its timing line.
    assert_eq!(out.lines().count(), 10, "{out}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("read ")).count(),
        5,
        "{out}"
    );
}

#[test]
fn dirty_lazy_refcount_images_read_as_qemu_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "lazy_refcounts=on",
            "lz.qcow2",
            "4M",
        ],
        d,
    );
    // qemu-io aborts on purpose, leaving the dirty bit set.
    let out = exec(
        "qemu-io",
        &["-c", "write -P 3 0 128k", "-c", "abort", "lz.qcow2"],
        d,
    );
    assert!(!out.status.success());
    let info: serde_json::Value =
        serde_json::from_str(&qcsim(&["info", "--output", "json", "lz.qcow2"], d)).unwrap();
    assert_eq!(info["dirty-flag"], true);
    assert_converts_alike("lz.qcow2", d);
    // A read-write open repairs the refcounts; after a clean close the
    // image is clean and not dirty, and still holds both writes.
    qcsim(&["io", "-c", "write -P 4 1M 64k", "lz.qcow2"], d);
    assert_clean("lz.qcow2", d);
    let info: serde_json::Value =
        serde_json::from_str(&qcsim(&["info", "--output", "json", "lz.qcow2"], d)).unwrap();
    assert_eq!(info["dirty-flag"], false);
    run(
        "qemu-io",
        &[
            "-c",
            "read -P 3 0 128k",
            "-c",
            "read -P 4 1M 64k",
            "lz.qcow2",
        ],
        d,
    );
}

#[test]
fn qcsim_created_images_pass_qemu_img_check_and_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let matrix: [&str; 6] = [
        "cluster_size=512",
        "cluster_size=4k,refcount_bits=1",
        "cluster_size=64k,refcount_bits=8,lazy_refcounts=on",
        "compat=0.10",
        "cluster_size=64k,refcount_bits=64",
        "cluster_size=2M,extended_l2=off",
    ];
    const SIZE: u64 = 8 << 20;
    for (seed, opts) in matrix.iter().enumerate() {
        qcsim(&["create", "-f", "qcow2", "-o", opts, "m.qcow2", "8M"], d);
        let mut rng = ChaCha8Rng::seed_from_u64(seed as u64);
        let mut model = vec![0u8; SIZE as usize];
        let mut cmds = Vec::new();
        for _ in 0..40 {
            let off = rng.gen_range(0..SIZE / 512 - 256) * 512;
            let len = rng.gen_range(1..256u64) * 512;
            let range = off as usize..(off + len) as usize;
            match rng.gen_range(0..10) {
                0 => {
                    cmds.push(format!("write -z {off} {len}"));
                    model[range].fill(0);
                }
                1 => {
                    cmds.push(format!("write -z -u {off} {len}"));
                    model[range].fill(0);
                }
                _ => {
                    let p: u8 = rng.gen_range(1..=255);
                    cmds.push(format!("write -P {p} {off} {len}"));
                    model[range].fill(p);
                }
            }
        }
        cmds.push("flush".into());
        let mut args = vec!["io", "-f", "qcow2"];
        for c in &cmds {
            args.push("-c");
            args.push(c);
        }
        args.push("m.qcow2");
        qcsim(&args, d);
        assert_clean("m.qcow2", d);
        run(
            "qemu-img",
            &["convert", "-O", "raw", "m.qcow2", "theirs.raw"],
            d,
        );
        let theirs = std::fs::read(d.join("theirs.raw")).unwrap();
        if let Some(i) = theirs.iter().zip(&model).position(|(a, b)| a != b) {
            panic!(
                "{opts}: byte {i} is {:#04x}, model says {:#04x}",
                theirs[i], model[i]
            );
        }
        assert_converts_alike("m.qcow2", d);
    }
}

#[test]
fn info_agrees_with_qemu_img() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run("qemu-img", &["create", "-f", "raw", "b.raw", "1M"], d);
    for (opts, backing) in [
        ("cluster_size=4k,refcount_bits=8,lazy_refcounts=on", false),
        ("compat=0.10", false),
        ("cluster_size=64k,refcount_bits=32", true),
    ] {
        let mut args = vec!["create", "-f", "qcow2", "-o", opts];
        if backing {
            args.extend(["-b", "b.raw", "-F", "raw"]);
        }
        args.extend(["i.qcow2", "2M"]);
        qcsim(&args, d);
        let ours: serde_json::Value =
            serde_json::from_str(&qcsim(&["info", "--output", "json", "i.qcow2"], d)).unwrap();
        let theirs: serde_json::Value = serde_json::from_slice(
            &run("qemu-img", &["info", "--output", "json", "i.qcow2"], d).stdout,
        )
        .unwrap();
        // The whole document, the file child node and sizes included.
        assert_eq!(ours, theirs, "{opts}");
        // And the human layout, line for line.
        let ours = qcsim(&["info", "i.qcow2"], d);
        let theirs = String::from_utf8(run("qemu-img", &["info", "i.qcow2"], d).stdout).unwrap();
        assert_eq!(ours, theirs, "{opts}");
    }
}

#[test]
fn convert_to_qcow2_passes_check_and_compares_equal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &["create", "-f", "qcow2", "src.qcow2", "16M"],
        d,
    );
    qemu_io_workload("src.qcow2", 65536, d);
    // 2 MiB clusters are larger than convert's 1 MiB chunks.
    qcsim(
        &[
            "convert",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=2M",
            "src.qcow2",
            "big.qcow2",
        ],
        d,
    );
    assert_clean("big.qcow2", d);
    run("qemu-img", &["compare", "src.qcow2", "big.qcow2"], d);
    qcsim(
        &[
            "convert",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "src.qcow2",
            "dst.qcow2",
        ],
        d,
    );
    assert_clean("dst.qcow2", d);
    run("qemu-img", &["compare", "src.qcow2", "dst.qcow2"], d);
    // Zero areas stay unallocated: far fewer clusters than 16M / 4k.
    let map = run("qemu-img", &["map", "--output", "json", "dst.qcow2"], d).stdout;
    let map: serde_json::Value = serde_json::from_slice(&map).unwrap();
    let data: u64 = map
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"] == true)
        .map(|e| e["length"].as_u64().unwrap())
        .sum();
    assert!(data < 1 << 20, "{data} bytes of data allocated");
}

#[test]
fn create_with_backing_takes_its_size_and_chain_errors_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run("qemu-img", &["create", "-f", "raw", "b.raw", "3M"], d);
    qcsim(
        &[
            "create", "-f", "qcow2", "-b", "b.raw", "-F", "raw", "t.qcow2",
        ],
        d,
    );
    let info: serde_json::Value = serde_json::from_slice(
        &run("qemu-img", &["info", "--output", "json", "t.qcow2"], d).stdout,
    )
    .unwrap();
    assert_eq!(info["virtual-size"], 3 << 20);
    assert_eq!(info["backing-filename"], "b.raw");
    // A relative backing name is relative to the new image's directory.
    std::fs::create_dir(d.join("sub")).unwrap();
    run("qemu-img", &["create", "-f", "raw", "sub/s.raw", "2M"], d);
    qcsim(&["create", "-b", "s.raw", "-F", "raw", "sub/t.qcow2"], d);
    let info: serde_json::Value =
        serde_json::from_str(&qcsim(&["info", "--output", "json", "sub/t.qcow2"], d)).unwrap();
    assert_eq!(info["virtual-size"], 2 << 20);
    assert_eq!(info["backing-filename"], "s.raw");
    assert_eq!(info["full-backing-filename"], "sub/s.raw");
    // Missing backing file: info still describes the image (it does not
    // open the chain); io names the missing file.
    std::fs::rename(d.join("b.raw"), d.join("gone.raw")).unwrap();
    let info: serde_json::Value =
        serde_json::from_str(&qcsim(&["info", "--output", "json", "t.qcow2"], d)).unwrap();
    assert_eq!(info["backing-filename"], "b.raw");
    let out = exec(QCSIM, &["io", "-c", "read 0 1", "t.qcow2"], d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("b.raw"), "{err}");
    // A loop: a -> b -> a.
    qcsim(
        &[
            "create", "-f", "qcow2", "-u", "-b", "b.qcow2", "-F", "qcow2", "a.qcow2", "1M",
        ],
        d,
    );
    qcsim(
        &[
            "create", "-f", "qcow2", "-u", "-b", "a.qcow2", "-F", "qcow2", "b.qcow2", "1M",
        ],
        d,
    );
    let out = exec(QCSIM, &["io", "-c", "read 0 1", "a.qcow2"], d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("loops"), "{err}");
}

#[test]
fn backing_chains_open_up_to_the_depth_limit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // c0 is the bottom; c{i} is backed by c{i-1}. With the limit at 64
    // backing files, c64 opens and c65 is refused.
    run("qemu-img", &["create", "-f", "qcow2", "c0.qcow2", "1M"], d);
    run("qemu-io", &["-c", "write -P 5 0 4k", "c0.qcow2"], d);
    for i in 1..=65 {
        let (prev, this) = (format!("c{}.qcow2", i - 1), format!("c{i}.qcow2"));
        qcsim(
            &[
                "create", "-q", "-u", "-b", &prev, "-F", "qcow2", &this, "1M",
            ],
            d,
        );
    }
    let out = qcsim(&["io", "-r", "-c", "read -P 5 0 4k", "c64.qcow2"], d);
    assert_eq!(
        crate::support::untimed(&out),
        "read 4096/4096 bytes at offset 0\n4 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n"
    );
    let out = exec(QCSIM, &["io", "-r", "-c", "read 0 4k", "c65.qcow2"], d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("deeper than 64"), "{err}");
}

#[test]
fn o_direct_io_leaves_a_clean_image() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // 512-byte clusters: most metadata and data requests are smaller than
    // the O_DIRECT alignment and take the buffered path beside direct ones.
    for opts in ["cluster_size=512", "cluster_size=64k"] {
        qcsim(&["create", "-q", "-o", opts, "n.qcow2", "8M"], d);
        qcsim(
            &[
                "io",
                "-n",
                "-c",
                "write -P 1 0 1M",
                "-c",
                "write -P 2 1000 5000",
                "-c",
                "write -z 2M 64k",
                "-c",
                "write -P 3 4M 192k",
                "-c",
                "read -P 3 4M 192k",
                "-c",
                "flush",
                "n.qcow2",
            ],
            d,
        );
        assert_clean("n.qcow2", d);
        run(
            "qemu-io",
            &[
                "-c",
                "read -P 1 0 1000",
                "-c",
                "read -P 2 1000 5000",
                "-c",
                "read -P 1 6000 1042576",
                "-c",
                "read -P 3 4M 192k",
                "n.qcow2",
            ],
            d,
        );
        assert_converts_alike("n.qcow2", d);
    }
}

#[test]
fn create_prints_and_makes_what_qemu_img_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for sub in ["ours", "theirs"] {
        std::fs::create_dir(d.join(sub)).unwrap();
        run(
            "qemu-img",
            &["create", "-q", "-f", "raw", "base.raw", "3M"],
            &d.join(sub),
        );
    }
    let cases: [&[&str]; 6] = [
        &["-o", "cluster_size=4k", "f.qcow2", "1G"],
        &["-o", "compat=v2", "f.qcow2", "1M"],
        &[
            "-o",
            "compat=1.1,lazy_refcounts=on,refcount_bits=1",
            "f.qcow2",
            "1M",
        ],
        &["-o", "cluster_size=2M,refcount_bits=64", "f.qcow2", "64M"],
        &["-b", "base.raw", "-F", "raw", "f.qcow2"],
        &[
            "-o",
            "backing_file=base.raw,backing_fmt=raw",
            "f.qcow2",
            "5M",
        ],
    ];
    for args in cases {
        let ours = {
            let mut a = vec!["create", "-f", "qcow2"];
            a.extend_from_slice(args);
            qcsim(&a, &d.join("ours"))
        };
        let theirs = {
            let mut a = vec!["create", "-f", "qcow2"];
            a.extend_from_slice(args);
            String::from_utf8(run("qemu-img", &a, &d.join("theirs")).stdout).unwrap()
        };
        assert_eq!(ours, theirs, "{args:?}");
        let info = |sub: &str| -> serde_json::Value {
            let out = run(
                "qemu-img",
                &["info", "--output", "json", "f.qcow2"],
                &d.join(sub),
            );
            serde_json::from_slice(&out.stdout).unwrap()
        };
        let (ours, theirs) = (info("ours"), info("theirs"));
        for key in [
            "virtual-size",
            "cluster-size",
            "format-specific",
            "backing-filename",
            "backing-filename-format",
        ] {
            assert_eq!(ours[key], theirs[key], "{args:?}: {key}");
        }
        assert_clean("ours/f.qcow2", d);
    }
}
