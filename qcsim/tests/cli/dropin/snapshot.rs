//! Internal snapshots across the tools: `qemu-img snapshot -l/-c/-a/-d`
//! and `info` print what QEMU's print (dates filtered as the iotests'
//! `_filter_date` filters them), and images pass between the tools:
//! snapshots qcsim made are clean, listed and applied by QEMU, and those
//! QEMU made are listed, applied and deleted by qcsim, QEMU's check clean.

use std::process::Output;

use super::{info_layout, Twins};
use crate::support::exec;

/// `s` with every `YYYY-MM-DD HH:MM:SS` as `yyyy-mm-dd hh:mm:ss`, and the
/// JSON dates' numbers as `X`.
fn undated(s: &str) -> String {
    let pattern = b"dddd-dd-dd dd:dd:dd";
    let b = s.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        let fits = b.len() - i >= pattern.len()
            && pattern.iter().zip(&b[i..]).all(|(&p, &c)| {
                if p == b'd' {
                    c.is_ascii_digit()
                } else {
                    p == c
                }
            });
        if fits {
            out.push_str("yyyy-mm-dd hh:mm:ss");
            i += pattern.len();
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out.lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("\"date-sec\": ") || t.starts_with("\"date-nsec\": ") {
                let key = &l[..l.find(": ").unwrap() + 2];
                let comma = if l.ends_with(',') { "," } else { "" };
                format!("{key}X{comma}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// Both tools' output alike once undated, and exit codes alike.
fn same_undated(t: &Twins, args: &[&str]) -> String {
    let (theirs, ours) = t.both("qemu-img", args);
    let text = |o: &Output| {
        (
            undated(&String::from_utf8_lossy(&o.stdout)),
            undated(&String::from_utf8_lossy(&o.stderr)),
        )
    };
    assert_eq!(text(&ours), text(&theirs), "qemu-img {args:?}");
    assert_eq!(ours.status.code(), theirs.status.code(), "{args:?}: exit");
    text(&ours).0
}

/// QEMU's `qemu-img check` on both images: clean, and alike but for the
/// fragmentation figure (the write path copies a shared L2 table after
/// the data clusters it allocates, where QEMU copies it first, so the
/// clusters of a write after a snapshot land in another order).
fn check_both(t: &Twins, image: &str) {
    let run = |dir: &std::path::Path| {
        let o = exec("qemu-img", &["check", image], dir);
        assert_eq!(o.status.code(), Some(0), "check: {o:?}");
        String::from_utf8(o.stdout)
            .unwrap()
            .lines()
            .map(|l| match l.find(" allocated, ") {
                Some(at) => format!("{} allocated\n", &l[..at]),
                None => format!("{l}\n"),
            })
            .collect::<String>()
    };
    assert_eq!(run(&t.ours), run(&t.qemu), "qemu-img check {image}");
}

#[test]
fn snapshot_commands_print_what_qemu_img_prints() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "a.qcow2", "4M"],
    );
    t.same("qemu-io", &["-c", "write -P 0x11 0 1M", "a.qcow2"]);
    // Nothing to list yet: nothing printed.
    assert_eq!(t.same("qemu-img", &["snapshot", "-l", "a.qcow2"]), "");
    t.same("qemu-img", &["snapshot", "-c", "one", "a.qcow2"]);
    t.same("qemu-io", &["-c", "write -P 0x22 512k 1M", "a.qcow2"]);
    t.same("qemu-img", &["snapshot", "-q", "-c", "two", "a.qcow2"]);
    t.same("qemu-img", &["snapshot", "-c", "one", "a.qcow2"]);
    let list = same_undated(&t, &["snapshot", "-l", "a.qcow2"]);
    assert!(list.starts_with("Snapshot list:\nID "), "{list}");
    assert_eq!(list.lines().count(), 5, "{list}");
    same_undated(&t, &["snapshot", "a.qcow2"]);
    same_undated(&t, &["snapshot", "-U", "-l", "a.qcow2"]);
    // info, human (but for the sizes on disk) and JSON.
    let (theirs, ours) = t.both("qemu-img", &["info", "a.qcow2"]);
    assert_eq!(undated(&info_layout(&ours)), undated(&info_layout(&theirs)));
    let (theirs, ours) = t.both("qemu-img", &["info", "--output=json", "a.qcow2"]);
    let json = |o: &Output| {
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["actual-size"] = 0.into();
        v["children"][0]["info"]["actual-size"] = 0.into();
        v["children"][0]["info"]["virtual-size"] = 0.into();
        for sn in v["snapshots"].as_array_mut().unwrap() {
            sn["date-sec"] = 0.into();
            sn["date-nsec"] = 0.into();
        }
        v
    };
    assert_eq!(json(&ours), json(&theirs));
    let keys = |o: &Output| undated(&String::from_utf8_lossy(&o.stdout));
    assert!(keys(&ours).contains("\"snapshots\": ["));
    // Refusals and their words.
    for args in [
        &["snapshot", "-a", "nope", "a.qcow2"][..],
        &["snapshot", "-d", "nope", "a.qcow2"],
        &["snapshot", "-d", "1", "a.qcow2"],
        &["snapshot", "-l", "-c", "x", "a.qcow2"],
        &["snapshot", "-l"],
        &["snapshot", "-l", "a.qcow2", "b.qcow2"],
        &["snapshot", "-x", "a.qcow2"],
        &["snapshot", "-U", "-c", "x", "a.qcow2"],
        &["snapshot", "-f", "raw", "-c", "x", "a.qcow2"],
        &["snapshot", "-f", "raw", "-l", "a.qcow2"],
        &["snapshot", "-f", "raw", "-a", "x", "a.qcow2"],
        &["snapshot", "-f", "raw", "-d", "x", "a.qcow2"],
        &["snapshot", "-l", "missing.qcow2"],
    ] {
        same_undated(&t, args);
    }
    // Apply by name, then by id; the guest sees each snapshot's data.
    t.same("qemu-img", &["snapshot", "-a", "one", "a.qcow2"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "read -P 0x11 0 1M",
            "-c",
            "read -P 0 1M 1M",
            "a.qcow2",
        ],
    );
    t.same("qemu-img", &["snapshot", "-a", "2", "a.qcow2"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "read -P 0x11 0 512k",
            "-c",
            "read -P 0x22 512k 1M",
            "a.qcow2",
        ],
    );
    check_both(&t, "a.qcow2");
    // Delete by name: the first named so.
    t.same("qemu-img", &["snapshot", "-d", "one", "a.qcow2"]);
    same_undated(&t, &["snapshot", "-l", "a.qcow2"]);
    check_both(&t, "a.qcow2");
    for name in ["two", "one"] {
        t.same("qemu-img", &["snapshot", "-d", name, "a.qcow2"]);
    }
    t.same("qemu-img", &["snapshot", "-l", "a.qcow2"]);
    check_both(&t, "a.qcow2");
    t.same("qemu-io", &["-c", "read -P 0x22 512k 1M", "a.qcow2"]);
}

#[test]
fn snapshots_pass_between_qemu_and_qcsim() {
    let t = Twins::new();
    let (img, io) = (t.ours_as("qemu-img"), t.ours_as("qemu-io"));
    let run = |program: &str, args: &[&str]| t.ok(program, args);
    // qcsim makes the snapshots (small clusters: several L2 tables).
    run(
        &img,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "q.qcow2",
            "2M",
        ],
    );
    run(&io, &["-c", "write -P 0x31 0 1536k", "q.qcow2"]);
    run(&img, &["snapshot", "-c", "first", "q.qcow2"]);
    run(
        &io,
        &[
            "-c",
            "write -P 0x32 4k 8k",
            "-c",
            "write -z 1M 64k",
            "q.qcow2",
        ],
    );
    run(&img, &["snapshot", "-c", "second", "q.qcow2"]);
    run(&io, &["-c", "write -P 0x33 0 2M", "q.qcow2"]);
    // QEMU finds it clean, lists the snapshots as qcsim does, and reads
    // each snapshot's data once it applies it.
    testkit::assert_clean(&t.ours.join("q.qcow2"), "qcsim's snapshots");
    let theirs = run("qemu-img", &["snapshot", "-l", "q.qcow2"]);
    assert_eq!(theirs, run(&img, &["snapshot", "-l", "q.qcow2"]));
    assert!(
        theirs.contains(" first ") && theirs.contains(" second "),
        "{theirs}"
    );
    run("qemu-img", &["snapshot", "-a", "first", "q.qcow2"]);
    run("qemu-io", &["-c", "read -P 0x31 0 1536k", "q.qcow2"]);
    run("qemu-img", &["snapshot", "-a", "second", "q.qcow2"]);
    run(
        "qemu-io",
        &[
            "-c",
            "read -P 0x32 4k 8k",
            "-c",
            "read -P 0 1M 64k",
            "q.qcow2",
        ],
    );
    testkit::assert_clean(&t.ours.join("q.qcow2"), "after QEMU's apply");

    // QEMU makes them; qcsim lists, applies and deletes; QEMU checks.
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "r.qcow2",
            "2M",
        ],
    );
    run("qemu-io", &["-c", "write -P 0x41 0 1M", "r.qcow2"]);
    run("qemu-img", &["snapshot", "-c", "a", "r.qcow2"]);
    run("qemu-io", &["-c", "write -P 0x42 512k 1M", "r.qcow2"]);
    run("qemu-img", &["snapshot", "-c", "b", "r.qcow2"]);
    run("qemu-io", &["-c", "write -P 0x43 0 2M", "r.qcow2"]);
    assert_eq!(
        run(&img, &["snapshot", "-l", "r.qcow2"]),
        run("qemu-img", &["snapshot", "-l", "r.qcow2"])
    );
    run(&img, &["snapshot", "-a", "a", "r.qcow2"]);
    testkit::assert_clean(&t.ours.join("r.qcow2"), "qcsim applied QEMU's");
    run(
        "qemu-io",
        &[
            "-c",
            "read -P 0x41 0 1M",
            "-c",
            "read -P 0 1M 1M",
            "r.qcow2",
        ],
    );
    run(&img, &["snapshot", "-d", "a", "r.qcow2"]);
    testkit::assert_clean(&t.ours.join("r.qcow2"), "qcsim deleted one of QEMU's");
    run(&img, &["snapshot", "-a", "b", "r.qcow2"]);
    run(&img, &["snapshot", "-d", "b", "r.qcow2"]);
    testkit::assert_clean(&t.ours.join("r.qcow2"), "qcsim deleted all of QEMU's");
    run(
        "qemu-io",
        &[
            "-c",
            "read -P 0x41 0 512k",
            "-c",
            "read -P 0x42 512k 1M",
            "r.qcow2",
        ],
    );
    assert_eq!(run("qemu-img", &["snapshot", "-l", "r.qcow2"]), "");
}

