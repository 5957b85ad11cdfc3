//! qemu-io's `truncate` and `reopen -o`, beside QEMU's: grown and shrunk
//! images (the file cut after a shrink, the L2 table under the new end
//! made writable even when a snapshot shares it, so the layout is
//! QEMU's), the refusals in QEMU's words, the usage line after a bad
//! option, the options a reopen may and may not change, and the node
//! graph (drivers, node names) a reopen may repeat but not change.

use super::Twins;

#[test]
fn truncate_grows_and_shrinks_as_qemu_io_does() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "a.qcow2", "1M");
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 1 0 1M",
            "-c",
            "truncate 2M",
            "-c",
            "length",
            "-c",
            "truncate 512k",
            "-c",
            "l",
            "-c",
            "read -P 1 0 512k",
            "-c",
            "truncate 1000",
            "-c",
            "truncate x",
            "-c",
            "truncate",
            "-c",
            "t 3M",
            "-c",
            "truncate -m x 2M",
            "-c",
            "truncate -m off 2M",
            "-c",
            "truncate -m full 1M",
            "-c",
            "truncate 1 2",
            "-c",
            "truncate -q 1M",
            "-c",
            "truncate -- 4M",
            "-c",
            "truncate 9E",
            "-c",
            "truncate -m off",
            "-c",
            "read -P 0 512k 1M",
            "a.qcow2",
        ],
    );
    t.same("qemu-img", &["check", "a.qcow2"]);
    t.same("qemu-img", &["map", "--output=json", "a.qcow2"]);
    t.same("qemu-io", &["-r", "-c", "truncate 4M", "a.qcow2"]);
    // Shrunk under a snapshot: the table that maps the new end is copied.
    t.same("qemu-img", &["snapshot", "-c", "s", "a.qcow2"]);
    t.same("qemu-io", &["-c", "truncate 1M", "-c", "length", "a.qcow2"]);
    t.same("qemu-img", &["check", "a.qcow2"]);
    t.on_both("qemu-img", &["snapshot", "-a", "s", "a.qcow2"]);
    t.on_both("qemu-io", &["-c", "read -P 1 0 512k", "a.qcow2"]);
    // A version 2 image with a snapshot cannot be resized.
    t.create_qcow2("compat=0.10", "b.qcow2", "1M");
    t.same("qemu-img", &["snapshot", "-c", "s", "b.qcow2"]);
    t.same("qemu-io", &["-c", "truncate 2M", "b.qcow2"]);
    // A raw file: any length, counted in whole sectors.
    t.same("qemu-img", &["create", "-q", "-f", "raw", "r.raw", "1M"]);
    t.same(
        "qemu-io",
        &["-f", "raw", "-c", "truncate 1000", "-c", "length", "r.raw"],
    );
}

#[test]
fn a_shrink_through_empty_and_shared_tables_lays_out_as_qemus() {
    let t = Twins::new();
    // No L2 table under the new end: QEMU allocates one.
    t.create_qcow2("cluster_size=64k", "a.qcow2", "4M");
    t.same("qemu-io", &["-c", "truncate 1M", "a.qcow2"]);
    t.same("qemu-img", &["check", "a.qcow2"]);
    // Two tables, both shared with a snapshot: the kept one is copied,
    // the other dropped.
    t.create_qcow2("cluster_size=64k", "c.qcow2", "1G");
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 5 0 64k",
            "-c",
            "write -P 6 600M 64k",
            "c.qcow2",
        ],
    );
    t.same("qemu-img", &["snapshot", "-c", "s", "c.qcow2"]);
    t.same("qemu-io", &["-c", "truncate 1M", "c.qcow2"]);
    t.same("qemu-img", &["check", "c.qcow2"]);
    t.same("qemu-img", &["map", "--output=json", "c.qcow2"]);
    t.on_both("qemu-img", &["snapshot", "-a", "s", "c.qcow2"]);
    t.on_both(
        "qemu-io",
        &[
            "-c",
            "read -P 5 0 64k",
            "-c",
            "read -P 6 600M 64k",
            "c.qcow2",
        ],
    );
}

#[test]
fn reopen_changes_what_qemu_lets_it_change() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "d.qcow2", "1M");
    t.same(
        "qemu-io",
        &[
            "-c",
            "reopen -o read-only=off",
            "-c",
            "write -P 1 0 512",
            "-c",
            "reopen -o driver=raw",
            "-c",
            "reopen -o foo=bar",
            "-c",
            "reopen -o l2-cache-size=1M",
            "-c",
            "reopen -o cache.direct=on",
            "-c",
            "reopen -o detect-zeroes=on",
            "-c",
            "write -P 0 64k 64k",
            "-c",
            "reopen -r -o read-only=off",
            "-c",
            "reopen -o file.filename=x",
            "-c",
            "reopen -o cache.no-flush=on",
            "-c",
            "reopen -o force-share=on",
            "-c",
            "reopen -o file.locking=off",
            "-c",
            "reopen -r",
            "-c",
            "write 0 512",
            "-c",
            "reopen -Z",
            "-c",
            "r -Z 0 1",
            "-c",
            "alloc 1 2 3",
            "-c",
            "read -P 1 0 512",
            "d.qcow2",
        ],
    );
    t.same("qemu-img", &["map", "--output=json", "d.qcow2"]);
}

/// A reopen may repeat the node graph (drivers, node names given at open)
/// but not change it, and `-c` and `-r`/`-w` may not be mixed with the
/// options they stand for: each line beside QEMU's.
#[test]
fn reopen_may_repeat_the_node_graph_but_not_change_it() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "b.qcow2", "1M");
    t.create_overlay("b.qcow2", "t.qcow2", None);
    let lines: &[&[&str]] = &[
        &["-c", "reopen -o node-name=foo"],
        &["-c", "reopen -o file.node-name=foo"],
        &["-c", "reopen -o backing.node-name=foo"],
        &[
            "-c",
            "open -o node-name=foo t.qcow2",
            "-c",
            "reopen -o node-name=foo",
        ],
        &[
            "-c",
            "open -o node-name=foo t.qcow2",
            "-c",
            "reopen -o node-name=bar",
        ],
        &[
            "-c",
            "open -o file.node-name=foo t.qcow2",
            "-c",
            "reopen -o file.node-name=foo",
        ],
        &[
            "-c",
            "open -o backing.node-name=foo t.qcow2",
            "-c",
            "reopen -o backing.node-name=foo",
        ],
        &[
            "-c",
            "open -o backing.node-name=foo t.qcow2",
            "-c",
            "reopen",
        ],
        &["-c", "reopen -o driver=raw"],
        &["-c", "reopen -o file.driver=qcow2"],
        &["-c", "reopen -o backing.driver=file"],
        &[
            "-c",
            "reopen -o driver=qcow2,file.driver=file,backing.driver=qcow2",
        ],
        &["-c", "reopen -c none -o cache.direct=on"],
        &["-c", "reopen -c directsync -o cache.no-flush=on"],
        &["-c", "reopen -o auto-read-only=qux"],
        &[
            "-c",
            "reopen -o auto-read-only=on",
            "-c",
            "write -P 1 0 512",
            "-c",
            "read -P 1 0 512",
        ],
    ];
    for line in lines {
        let mut args = line.to_vec();
        // The image named on the command line unless the line opens it.
        if !line.iter().any(|a| a.starts_with("open ")) {
            args.push("t.qcow2");
        }
        t.same("qemu-io", &args);
    }
}
