//! The file commands on raw images, with QEMU as the independent oracle:
//! what `qcsim io` writes `qemu-io` reads back and the other way round,
//! `qcsim convert` of a raw image equals `qemu-img convert` of it and stays
//! sparse, and `qcsim info` agrees with `qemu-img info` on the fields both
//! report. (The qcow2 counterparts live in `cli_interop.rs`.)

use crate::support::{qcsim, run};
use std::os::unix::fs::MetadataExt;

#[test]
fn io_writes_are_what_qemu_io_reads_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run("qemu-img", &["create", "-f", "raw", "d.raw", "4M"], d);
    let out = qcsim(
        &[
            "io",
            "-c",
            "write -P 0xab 0 64k",
            "-c",
            "write -P 0x12 1000 3000",
            "-c",
            "write -z 1M 128k",
            "-c",
            "write -z -u 2M 1M",
            "-c",
            "flush",
            "d.raw",
        ],
        d,
    );
    assert_eq!(
        crate::support::untimed(&out),
        "wrote 65536/65536 bytes at offset 0\n64 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n\
         wrote 3000/3000 bytes at offset 1000\n2.930 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n\
         wrote 131072/131072 bytes at offset 1048576\n128 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n\
         wrote 1048576/1048576 bytes at offset 2097152\n1 MiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n"
    );
    run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "read -P 0xab 0 1000",
            "-c",
            "read -P 0x12 1000 3000",
            "-c",
            "read -P 0xab 4000 61536",
            "-c",
            "read -P 0 64k 4032k",
            "d.raw",
        ],
        d,
    );
    // And the other way round, with qcsim verifying.
    run(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 0x77 3M 512k", "d.raw"],
        d,
    );
    let out = qcsim(
        &[
            "io",
            "-r",
            "-c",
            "read -P 0x77 3M 512k",
            "-c",
            "read -P 0 3584k 512k",
            "d.raw",
        ],
        d,
    );
    assert_eq!(
        crate::support::untimed(&out),
        "read 524288/524288 bytes at offset 3145728\n512 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n\
         read 524288/524288 bytes at offset 3670016\n512 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n"
    );
}

#[test]
fn read_v_dumps_like_qemu_io() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut data = vec![0u8; 4096];
    data[..26].copy_from_slice(b"abcdefghijklmnopqrstuvwxyz");
    data[30] = 0xff;
    std::fs::write(d.join("d.raw"), &data).unwrap();
    let ours = qcsim(&["io", "-c", "read -v 8 40", "d.raw"], d);
    let theirs = run("qemu-io", &["-f", "raw", "-c", "read -v 8 40", "d.raw"], d).stdout;
    let theirs = String::from_utf8(theirs).unwrap();
    // The same once the timings, which differ run to run, are filtered.
    assert_eq!(
        crate::support::untimed(&ours),
        crate::support::untimed(&theirs)
    );
}

#[test]
fn convert_matches_qemu_img_and_stays_sparse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run("qemu-img", &["create", "-f", "raw", "src.raw", "9M"], d);
    run(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 1 0 4k",
            "-c",
            "write -P 2 1M 1M",
            "-c",
            "write -P 3 8M 1k",
            "-c",
            "write -P 4 9215k 1k",
            "src.raw",
        ],
        d,
    );
    qcsim(
        &["convert", "-f", "raw", "-O", "raw", "src.raw", "ours.raw"],
        d,
    );
    run(
        "qemu-img",
        &["convert", "-O", "raw", "src.raw", "theirs.raw"],
        d,
    );
    let ours = std::fs::read(d.join("ours.raw")).unwrap();
    let theirs = std::fs::read(d.join("theirs.raw")).unwrap();
    assert_eq!(ours.len(), 9 << 20);
    assert!(
        ours == theirs,
        "qcsim convert differs from qemu-img convert"
    );
    // 4k + 1M + 1k + 1k of data: far less than 9 MiB allocated.
    let allocated = std::fs::metadata(d.join("ours.raw")).unwrap().blocks() * 512;
    assert!(allocated < 2 << 20, "{allocated} bytes allocated");
    // qemu-img compare agrees too.
    run(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", "ours.raw", "src.raw"],
        d,
    );
}

#[test]
fn info_agrees_with_qemu_img_on_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run("qemu-img", &["create", "-f", "raw", "d.raw", "3M"], d);
    run("qemu-io", &["-f", "raw", "-c", "write 0 64k", "d.raw"], d);
    let ours: serde_json::Value =
        serde_json::from_str(&qcsim(&["info", "--output", "json", "d.raw"], d)).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_slice(&run("qemu-img", &["info", "--output", "json", "d.raw"], d).stdout)
            .unwrap();
    assert_eq!(ours, theirs);
    let human = qcsim(&["info", "d.raw"], d);
    assert!(
        human.starts_with("image: d.raw\nfile format: raw\nvirtual size: 3 MiB (3145728 bytes)\n"),
        "{human}"
    );
}
