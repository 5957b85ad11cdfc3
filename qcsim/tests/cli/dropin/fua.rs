//! `-f` (force unit access) on qemu-io's write commands, beside QEMU's
//! qemu-io: `write`, `writev`, `aio_write` and zeroing take it and report
//! as without it; `-f` with `-c` or `-b` is refused with qemu-io's words,
//! and so is `writev -z` (only `aio_write` zeroes). The images come out
//! alike: the same map and check, the same data.

use super::Twins;

#[test]
fn write_f_reports_and_refuses_as_qemu_io_does() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "f.qcow2", "4M");
    let cmds = [
        "write -f -P 0x11 0 4k",
        "write -fq -P 0x12 64k 64k",
        "write -f -P 0x13 128k 512",
        "write -f -z 192k 4k",
        "write -zf -u 256k 64k",
        "writev -f -P 0x22 320k 4k 8k",
        // qemu-io reports an aio_write when it completes: one at a time,
        // each waited for, so the order of the reports is fixed.
        "aio_write -f -P 0x33 384k 4k 4k",
        "aio_flush",
        "aio_write -f -z 448k 4k",
        "aio_flush",
        "aio_write -f -z -u 512k 64k",
        "aio_flush",
        "write -c -f 1M 64k",
        "write -f -b 0 4k",
        "writev -f -z 1M 4k",
        "writev -u 1M 4k",
        "write -f -n 1M 4k",
    ];
    let mut args = vec!["-f", "qcow2"];
    for c in &cmds {
        args.extend(["-c", *c]);
    }
    args.push("f.qcow2");
    let out = t.same("qemu-io", &args);
    assert!(out.contains("wrote 4096/4096 bytes at offset 0\n"), "{out}");
    t.same("qemu-img", &["map", "--output=json", "f.qcow2"]);
    t.same("qemu-img", &["check", "f.qcow2"]);
    t.on_both(
        "qemu-io",
        &[
            "-r",
            "-c",
            "read -P 0x11 0 4k",
            "-c",
            "read -P 0x12 64k 64k",
            "-c",
            "read -P 0x13 128k 512",
            "-c",
            "read -P 0 192k 4k",
            "-c",
            "read -P 0 256k 64k",
            "-c",
            "read -P 0x22 320k 12k",
            "-c",
            "read -P 0x33 384k 8k",
            "-c",
            "read -P 0 448k 128k",
            "-c",
            "read -P 0 1M 64k",
            "f.qcow2",
        ],
    );

    // A raw image takes -f the same way.
    t.same("qemu-img", &["create", "-q", "-f", "raw", "f.raw", "1M"]);
    t.same(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -f -P 0x44 4k 8k",
            "-c",
            "write -f -z 8k 4k",
            "-c",
            "read -P 0x44 4k 4k",
            "-c",
            "read -P 0 8k 4k",
            "f.raw",
        ],
    );
}
