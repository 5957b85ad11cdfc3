//! `qemu-img amend` beside QEMU's: the refusals and the `-p` lines byte
//! for byte; images qcsim amended (up to version 3, down to version 2
//! with zero clusters converted, lazy refcounts on and off, a dirty image
//! made clean) pass QEMU's check and read as QEMU's `info` and `qemu-io`
//! expect; images QEMU amended read back in qcsim.

use std::path::Path;

use super::{info_layout, Twins};
use crate::support::exec;

/// QEMU's check finds `image` in `dir` clean.
fn qemu_clean(dir: &Path, image: &str) {
    let o = exec("qemu-img", &["check", image], dir);
    assert_eq!(
        o.status.code(),
        Some(0),
        "qemu-img check {image}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// QEMU's `info` of `image`: the same in both directories (but for the
/// sizes on disk); returns it.
fn same_qemu_info(t: &Twins, image: &str) -> String {
    let theirs = exec("qemu-img", &["info", image], &t.qemu);
    let ours = exec("qemu-img", &["info", image], &t.ours);
    assert_eq!(info_layout(&ours), info_layout(&theirs), "info {image}");
    info_layout(&ours)
}

#[test]
fn amend_refuses_as_qemu_img_does() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "a.qcow2", "1M"],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=0.10",
            "v2.qcow2",
            "1M",
        ],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "refcount_bits=8",
            "r8.qcow2",
            "1M",
        ],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "extended_l2=on",
            "x.qcow2",
            "1M",
        ],
    );
    t.same("qemu-img", &["create", "-q", "-f", "raw", "r.raw", "1M"]);
    for args in [
        &["amend"][..],
        &["amend", "a.qcow2"],
        &["amend", "-o", "compat=1.1"],
        &["amend", "-o", "compat=1.1", "a.qcow2", "b"],
        &["amend", "-U", "-o", "compat=1.1", "a.qcow2"],
        &["amend", "-o", "", "a.qcow2"],
        &["amend", "-o", "compat=1.1", "missing.qcow2"],
        &["amend", "-o", "foo=bar", "missing.qcow2"],
        &["amend", "-f", "raw", "-o", "size=2M", "r.raw"],
        &["amend", "-o", "compat=1.1", "r.raw"],
        &["amend", "-f", "qcow2", "-o", "compat=1.1", "r.raw"],
        &["amend", "-f", "foo", "-o", "compat=1.1", "a.qcow2"],
        &["amend", "-o", "foo=bar", "a.qcow2"],
        &["amend", "-o", "compat=2", "a.qcow2"],
        &["amend", "-o", "compat=1.1,,x", "a.qcow2"],
        &["amend", "-o", "compat", "a.qcow2"],
        &["amend", "-o", "cluster_size=4k", "a.qcow2"],
        &["amend", "-o", "compat=1.1,extended_l2=on", "a.qcow2"],
        &["amend", "-o", "preallocation=full", "a.qcow2"],
        &["amend", "-o", "encrypt.format=luks", "a.qcow2"],
        &["amend", "-o", "encrypt.new-secret=x", "a.qcow2"],
        &["amend", "-o", "lazy_refcounts=foo", "a.qcow2"],
        &["amend", "-o", "size=foo", "a.qcow2"],
        &["amend", "-o", "refcount_bits=x", "a.qcow2"],
        &["amend", "-o", "refcount_bits=3", "a.qcow2"],
        &["amend", "-o", "backing_file=x", "a.qcow2"],
        &["amend", "-o", "backing_fmt=raw", "a.qcow2"],
        &["amend", "-o", "data_file=x", "a.qcow2"],
        &["amend", "-o", "data_file_raw=on", "a.qcow2"],
        &["amend", "-o", "compat=v2,lazy_refcounts=on", "a.qcow2"],
        &["amend", "-o", "lazy_refcounts=on", "v2.qcow2"],
        &["amend", "-o", "refcount_bits=8", "v2.qcow2"],
        &["amend", "-o", "compat=0.10", "r8.qcow2"],
        &["amend", "-p", "-o", "compat=0.10", "r8.qcow2"],
        &["amend", "-p", "-o", "foo=1", "a.qcow2"],
        &["amend", "-p", "-o", "compat=1.1", "missing.qcow2"],
        &["amend", "-o", "compat=0.10", "x.qcow2"],
    ] {
        t.same("qemu-img", args);
    }
    // Nothing was changed by a refusal.
    let info = same_qemu_info(&t, "v2.qcow2");
    assert!(info.contains("compat: 0.10"), "{info}");
    same_qemu_info(&t, "x.qcow2");
}

