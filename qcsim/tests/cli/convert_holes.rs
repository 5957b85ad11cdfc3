//! `qcsim convert` reads only what the source's block status says holds
//! data: a 1 GiB image with two written clusters converts (to raw and to
//! qcow2) reading exactly those two clusters, the raw output stays sparse,
//! the qcow2 output keeps every other cluster unallocated, and both
//! compare equal to the source under `qemu-img compare`. The same through a
//! backing chain, where the backing file's data is read and its holes are
//! not.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::support::{run, QCSIM};

const CLUSTER: u64 = 64 << 10;

/// The bytes `qcsim convert --stats` says it read from the source.
fn bytes_read(stats: &str) -> u64 {
    let rest = stats
        .split("convert: read ")
        .nth(1)
        .unwrap_or_else(|| panic!("no stats line in {stats}"));
    rest.split(' ').next().unwrap().parse().unwrap()
}

/// Bytes of data the qcow2 image at `name` holds, per `qemu-img map`.
fn mapped_data(name: &str, dir: &Path) -> u64 {
    let out = run("qemu-img", &["map", "--output=json", name], dir);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["data"] == true)
        .map(|e| e["length"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_mostly_empty_gigabyte_converts_without_reading_its_holes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=64k",
            "big.qcow2",
            "1G",
        ],
        d,
    );
    run(
        "qemu-io",
        &[
            "-c",
            "write -P 0x11 0 64k",
            "-c",
            "write -P 0x22 512M 64k",
            "-c",
            "write -P 0x33 768M 64k",
            "-c",
            "write -z 768M 64k",
            "big.qcow2",
        ],
        d,
    );

    let out = run(
        QCSIM,
        &["convert", "--stats", "-O", "raw", "big.qcow2", "big.raw"],
        d,
    );
    let stats = String::from_utf8_lossy(&out.stderr);
    assert_eq!(bytes_read(&stats), 2 * CLUSTER, "{stats}");
    assert!(stats.contains("2 guest reads"), "{stats}");
    let meta = std::fs::metadata(d.join("big.raw")).unwrap();
    assert_eq!(meta.len(), 1 << 30);
    assert!(meta.blocks() * 512 < (1 << 20), "raw output not sparse");
    run("qemu-img", &["compare", "big.qcow2", "big.raw"], d);

    let out = run(
        QCSIM,
        &[
            "convert",
            "--stats",
            "-O",
            "qcow2",
            "big.qcow2",
            "copy.qcow2",
        ],
        d,
    );
    let stats = String::from_utf8_lossy(&out.stderr);
    assert_eq!(bytes_read(&stats), 2 * CLUSTER, "{stats}");
    assert_eq!(mapped_data("copy.qcow2", d), 2 * CLUSTER);
    run("qemu-img", &["compare", "big.qcow2", "copy.qcow2"], d);
    run("qemu-img", &["check", "copy.qcow2"], d);
}

#[test]
fn a_backing_chain_is_read_where_it_holds_data() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=64k",
            "base.qcow2",
            "64M",
        ],
        d,
    );
    run(
        "qemu-io",
        &[
            "-c",
            "write -P 1 0 256k",
            "-c",
            "write -P 2 32M 64k",
            "base.qcow2",
        ],
        d,
    );
    run(
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
            "128M",
        ],
        d,
    );
    // Over the base's data: one cluster rewritten, one zeroed; past the
    // base's end: one more.
    run(
        "qemu-io",
        &[
            "-c",
            "write -P 3 64k 64k",
            "-c",
            "write -z 128k 64k",
            "-c",
            "write -P 4 100M 64k",
            "top.qcow2",
        ],
        d,
    );
    let out = run(
        QCSIM,
        &["convert", "--stats", "-O", "raw", "top.qcow2", "top.raw"],
        d,
    );
    let stats = String::from_utf8_lossy(&out.stderr);
    // base 0..256k less the zeroed cluster, base 32M, top 100M.
    assert_eq!(bytes_read(&stats), 5 * CLUSTER, "{stats}");
    assert!(
        stats.contains(&format!("{} backing bytes read", 3 * CLUSTER)),
        "{stats}"
    );
    run("qemu-img", &["compare", "top.qcow2", "top.raw"], d);

    let out = run(
        QCSIM,
        &[
            "convert",
            "--stats",
            "-O",
            "qcow2",
            "top.qcow2",
            "flat.qcow2",
        ],
        d,
    );
    assert_eq!(
        bytes_read(&String::from_utf8_lossy(&out.stderr)),
        5 * CLUSTER
    );
    assert_eq!(mapped_data("flat.qcow2", d), 5 * CLUSTER);
    run("qemu-img", &["compare", "top.qcow2", "flat.qcow2"], d);
}
