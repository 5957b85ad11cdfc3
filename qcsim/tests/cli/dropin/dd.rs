//! `qemu-img dd` beside QEMU's: whole images copied at several block
//! sizes into qcow2 and raw (as iotests 159 and 170 do), each checked and
//! mapped byte for byte (every block written, zeroes too, as QEMU's dd
//! writes them) and read back by QEMU's compare; parts of images with
//! `count=` and `skip=`; the refusals, byte for byte with their exit
//! codes.

use super::Twins;

#[test]
fn dd_copies_an_image_as_qemu_img_does() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1M"],
    );
    t.same("qemu-io", &["-c", "write -P 0xa 0 512k", "t.qcow2"]);
    for bs in ["5", "512", "1999", "64K", "1M"] {
        let of = format!("of=out-{bs}.qcow2");
        let bs_arg = format!("bs={bs}");
        t.same(
            "qemu-img",
            &["dd", "if=t.qcow2", &of, &bs_arg, "-O", "qcow2"],
        );
        let out = format!("out-{bs}.qcow2");
        t.same("qemu-img", &["check", &out]);
        t.same("qemu-img", &["map", "--output=json", &out]);
        assert_eq!(
            t.on_both("qemu-img", &["compare", "t.qcow2", &out]),
            "Images are identical.\n"
        );
    }
    // Raw by default, and qcow2 input named by -f.
    t.same(
        "qemu-img",
        &["dd", "-f", "qcow2", "if=t.qcow2", "of=out.raw"],
    );
    assert_eq!(
        t.on_both(
            "qemu-img",
            &["compare", "-f", "qcow2", "-F", "raw", "t.qcow2", "out.raw"]
        ),
        "Images are identical.\n"
    );
}

#[test]
fn dd_copies_part_of_an_image_with_count_and_skip() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1M"],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 1 0 64k",
            "-c",
            "write -P 2 512k 64k",
            "t.qcow2",
        ],
    );
    for (out, args) in [
        (
            "a.qcow2",
            &["-O", "qcow2", "bs=64k", "skip=4", "count=6"][..],
        ),
        ("b.qcow2", &["-O", "qcow2", "bs=3000", "skip=1", "count=2"]),
        ("c.raw", &["bs=3000", "skip=1", "count=2"]),
        ("d.raw", &["bs=4k", "count=300"]),
        ("e.raw", &["bs=512k", "skip=1", "count=1"]),
        ("f.raw", &["bs=512", "count=2", "count=3"]),
        ("g.raw", &["bs=4k", "count=0"]),
        // Past the end: a warning and an empty output, exit code 0.
        ("h.raw", &["bs=4k", "skip=3000"]),
    ] {
        let of = format!("of={out}");
        let mut cmd = vec!["dd", "if=t.qcow2", &of];
        cmd.extend(args);
        t.same("qemu-img", &cmd);
        t.same("qemu-img", &["map", "--output=json", out]);
        let bytes = |dir: &std::path::Path| std::fs::read(dir.join(out)).unwrap();
        if out.ends_with(".raw") {
            assert_eq!(bytes(&t.ours), bytes(&t.qemu), "{cmd:?}");
        } else {
            t.same("qemu-img", &["check", out]);
        }
    }
}

#[test]
fn dd_refuses_as_qemu_img_does() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1M"],
    );
    for args in [
        &["dd"][..],
        &["dd", "if=a"],
        &["dd", "of=b"],
        &["dd", "bs=0", "if=a", "of=b"],
        &["dd", "bs=3G", "if=a", "of=b"],
        &["dd", "foo=1", "if=a", "of=b"],
        &["dd", "if=missing", "of=b"],
        &["dd", "-O", "vmdk9", "if=t.qcow2", "of=b"],
        &["dd", "bs=x", "if=t.qcow2", "of=b"],
        &["dd", "count=x", "if=t.qcow2", "of=b"],
        &["dd", "count=-1", "if=t.qcow2", "of=b"],
        &["dd", "count=1k", "if=t.qcow2", "of=b"],
        &["dd", "skip=x", "if=t.qcow2", "of=b"],
        &["dd", "skip=-2", "if=t.qcow2", "of=b"],
    ] {
        t.same("qemu-img", args);
    }
}