#[test]
fn snapshots_of_compressed_and_extended_l2_images_stay_clean() {
    let t = Twins::new();
    let (img, io) = (t.ours_as("qemu-img"), t.ours_as("qemu-io"));
    let run = |program: &str, args: &[&str]| t.ok(program, args);
    run("qemu-img", &["create", "-q", "-f", "raw", "src.raw", "1M"]);
    run(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 0x51 0 512k", "src.raw"],
    );
    for (name, opts) in [
        ("c.qcow2", "cluster_size=4k"),
        ("x.qcow2", "extended_l2=on,cluster_size=64k"),
    ] {
        // QEMU writes compressed clusters (and, with extended L2,
        // subcluster bitmaps); qcsim snapshots, writes, applies, deletes.
        run(
            "qemu-img",
            &[
                "convert", "-c", "-f", "raw", "-O", "qcow2", "-o", opts, "src.raw", name,
            ],
        );
        run(&img, &["snapshot", "-c", "s", name]);
        testkit::assert_clean(&t.ours.join(name), "after the snapshot");
        run(
            &io,
            &["-c", "write -P 0x52 4k 8k", "-c", "write -z 256k 64k", name],
        );
        testkit::assert_clean(&t.ours.join(name), "after writes over it");
        run(&img, &["snapshot", "-a", "s", name]);
        run("qemu-io", &["-c", "read -P 0x51 0 512k", name]);
        run(&io, &["-c", "write -P 0x53 0 4k", name]);
        run(&img, &["snapshot", "-d", "s", name]);
        testkit::assert_clean(&t.ours.join(name), "after the delete");
        run(
            "qemu-io",
            &[
                "-c",
                "read -P 0x53 0 4k",
                "-c",
                "read -P 0x51 4k 508k",
                name,
            ],
        );
    }
}

