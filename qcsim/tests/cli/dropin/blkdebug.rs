//! QEMU's `blkdebug` driver with no rules, beside QEMU's tools: under the
//! format (`blkdebug::FILE`, `file.align=`) and over it (`driver=blkdebug`,
//! `image.driver=`), in qemu-io's `open -o` and qemu-img's
//! `--image-opts`; its limits checked in QEMU's words, and its
//! `opt-write-zero` leaving the head and tail of a zeroing written as
//! data, as QEMU's block layer does when blkdebug refuses short zeroings.

use super::Twins;

#[test]
fn blkdebug_without_rules_passes_requests_through() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=2k", "a.qcow2", "1M");
    // Under the format, its alignment larger than a cluster.
    t.same(
        "qemu-io",
        &[
            "-c",
            "open -o driver=qcow2,file.align=4k blkdebug::a.qcow2",
            "-c",
            "write -P 7 0 512",
            "-c",
            "write -z 3k 2k",
            "-c",
            "read -P 7 0 512",
        ],
    );
    t.same("qemu-img", &["check", "a.qcow2"]);
    // Over the format, with transfer limits. (Clusters no smaller than
    // the alignment: QEMU reports block status in whole units of it,
    // which qcsim does not.)
    t.create_qcow2("cluster_size=64k", "a.qcow2", "1M");
    let over = "driver=blkdebug,image.driver=qcow2,align=4k,max-transfer=64k";
    t.same(
        "qemu-io",
        &[
            "-c",
            &format!("open -o {over} blkdebug::a.qcow2"),
            "-c",
            "write -P 9 1000 128k",
            "-c",
            "read -P 9 1000 128k",
            "-c",
            "alloc 0 1",
            "-c",
            "map",
        ],
    );
    t.same(
        "qemu-img",
        &[
            "map",
            "--output=json",
            "--image-opts",
            "driver=blkdebug,image.driver=qcow2,image.file.driver=file,\
             image.file.filename=a.qcow2,align=4k",
        ],
    );
    t.same("qemu-img", &["check", "a.qcow2"]);
    t.same("qemu-img", &["compare", "blkdebug::a.qcow2", "a.qcow2"]);
}

#[test]
fn blkdebug_limits_are_checked_in_qemus_words() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "a.qcow2", "1M");
    for limits in [
        "align=3k",
        "align=2G",
        "max-transfer=3G",
        "align=512,file.max-transfer=1000",
        "align=4k,file.opt-write-zero=6k",
        "align=4k,file.max-write-zero=6k",
        "align=4k,file.opt-discard=6k",
        "align=4k,file.max-discard=6k",
        // No alignment: any size will do.
        "max-transfer=1000",
        "opt-write-zero=1000",
    ] {
        t.same(
            "qemu-io",
            &[
                "-c",
                &format!("open -o driver=qcow2,file.{limits} blkdebug::a.qcow2"),
                "-c",
                "write 0 512",
            ],
        );
    }
}

#[test]
fn blkdebug_rules_are_refused_by_name() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "a.qcow2", "1M");
    for args in [
        vec![
            "-c",
            "open -o driver=qcow2,file.inject-error.event=l2_update blkdebug::a.qcow2",
        ],
        vec!["-c", "open blkdebug:rules.conf:a.qcow2"],
    ] {
        let o = std::process::Command::new(t.ours_as("qemu-io"))
            .args(&args)
            .current_dir(&t.ours)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("blkdebug rules") && err.contains("not supported by qcsim"),
            "{args:?}: {err}"
        );
    }
}

/// A zeroing through blkdebug with `opt-write-zero`: the whole units in
/// the middle become zero clusters, the pieces before and after them are
/// written as data, so `map` shows them allocated, as QEMU's does.
#[test]
fn opt_write_zero_writes_the_head_and_tail_as_data() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=1M", "a.qcow2", "64M");
    t.same("qemu-io", &["-c", "write -P 22 0 64M", "a.qcow2"]);
    let open = "open -o driver=blkdebug,image.driver=qcow2,align=512,\
                opt-write-zero=15M,max-write-zero=15M blkdebug::a.qcow2";
    t.same(
        "qemu-io",
        &[
            "-c",
            open,
            "-c",
            "write -z 16M 32M",
            "-c",
            "read -P 0 16M 32M",
        ],
    );
    t.same("qemu-img", &["map", "--output=json", "a.qcow2"]);
    t.same("qemu-img", &["check", "a.qcow2"]);
}