#[test]
fn qcsim_amends_images_qemu_accepts() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=0.10",
            "a.qcow2",
            "64M",
        ],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 7 0 1M",
            "-c",
            "write -P 8 33M 64k",
            "a.qcow2",
        ],
    );
    // Up: the percentages as qemu-img prints them.
    t.same("qemu-img", &["amend", "-p", "-o", "compat=1.1", "a.qcow2"]);
    let info = same_qemu_info(&t, "a.qcow2");
    assert!(info.contains("compat: 1.1"), "{info}");
    qemu_clean(&t.ours, "a.qcow2");
    // Lazy refcounts on, then off; up again is nothing to do.
    t.same("qemu-img", &["amend", "-o", "lazy_refcounts=on", "a.qcow2"]);
    let info = same_qemu_info(&t, "a.qcow2");
    assert!(info.contains("lazy refcounts: true"), "{info}");
    t.same(
        "qemu-img",
        &[
            "amend",
            "-p",
            "-o",
            "lazy_refcounts=off,compat=v3",
            "a.qcow2",
        ],
    );
    let info = same_qemu_info(&t, "a.qcow2");
    assert!(info.contains("lazy refcounts: false"), "{info}");
    qemu_clean(&t.ours, "a.qcow2");
    // Zero clusters, one kept allocated, then down: the guest still reads
    // zeroes there and the data elsewhere.
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -z 4M 1M",
            "-c",
            "write -z 0 64k",
            "-c",
            "write -z -u 128k 64k",
            "a.qcow2",
        ],
    );
    t.same("qemu-img", &["amend", "-p", "-o", "compat=0.10", "a.qcow2"]);
    let info = same_qemu_info(&t, "a.qcow2");
    assert!(info.contains("compat: 0.10"), "{info}");
    qemu_clean(&t.ours, "a.qcow2");
    let read = [
        "-c",
        "read -P 0 0 64k",
        "-c",
        "read -P 7 64k 64k",
        "-c",
        "read -P 0 128k 64k",
        "-c",
        "read -P 7 192k 832k",
        "-c",
        "read -P 0 4M 1M",
        "-c",
        "read -P 8 33M 64k",
    ];
    let mut args: Vec<&str> = read.to_vec();
    args.push("a.qcow2");
    t.on_both("qemu-io", &args);
    // The size through amend, as a resize.
    t.same("qemu-img", &["amend", "-o", "size=128M", "a.qcow2"]);
    let info = same_qemu_info(&t, "a.qcow2");
    assert!(info.contains("(134217728 bytes)"), "{info}");
    qemu_clean(&t.ours, "a.qcow2");
}