/// `convert -l`: a snapshot copied instead of the active disk, picked by
/// id or name, or by `snapshot.id`/`snapshot.name` (each given must
/// match); an unknown one and an unknown key refused in qemu-img's words.
#[test]
fn convert_l_copies_a_snapshot_as_qemu_img_does() {
    let t = Twins::new();
    t.create_qcow2("cluster_size=64k", "a.qcow2", "1M");
    t.same("qemu-io", &["-c", "write -P 1 0 64k", "a.qcow2"]);
    t.same("qemu-img", &["snapshot", "-c", "foo", "a.qcow2"]);
    t.same("qemu-io", &["-c", "write -P 2 0 64k", "a.qcow2"]);
    for (n, l) in [
        "foo",
        "1",
        "snapshot.name=foo",
        "snapshot.id=1",
        "snapshot.id=1,snapshot.name=foo",
        "bar",
        "snapshot.id=2",
        "x=1",
        "snapshot.foo=1",
    ]
    .into_iter()
    .enumerate()
    {
        let out = format!("o{n}.raw");
        t.same(
            "qemu-img",
            &["convert", "-l", l, "-O", "raw", "a.qcow2", &out],
        );
        if t.ours.join(&out).exists() {
            t.on_both(
                "qemu-io",
                &[
                    "-f",
                    "raw",
                    "-c",
                    "read -P 1 0 64k",
                    "-c",
                    "read -P 0 64k 960k",
                    &out,
                ],
            );
        }
    }
    // Into qcow2: the snapshot's data, the source untouched.
    t.same(
        "qemu-img",
        &["convert", "-l", "foo", "-O", "qcow2", "a.qcow2", "s.qcow2"],
    );
    t.same("qemu-img", &["map", "--output=json", "s.qcow2"]);
    t.on_both("qemu-io", &["-c", "read -P 2 0 64k", "a.qcow2"]);
    t.same("qemu-img", &["check", "a.qcow2"]);
}

