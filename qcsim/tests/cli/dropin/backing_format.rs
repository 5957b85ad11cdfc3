//! Backing formats beside QEMU's tools: `rebase -F` takes any driver name
//! QEMU knows (stored as given) and a backing file needs one (rebase and
//! convert refuse without it, before anything is written); of several
//! backing format extensions the last counts, and `backing.driver`
//! overrides it. Also the creation options of the file protocol
//! (`nocow`, `extent_size_hint`) and where a new image's file ends.

use std::path::Path;

use super::Twins;

/// Add a backing format extension naming `format` after the image's
/// others (as QEMU's iotests do with their header tool), moving the
/// backing file's name behind it.
fn add_backing_format_extension(file: &Path, format: &str) {
    let mut b = std::fs::read(file).unwrap();
    let be32 = |b: &[u8], o: usize| u32::from_be_bytes(b[o..o + 4].try_into().unwrap()) as usize;
    let name_at = u64::from_be_bytes(b[8..16].try_into().unwrap()) as usize;
    let name = b[name_at..name_at + be32(&b, 16)].to_vec();
    let mut at = be32(&b, 100);
    while be32(&b, at) != 0 {
        at += 8 + be32(&b, at + 4).next_multiple_of(8);
    }
    let mut ext = Vec::new();
    ext.extend(0xe279_2acau32.to_be_bytes());
    ext.extend((format.len() as u32).to_be_bytes());
    ext.extend(format.as_bytes());
    ext.resize(ext.len().next_multiple_of(8), 0);
    ext.extend([0u8; 8]);
    let new_name_at = at + ext.len();
    b[at..new_name_at].copy_from_slice(&ext);
    b[new_name_at..new_name_at + name.len()].copy_from_slice(&name);
    b[8..16].copy_from_slice(&(new_name_at as u64).to_be_bytes());
    std::fs::write(file, b).unwrap();
}

/// `rebase -u` of top.qcow2 onto base.qcow2, its format named.
const UNSAFE_REBASE_ONTO_BASE: &[&str] = &[
    "rebase",
    "-u",
    "-b",
    "base.qcow2",
    "-F",
    "qcow2",
    "top.qcow2",
];

#[test]
fn rebase_stores_any_qemu_driver_name_and_needs_one() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "base.qcow2", "1M");
    t.create_overlay("base.qcow2", "top.qcow2", None);
    t.same("qemu-io", &["-c", "write -P 3 0 64k", "base.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "rebase",
            "-u",
            "-b",
            "/some/backing/file",
            "-F",
            "host_device",
            "top.qcow2",
        ],
    );
    t.same("qemu-img", &["info", "top.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "rebase",
            "-u",
            "-b",
            "base.qcow2",
            "-F",
            "nosuch",
            "top.qcow2",
        ],
    );
    t.same(
        "qemu-img",
        &["rebase", "-u", "-b", "base.qcow2", "top.qcow2"],
    );
    t.same("qemu-img", &["info", "top.qcow2"]);
    t.same("qemu-img", UNSAFE_REBASE_ONTO_BASE);
    // Safe mode needs the format too. QEMU copies the clusters that
    // differ first and then refuses; qcsim refuses before it writes
    // anything (what the guest reads is the same either way), so only
    // the message and the data are compared here, and the layouts once
    // a rebase has gone through.
    t.create_qcow2("cluster_size=64k", "new.qcow2", "1M");
    t.same("qemu-img", &["rebase", "-b", "new.qcow2", "top.qcow2"]);
    t.same("qemu-io", &["-c", "read -P 3 0 64k", "top.qcow2"]);
    t.same(
        "qemu-img",
        &["rebase", "-b", "new.qcow2", "-F", "qcow2", "top.qcow2"],
    );
    t.same("qemu-img", &["map", "--output=json", "top.qcow2"]);
    t.same("qemu-io", &["-c", "read -P 3 0 64k", "top.qcow2"]);
}

#[test]
fn the_last_backing_format_counts_and_backing_driver_overrides_it() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "base.qcow2", "1M");
    t.create_overlay("base.qcow2", "top.qcow2", None);
    for dir in [&t.qemu, &t.ours] {
        add_backing_format_extension(&dir.join("top.qcow2"), "foo");
    }
    t.same("qemu-img", &["info", "top.qcow2"]);
    t.same("qemu-io", &["-c", "read 0 4k", "top.qcow2"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "open -o backing.driver=qcow2 top.qcow2",
            "-c",
            "read 0 4k",
        ],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "open -o backing.driver=nosuch top.qcow2",
            "-c",
            "read 0 4k",
        ],
    );
    // A rebase writes one extension in place of them all.
    t.same("qemu-img", UNSAFE_REBASE_ONTO_BASE);
    t.same("qemu-io", &["-c", "read 0 4k", "top.qcow2"]);
    t.same("qemu-img", &["info", "top.qcow2"]);
}

#[test]
fn convert_onto_a_backing_file_needs_its_format() {
    let t = Twins::new();
    t.same("qemu-img", &["create", "-q", "-f", "raw", "base.raw", "1M"]);
    for extra in [
        vec!["-B", "base.raw"],
        vec!["-o", "backing_file=base.raw"],
        vec!["-B", "base.raw", "-F", "raw"],
        vec!["-B", "base.raw", "-o", "backing_fmt=raw"],
    ] {
        let mut args = vec!["convert", "-O", "qcow2"];
        args.extend(&extra);
        args.extend(["base.raw", "out.qcow2"]);
        t.same("qemu-img", &args);
    }
    t.same("qemu-img", &["info", "out.qcow2"]);
}

#[test]
fn create_takes_the_file_options_and_ends_the_file_after_the_l1_table() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "extent_size_hint=0,nocow=on",
            "a.qcow2",
            "64M",
        ],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "raw",
            "-o",
            "extent_size_hint=1M,nocow=off,preallocation=off",
            "a.raw",
            "1M",
        ],
    );
    t.same(
        "qemu-img",
        &["create", "-f", "qcow2", "-o", "nocow=x", "b.qcow2", "1M"],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "lazy_refcounts=x",
            "b.qcow2",
            "1M",
        ],
    );
    for (opts, size) in [
        ("cluster_size=64k", "64M"),
        ("cluster_size=64k", "0"),
        ("cluster_size=4k", "1G"),
        ("cluster_size=512", "100M"),
        ("cluster_size=2M", "1T"),
        ("cluster_size=64k,extended_l2=on", "1G"),
    ] {
        t.create_qcow2(opts, "s.qcow2", size);
        let len = |d: &Path| std::fs::metadata(d.join("s.qcow2")).unwrap().len();
        assert_eq!(len(&t.ours), len(&t.qemu), "{opts} {size}: file length");
        t.same("qemu-img", &["check", "s.qcow2"]);
    }
}
