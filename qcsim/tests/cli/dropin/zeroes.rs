//! Where write_zeroes leaves clusters, beside QEMU's: a zeroed cluster
//! keeps its host cluster unless the request may unmap, an unaligned
//! request whose cluster otherwise reads as zeroes makes a zero cluster
//! and allocates nothing (iotest 154), commit's zeroes free what they
//! cover and new refcount blocks go where QEMU puts them (iotest 313).
//! Compared by `qemu-img map --output=json` and `check`, whose offsets
//! and end offset name host clusters, and read back by QEMU.

use super::Twins;

#[test]
fn zeroed_clusters_are_kept_or_freed_as_qemu_keeps_them() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "t.qcow2",
            "1M",
        ],
    );
    t.same("qemu-io", &["-c", "write -P 1 0 64k", "t.qcow2"]);
    // Kept (no -u), freed (-u), a compressed one freed either way.
    t.same("qemu-io", &["-c", "write -z 0 16k", "t.qcow2"]);
    t.same("qemu-io", &["-c", "write -z -u 16k 16k", "t.qcow2"]);
    t.same("qemu-io", &["-c", "write -c -P 2 64k 4k", "t.qcow2"]);
    t.same("qemu-io", &["-c", "write -z 64k 4k", "t.qcow2"]);
    // A partial write into a kept cluster, and whole clusters zeroed
    // where there was no L2 table (past the first 2 MiB of one table
    // there is none; here the whole disk is one table, so zero a range
    // never written).
    t.same("qemu-io", &["-c", "write -P 3 1k 1k", "t.qcow2"]);
    t.same("qemu-io", &["-c", "write -z 512k 64k", "t.qcow2"]);
    t.same("qemu-img", &["map", "--output=json", "t.qcow2"]);
    t.same("qemu-img", &["check", "t.qcow2"]);
    t.on_both(
        "qemu-io",
        &["-c", "read -P 0 0 1k", "-c", "read -P 3 1k 1k", "t.qcow2"],
    );
}

#[test]
fn an_unaligned_write_zeroes_makes_a_zero_cluster_where_the_rest_reads_zero() {
    let t = Twins::new();
    // A base of 512-byte clusters: one sector of data, the rest holes.
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=512",
            "b.qcow2",
            "1M",
        ],
    );
    t.same("qemu-io", &["-c", "write -P 1 32k 512", "b.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "-b",
            "b.qcow2",
            "-F",
            "qcow2",
            "t.qcow2",
            "1M",
        ],
    );
    // Head, tail, middle and two-cluster requests over holes; then one
    // whose cluster holds backing data (which must be copied).
    for cmd in [
        "write -z 0 2k",
        "write -z 10k 2k",
        "write -z 17k 2k",
        "write -z 27k 2k",
        "write -z 33k 1k",
    ] {
        t.same("qemu-io", &["-c", cmd, "t.qcow2"]);
    }
    t.same("qemu-img", &["map", "--output=json", "t.qcow2"]);
    t.same("qemu-img", &["check", "t.qcow2"]);
    t.on_both(
        "qemu-io",
        &[
            "-c",
            "read -P 1 32k 512",
            "-c",
            "read -P 0 33k 1k",
            "t.qcow2",
        ],
    );
}

#[test]
fn commit_of_zeroes_and_new_refcount_blocks_land_as_in_qemu() {
    let t = Twins::new();
    // 64-bit refcounts of 4 KiB clusters: a refcount block counts 512
    // clusters, so 6 MiB of data needs three more blocks.
    let opts = "cluster_size=4096,refcount_bits=64";
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "-o", opts, "b.qcow2", "6M"],
    );
    t.same("qemu-io", &["-c", "write -P 1 0 6M", "b.qcow2"]);
    t.same("qemu-img", &["check", "b.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "create", "-q", "-f", "qcow2", "-o", opts, "-b", "b.qcow2", "-F", "qcow2", "t.qcow2",
        ],
    );
    t.same("qemu-io", &["-c", "write -z 0 6M", "t.qcow2"]);
    t.same("qemu-img", &["commit", "t.qcow2"]);
    t.same("qemu-img", &["check", "b.qcow2"]);
    t.same("qemu-img", &["map", "--output=json", "b.qcow2"]);
}
