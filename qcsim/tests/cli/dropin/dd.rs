//! `qemu-img dd` beside QEMU's: whole images copied at several block
//! sizes into qcow2 and raw (as iotests 159 and 170 do), each read back
//! by QEMU's check and compare; the refusals, byte for byte with their
//! exit codes.

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
        // QEMU's own tools on what each wrote. QEMU's dd writes every
        // block, zeroes too; qcsim's leaves them unallocated, as convert
        // does: the allocation lines differ, the verdict not.
        for dir in [&t.qemu, &t.ours] {
            let check = std::process::Command::new("qemu-img")
                .args(["check", &out])
                .current_dir(dir)
                .output()
                .unwrap();
            assert_eq!(check.status.code(), Some(0), "{check:?}");
            assert!(
                String::from_utf8_lossy(&check.stdout)
                    .starts_with("No errors were found on the image.\n"),
                "{check:?}"
            );
        }
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
    ] {
        t.same("qemu-img", args);
    }
}
