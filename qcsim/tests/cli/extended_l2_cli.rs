//! `qcsim` on images with extended L2 entries (subclusters): `qcsim create
//! -o extended_l2=on` makes what `qemu-img` accepts, `qcsim io` writes it
//! at subcluster granularity (over a backing file too), and `qemu-img
//! check`, the oracle's checker (`qcsim check`) and `qemu-img convert` all
//! agree with an in-test model; images `qemu-io` writes read back through
//! `qcsim convert`; impossible option combinations are refused by name.

use std::path::Path;

use crate::support::{assert_clean, exec, run, QCSIM};

fn raw_of(tool: &str, image: &str, dir: &Path) -> Vec<u8> {
    let raw = format!("{image}.{tool}.raw");
    let args = ["convert", "-O", "raw", image, &raw];
    if tool == "qemu-img" {
        run("qemu-img", &args, dir);
    } else {
        run(QCSIM, &args, dir);
    }
    std::fs::read(dir.join(raw)).unwrap()
}

/// An operation for `qcsim io` / `qemu-io`, and its effect on the model.
enum Op {
    Write {
        pattern: u8,
        off: usize,
        len: usize,
    },
    Zero {
        off: usize,
        len: usize,
        unmap: bool,
    },
    /// Whole clusters only, so the model knows they read as zeroes.
    Discard {
        off: usize,
        len: usize,
    },
}

impl Op {
    fn command(&self) -> String {
        match *self {
            Op::Write { pattern, off, len } => format!("write -P {pattern} {off} {len}"),
            Op::Zero { off, len, unmap } => {
                format!("write -z{} {off} {len}", if unmap { " -u" } else { "" })
            }
            Op::Discard { off, len } => format!("discard {off} {len}"),
        }
    }

    fn apply(&self, model: &mut [u8]) {
        match *self {
            Op::Write { pattern, off, len } => model[off..off + len].fill(pattern),
            Op::Zero { off, len, .. } | Op::Discard { off, len } => model[off..off + len].fill(0),
        }
    }
}

/// Writes that leave subclusters in every state (32 KiB clusters, 1 KiB
/// subclusters): partial subclusters, runs across clusters, zeroes of whole
/// and partial subclusters, discards, and overwrites of all of those.
fn ops() -> Vec<Op> {
    let k = 1024;
    vec![
        Op::Write {
            pattern: 0x11,
            off: 1000,
            len: 5000,
        },
        Op::Write {
            pattern: 0x12,
            off: 40 * k + 512,
            len: 512,
        },
        Op::Zero {
            off: 64 * k + 100,
            len: 10 * k,
            unmap: false,
        },
        Op::Write {
            pattern: 0x13,
            off: 66 * k,
            len: 3 * k,
        },
        Op::Zero {
            off: 96 * k,
            len: 32 * k,
            unmap: true,
        },
        Op::Write {
            pattern: 0x14,
            off: 100 * k + 7,
            len: 70 * k,
        },
        Op::Discard {
            off: 160 * k,
            len: 32 * k,
        },
        Op::Write {
            pattern: 0x15,
            off: 300 * k,
            len: 2 * k,
        },
        Op::Zero {
            off: 299 * k,
            len: 4 * k,
            unmap: true,
        },
        Op::Write {
            pattern: 0x16,
            off: 1 << 20,
            len: 200 * k,
        },
        Op::Zero {
            off: (1 << 20) + 3 * k,
            len: 50 * k,
            unmap: false,
        },
    ]
}

fn io(tool: &str, image: &str, ops: &[Op], dir: &Path) {
    let mut args = vec![];
    for op in ops {
        args.push("-c".to_string());
        args.push(op.command());
    }
    if tool == "qemu-io" {
        args.push("-f".into());
        args.push("qcow2".into());
    }
    args.push(image.into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    if tool == "qemu-io" {
        run("qemu-io", &a, dir);
    } else {
        run(QCSIM, &["io"].into_iter().chain(a).collect::<Vec<_>>(), dir);
    }
}

#[test]
fn qcsim_writes_extended_l2_images_qemu_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let size = 4usize << 20;
    // A standard qcow2 base with data everywhere, for the overlay.
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "base.qcow2", "4M"],
        dir,
    );
    run(
        "qemu-io",
        &["-c", "write -P 0x5b 0 4M", "-f", "qcow2", "base.qcow2"],
        dir,
    );
    for backing in [false, true] {
        let image = if backing { "over.qcow2" } else { "alone.qcow2" };
        let mut args = vec![
            "create",
            "-f",
            "qcow2",
            "-o",
            "extended_l2=on,cluster_size=32k",
        ];
        if backing {
            args.extend(["-b", "base.qcow2", "-F", "qcow2"]);
        }
        args.extend([image, "4M"]);
        let out = String::from_utf8(run(QCSIM, &args, dir).stdout).unwrap();
        assert!(out.contains("extended_l2=on"), "{out}");
        let mut model = vec![if backing { 0x5b } else { 0 }; size];
        let ops = ops();
        io("qcsim", image, &ops, dir);
        for op in &ops {
            op.apply(&mut model);
        }
        assert_clean(image, dir);
        let info = String::from_utf8(run("qemu-img", &["info", image], dir).stdout).unwrap();
        assert!(info.contains("extended l2: true"), "{info}");
        assert!(
            raw_of("qemu-img", image, dir) == model,
            "{image}: qemu-img reads other data"
        );
        assert!(
            raw_of("qcsim", image, dir) == model,
            "{image}: qcsim reads other data"
        );
    }
}

#[test]
fn qcsim_reads_extended_l2_images_qemu_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "extended_l2=on,cluster_size=32k",
            "q.qcow2",
            "4M",
        ],
        dir,
    );
    io("qemu-io", "q.qcow2", &ops(), dir);
    assert_clean("q.qcow2", dir);
    assert!(raw_of("qcsim", "q.qcow2", dir) == raw_of("qemu-img", "q.qcow2", dir));
    // qcsim io's read -P checks a pattern written at subcluster granularity.
    run(
        QCSIM,
        &["io", "-c", "read -P 0x12 41472 512", "q.qcow2"],
        dir,
    );
    let out = exec(
        QCSIM,
        &["io", "-c", "read -P 0x12 41472 1024", "q.qcow2"],
        dir,
    );
    assert!(!out.status.success(), "a pattern mismatch must fail");
}

#[test]
fn impossible_extended_l2_options_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for opts in [
        "extended_l2=on,cluster_size=8k",
        "extended_l2=on,compat=0.10",
    ] {
        let out = exec(
            QCSIM,
            &["create", "-f", "qcow2", "-o", opts, "x.qcow2", "1M"],
            dir,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{opts}: accepted");
        assert!(err.to_lowercase().contains("extended"), "{opts}: {err}");
    }
}