/// A snapshot that would take a refcount past its field's maximum is
/// refused and changes nothing: a 1-bit refcount after one write, and a
/// 64-bit one set to its maximum (2^64 - 1, where a saturating check once
/// let the add wrap to 0: the data cluster referenced twice with refcount
/// 0). QEMU's check finds no corruption afterwards.
#[test]
fn a_refcount_at_its_maximum_refuses_the_snapshot_and_corrupts_nothing() {
    for (bits, poke) in [("1", false), ("64", true)] {
        let t = Twins::new();
        t.create_qcow2(&format!("refcount_bits={bits}"), "t.qcow2", "64M");
        t.same("qemu-io", &["-c", "write 0 512", "t.qcow2"]);
        let img = t.ours.join("t.qcow2");
        if poke {
            // The data cluster (cluster 5) at the maximum, and its L2
            // entry without COPIED, as a shared cluster's would be.
            super::poke_be(&img, 0x20028, 8, u64::MAX);
            super::poke_be(&img, 0x40000, 8, 0x5_0000);
        }
        let o = exec(
            &t.ours_as("qemu-img"),
            &["snapshot", "-c", "s", "t.qcow2"],
            &t.ours,
        );
        assert_eq!(o.status.code(), Some(1), "{bits}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("would overflow its {bits}-bit field")),
            "{bits}: {err}"
        );
        let check = exec("qemu-img", &["check", "t.qcow2"], &t.ours);
        let text = String::from_utf8_lossy(&check.stdout);
        assert!(!text.contains("ERROR"), "{bits}: {text}");
        let list = exec("qemu-img", &["snapshot", "-l", "t.qcow2"], &t.ours);
        assert!(list.stdout.is_empty(), "{bits}: {list:?}");
    }
}