#[test]
fn a_dirty_image_is_left_clean_and_zero_clusters_over_a_backing_file_stay_zero() {
    let t = Twins::new();
    let img = t.ours_as("qemu-img");
    // Lazy refcounts and a crash: the image is dirty.
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "lazy_refcounts=on",
            "d.qcow2",
            "16M",
        ],
    );
    for dir in [&t.qemu, &t.ours] {
        let o = exec(
            "qemu-io",
            &["-c", "write -P 3 0 1M", "-c", "abort", "d.qcow2"],
            dir,
        );
        assert_ne!(o.status.code(), Some(0));
    }
    // QEMU's open repairs the refcounts and lists what it did on
    // standard error; qcsim's rebuilds them silently.
    let (theirs, ours) = t.both(
        "qemu-img",
        &["amend", "-o", "lazy_refcounts=off", "d.qcow2"],
    );
    assert_eq!(theirs.status.code(), Some(0), "{theirs:?}");
    assert_eq!(ours.status.code(), Some(0), "{ours:?}");
    assert_eq!(ours.stdout, theirs.stdout);
    let info = same_qemu_info(&t, "d.qcow2");
    assert!(info.contains("lazy refcounts: false"), "{info}");
    qemu_clean(&t.ours, "d.qcow2");
    t.on_both("qemu-io", &["-c", "read -P 3 0 1M", "d.qcow2"]);
    // Zero clusters over a backing file that holds data: down to v2 they
    // must still read as zeroes.
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "base.qcow2", "4M"],
    );
    t.same("qemu-io", &["-c", "write -P 9 0 4M", "base.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "top.qcow2",
        ],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -z 1M 1M",
            "-c",
            "write -P 4 3M 64k",
            "top.qcow2",
        ],
    );
    let o = exec(&img, &["amend", "-o", "compat=0.10", "top.qcow2"], &t.ours);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    qemu_clean(&t.ours, "top.qcow2");
    let o = exec(
        "qemu-io",
        &[
            "-c",
            "read -P 9 0 1M",
            "-c",
            "read -P 0 1M 1M",
            "-c",
            "read -P 9 2M 1M",
            "-c",
            "read -P 4 3M 64k",
            "top.qcow2",
        ],
        &t.ours,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && !out.contains("Pattern verification failed"),
        "{out}"
    );
    let o = exec("qemu-img", &["info", "top.qcow2"], &t.ours);
    assert!(String::from_utf8_lossy(&o.stdout).contains("compat: 0.10"));
}

#[test]
fn images_qemu_amended_read_back_in_qcsim() {
    let t = Twins::new();
    let (img, io) = (t.ours_as("qemu-img"), t.ours_as("qemu-io"));
    let qemu = |args: &[&str]| {
        let o = exec("qemu-img", args, &t.ours);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {o:?}");
    };
    qemu(&[
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        "compat=0.10",
        "q.qcow2",
        "8M",
    ]);
    t.ok(&io, &["-c", "write -P 5 0 1M", "q.qcow2"]);
    qemu(&["amend", "-o", "compat=1.1,lazy_refcounts=on", "q.qcow2"]);
    let info = t.ok(&img, &["info", "q.qcow2"]);
    assert!(
        info.contains("compat: 1.1") && info.contains("lazy refcounts: true"),
        "{info}"
    );
    t.ok(
        &io,
        &["-c", "write -z 2M 1M", "-c", "read -P 5 0 1M", "q.qcow2"],
    );
    qemu(&["amend", "-o", "compat=0.10", "q.qcow2"]);
    let info = t.ok(&img, &["info", "q.qcow2"]);
    assert!(info.contains("compat: 0.10"), "{info}");
    let out = t.ok(
        &io,
        &["-c", "read -P 5 0 1M", "-c", "read -P 0 1M 7M", "q.qcow2"],
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let o = exec(&img, &["check", "q.qcow2"], &t.ours);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn refcount_widths_change_as_qemu_changes_them() {
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
            "write -P 2 40M 3M",
            "a.qcow2",
        ],
    );
    t.same("qemu-img", &["snapshot", "-c", "s", "a.qcow2"]);
    t.same("qemu-io", &["-c", "write -P 3 512k 1M", "a.qcow2"]);
    // A shared cluster's refcount of 2 does not fit one bit.
    t.same("qemu-img", &["amend", "-o", "refcount_bits=1", "a.qcow2"]);
    // (64 bits in qcsim alone: QEMU takes seconds over it.)
    let o = t.ok(
        &t.ours_as("qemu-img"),
        &["amend", "-o", "refcount_bits=64", "a.qcow2"],
    );
    assert_eq!(o, "");
    qemu_clean(&t.ours, "a.qcow2");
    let info = exec("qemu-img", &["info", "a.qcow2"], &t.ours);
    assert!(String::from_utf8_lossy(&info.stdout).contains("refcount bits: 64\n"));
    for bits in ["2", "8", "16"] {
        let o = format!("refcount_bits={bits}");
        t.same("qemu-img", &["amend", "-o", &o, "a.qcow2"]);
        let info = same_qemu_info(&t, "a.qcow2");
        assert!(info.contains(&format!("refcount bits: {bits}\n")), "{info}");
        qemu_clean(&t.ours, "a.qcow2");
    }
    t.same("qemu-img", &["snapshot", "-d", "s", "a.qcow2"]);
    t.same("qemu-img", &["amend", "-o", "refcount_bits=1", "a.qcow2"]);
    qemu_clean(&t.ours, "a.qcow2");
    // qcsim writes with the new width; QEMU reads everything back.
    t.same("qemu-io", &["-c", "write -P 4 10M 2M", "a.qcow2"]);
    qemu_clean(&t.ours, "a.qcow2");
    t.on_both(
        "qemu-io",
        &[
            "-c",
            "read -P 1 0 512k",
            "-c",
            "read -P 3 512k 1M",
            "-c",
            "read -P 4 10M 2M",
            "-c",
            "read -P 2 40M 3M",
            "a.qcow2",
        ],
    );
    // With the version: up and wider at once; down needs 16 bits.
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
    t.same("qemu-io", &["-c", "write -P 1 0 1M", "b.qcow2"]);
    t.same(
        "qemu-img",
        &["amend", "-o", "compat=1.1,refcount_bits=8", "b.qcow2"],
    );
    t.same("qemu-img", &["amend", "-o", "compat=0.10", "b.qcow2"]);
    t.same(
        "qemu-img",
        &["amend", "-o", "compat=0.10,refcount_bits=16", "b.qcow2"],
    );
    let info = same_qemu_info(&t, "b.qcow2");
    assert!(info.contains("compat: 0.10"), "{info}");
    qemu_clean(&t.ours, "b.qcow2");
}

