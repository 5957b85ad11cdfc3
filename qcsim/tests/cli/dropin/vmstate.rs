//! qemu-io's `read -b` and `write -b` (the VM state area past the disk),
//! beside QEMU's: the data read back, the L1 table grown by half again as
//! QEMU's driver grows it (so check's end offset and map are QEMU's), VM
//! state kept by an internal snapshot and brought back by applying it,
//! a snapshot whose L1 table is shorter than the current one (iotest
//! 029), a raw image refusing it, as in iotest 022.

use super::Twins;

#[test]
fn vm_state_is_written_and_read_as_qemu_io_does() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "vq.qcow2", "64M");
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -b -P 7 0 4k",
            "-c",
            "read -b -P 7 0 4k",
            "-c",
            "read -b -P 0 1T 4k",
            "-c",
            "write -b -c 0 4k",
            "-c",
            "read -b -P 7 0 4k",
            "-c",
            "write -b -P 0x11 1T 4k",
            "-c",
            "read -b -P 0x11 1T 4k",
            "-c",
            "read -P 0 0 64M",
            "vq.qcow2",
        ],
    );
    t.same("qemu-img", &["check", "vq.qcow2"]);
    t.same("qemu-img", &["map", "--output=json", "vq.qcow2"]);
    t.on_both("qemu-io", &["-c", "read -b -P 0x11 1T 4k", "vq.qcow2"]);
    // A snapshot keeps the VM state; applying it brings it back.
    t.same("qemu-img", &["snapshot", "-c", "foo", "vq.qcow2"]);
    t.same("qemu-io", &["-c", "write -b -P 0x22 1T 4k", "vq.qcow2"]);
    t.same("qemu-img", &["snapshot", "-a", "foo", "vq.qcow2"]);
    t.same("qemu-io", &["-c", "read -b -P 0x11 1T 4k", "vq.qcow2"]);
    t.same("qemu-img", &["check", "vq.qcow2"]);
    // A raw image has no VM state.
    t.same("qemu-img", &["create", "-q", "-f", "raw", "vr.raw", "1M"]);
    t.same(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -b 0 4k",
            "-c",
            "read -b 0 4k",
            "vr.raw",
        ],
    );
}

#[test]
fn the_l1_table_grows_as_qemus_for_vm_state() {
    let t = Twins::new();
    // iotest 022's offsets: 6 GiB of 4 KiB clusters, 3,072 L1 entries.
    t.create_qcow2("cluster_size=4k", "w.qcow2", "6G");
    for off in ["10485760", "4294967296"] {
        let w = format!("write -b -P 5 {off} 4k");
        let r = format!("read -b -P 5 {off} 4k");
        t.same("qemu-io", &["-c", &w, "-c", &r, "w.qcow2"]);
        t.same("qemu-img", &["check", "w.qcow2"]);
    }
    // iotest 029: a snapshot's L1 table shorter than the current one.
    t.create_qcow2("cluster_size=1024", "s.qcow2", "16M");
    t.same("qemu-img", &["snapshot", "-c", "foo", "s.qcow2"]);
    t.same("qemu-io", &["-c", "write -b 0 4M", "s.qcow2"]);
    t.same("qemu-img", &["snapshot", "-a", "foo", "s.qcow2"]);
    t.same("qemu-img", &["check", "s.qcow2"]);
}