/// A downgrade to version 2 of a zero cluster that keeps a host cluster a
/// snapshot shares: QEMU 10.0 writes zeroes into the shared cluster (the
/// snapshot then reads zeroes there) and marks it COPIED at refcount 2;
/// qcsim converts it as a zero cluster without a host cluster (made
/// unallocated, its reference dropped), so the snapshot keeps its data and
/// QEMU's check finds the image clean. The image is made by QEMU's own
/// tools; only the amend is qcsim's.
#[test]
fn a_downgrade_keeps_the_data_of_a_snapshot_sharing_a_zeroed_cluster() {
    let t = Twins::new();
    let ours = |args: &[&str]| t.ok("qemu-img", args);
    ours(&["create", "-q", "-f", "qcow2", "t.qcow2", "32M"]);
    t.ok("qemu-io", &["-c", "write -P 0x11 0 1M", "t.qcow2"]);
    ours(&["snapshot", "-c", "s1", "t.qcow2"]);
    t.ok("qemu-io", &["-c", "write -z 0 64k", "t.qcow2"]);
    t.ok(
        &t.ours_as("qemu-img"),
        &["amend", "-o", "compat=0.10", "t.qcow2"],
    );
    qemu_clean(&t.ours, "t.qcow2");
    let info = ours(&["info", "t.qcow2"]);
    assert!(info.contains("compat: 0.10"), "{info}");
    ours(&[
        "convert",
        "-O",
        "raw",
        "-l",
        "snapshot.name=s1",
        "t.qcow2",
        "s1.raw",
    ]);
    ours(&["convert", "-O", "raw", "t.qcow2", "active.raw"]);
    let s1 = std::fs::read(t.ours.join("s1.raw")).expect("the snapshot's data");
    let active = std::fs::read(t.ours.join("active.raw")).expect("the active data");
    assert!(
        s1[..1 << 20].iter().all(|&b| b == 0x11),
        "the snapshot lost data: its first bytes {:02x?}",
        &s1[..8]
    );
    assert!(active[..64 << 10].iter().all(|&b| b == 0));
    assert!(active[64 << 10..1 << 20].iter().all(|&b| b == 0x11));
}
