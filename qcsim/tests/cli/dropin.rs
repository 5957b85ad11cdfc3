//! The drop-in tools: qcsim invoked as `qemu-img` and `qemu-io` (a symlink
//! with that name) or as `qcsim img` and `qcsim io`, run beside QEMU's own
//! tools on the same command lines in twin directories, so that every
//! comparison is of what QEMU's tools print for the same files and names
//! (timings filtered as QEMU's iotests filter them).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{exec, untimed, QCSIM};

mod amend;
mod backing_format;
mod blkdebug;
mod convert_compressed;
mod dd;
mod fua;
mod measure;
mod snapshot;
mod truncate;
mod vmstate;
mod zeroes;

/// Two directories holding the same files: one for QEMU's tools, one for
/// qcsim's, with `qemu-img` and `qemu-io` symlinks to the qcsim binary.
struct Twins {
    _root: tempfile::TempDir,
    qemu: PathBuf,
    ours: PathBuf,
    bin: PathBuf,
}

impl Twins {
    fn new() -> Twins {
        let root = tempfile::tempdir().unwrap();
        let (qemu, ours, bin) = (
            root.path().join("qemu"),
            root.path().join("ours"),
            root.path().join("bin"),
        );
        for d in [&qemu, &ours, &bin] {
            std::fs::create_dir(d).unwrap();
        }
        for name in ["qemu-img", "qemu-io"] {
            std::os::unix::fs::symlink(QCSIM, bin.join(name)).unwrap();
        }
        Twins {
            _root: root,
            qemu,
            ours,
            bin,
        }
    }

    /// `tool` ("qemu-img" or "qemu-io") with `args`, by QEMU and by qcsim
    /// under the tool's name, each in its directory.
    fn both(&self, tool: &str, args: &[&str]) -> (Output, Output) {
        let theirs = exec(tool, args, &self.qemu);
        let ours = exec(self.bin.join(tool).to_str().unwrap(), args, &self.ours);
        (theirs, ours)
    }

    /// [`Twins::both`], and the two must print the same (timings
    /// filtered) and exit alike; returns qcsim's standard output.
    fn same(&self, tool: &str, args: &[&str]) -> String {
        let (theirs, ours) = self.both(tool, args);
        assert_same(tool, args, &theirs, &ours);
        String::from_utf8(ours.stdout).unwrap()
    }

    /// `program` (QEMU's own tool, or qcsim's under [`Twins::ours_as`])
    /// on the files of both directories, which must read alike; returns
    /// the output on qcsim's files.
    fn on_both(&self, program: &str, args: &[&str]) -> String {
        let theirs = exec(program, args, &self.qemu);
        let ours = exec(program, args, &self.ours);
        assert_same(program, args, &theirs, &ours);
        String::from_utf8(ours.stdout).unwrap()
    }

    /// `program` with `args` in qcsim's directory, which must succeed;
    /// returns its standard output.
    fn ok(&self, program: &str, args: &[&str]) -> String {
        let o = exec(program, args, &self.ours);
        assert_eq!(o.status.code(), Some(0), "{program} {args:?}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    }

    /// `qemu-img create -q -f qcow2 -o OPTS NAME SIZE` by both tools,
    /// which must print alike.
    fn create_qcow2(&self, opts: &str, name: &str, size: &str) {
        self.same(
            "qemu-img",
            &["create", "-q", "-f", "qcow2", "-o", opts, name, size],
        );
    }

    /// `qemu-img create -q -f qcow2 -b BASE -F qcow2 NAME [SIZE]` by both
    /// tools, which must print alike: a qcow2 overlay over a qcow2 image.
    fn create_overlay(&self, base: &str, name: &str, size: Option<&str>) {
        let mut args = vec![
            "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", name,
        ];
        args.extend(size);
        self.same("qemu-img", &args);
    }

    /// The qcsim binary under the name of `tool`.
    fn ours_as(&self, tool: &str) -> String {
        self.bin.join(tool).to_str().unwrap().to_owned()
    }

    /// [`Twins::same`] with `input` on standard input.
    fn same_with_input(&self, tool: &str, args: &[&str], input: &str) -> String {
        let run = |program: &Path, dir: &Path| {
            let mut child = Command::new(program)
                .args(args)
                .current_dir(dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        };
        let theirs = run(Path::new(tool), &self.qemu);
        let ours = run(&self.bin.join(tool), &self.ours);
        assert_same(tool, args, &theirs, &ours);
        String::from_utf8(ours.stdout).unwrap()
    }
}

/// How far two equal files' disk sizes may differ, in MiB: a few file
/// system blocks of extent metadata.
const DISK_SIZE_SLACK_MIB: f64 = 0.05;

fn text_of(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `qemu-img info`'s text without its `disk size:` lines.
fn without_disk_size(info: &str) -> String {
    info.lines()
        .filter(|l| !l.trim_start().starts_with("disk size:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The `disk size:` figures of `qemu-img info`'s text, in MiB (`0 B`
/// and KiB sizes converted).
fn disk_sizes(info: &str) -> Vec<f64> {
    info.lines()
        .filter_map(|l| l.trim_start().strip_prefix("disk size: "))
        .map(|v| {
            let (n, unit) = v.split_once(' ').unwrap_or((v, "B"));
            let n: f64 = n.parse().unwrap_or_else(|_| panic!("disk size {v:?}"));
            n * match unit {
                "B" => 1.0 / (1024.0 * 1024.0),
                "KiB" => 1.0 / 1024.0,
                "MiB" => 1.0,
                "GiB" => 1024.0,
                other => panic!("disk size unit {other:?}"),
            }
        })
        .collect()
}

fn assert_same(tool: &str, args: &[&str], theirs: &Output, ours: &Output) {
    let text = |b: &[u8]| untimed(&String::from_utf8_lossy(b));
    assert_eq!(
        text(&ours.stdout),
        text(&theirs.stdout),
        "{tool} {args:?}: standard output"
    );
    assert_eq!(
        text(&ours.stderr),
        text(&theirs.stderr),
        "{tool} {args:?}: standard error"
    );
    assert_eq!(
        ours.status.code(),
        theirs.status.code(),
        "{tool} {args:?}: exit code"
    );
}

#[test]
fn the_program_name_and_the_subcommands_pick_the_tool() {
    let t = Twins::new();
    // As qemu-img: create; as `qcsim img`: the same create.
    let out = t.same("qemu-img", &["create", "-f", "qcow2", "a.qcow2", "1M"]);
    assert!(out.starts_with("Formatting 'a.qcow2', fmt=qcow2 "), "{out}");
    let sub = exec(
        QCSIM,
        &["img", "create", "-f", "qcow2", "b.qcow2", "1M"],
        &t.ours,
    );
    assert_eq!(
        String::from_utf8_lossy(&sub.stdout),
        out.replace("a.qcow2", "b.qcow2")
    );
    // As qemu-io and as `qcsim io`: the same report.
    let via_name = t.same("qemu-io", &["-c", "write -P 7 0 4k", "a.qcow2"]);
    let via_sub = exec(QCSIM, &["io", "-c", "read -P 7 0 4k", "a.qcow2"], &t.ours);
    assert_eq!(via_sub.status.code(), Some(0));
    assert_eq!(
        untimed(&String::from_utf8_lossy(&via_sub.stdout)),
        untimed(&via_name).replace("wrote", "read")
    );
    // Under any other name, qcsim is itself.
    let other = t.bin.join("qcsim-renamed");
    std::os::unix::fs::symlink(QCSIM, &other).unwrap();
    let out = exec(other.to_str().unwrap(), &["--version"], &t.ours);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("qcsim "));
}

#[test]
fn create_prints_qemu_imgs_formatting_line() {
    let t = Twins::new();
    t.same("qemu-img", &["create", "-f", "qcow2", "base.qcow2", "64M"]);
    let cases: &[&[&str]] = &[
        &["create", "-f", "qcow2", "t.qcow2", "1G"],
        &["create", "-f", "qcow2", "t.qcow2", "1234"],
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "t.qcow2",
            "1M",
        ],
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "compat=0.10,refcount_bits=16",
            "t.qcow2",
            "1M",
        ],
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "lazy_refcounts=on,extended_l2=on",
            "t.qcow2",
            "1M",
        ],
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "t.qcow2",
        ],
        &["create", "-f", "raw", "t.raw", "1M"],
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1M"],
    ];
    for args in cases {
        t.same("qemu-img", args);
    }
    // Refused options: the refcount width and the version 3 features
    // after the "Formatting" line, a width that is no number before it.
    for opts in [
        "refcount_bits=0",
        "refcount_bits=-1",
        "refcount_bits=42",
        "refcount_bits=128",
        "refcount_bits=x",
        "compat=0.10,refcount_bits=1",
        "compat=0.10,lazy_refcounts=on",
        "compat=0.10,compression_type=zstd",
        "compat=0.10,data_file=d.img",
        "compat=0.10,extended_l2=on",
        "extended_l2=on,cluster_size=4k",
        "backing_fmt=raw",
        "data_file_raw=on",
    ] {
        t.same(
            "qemu-img",
            &["create", "-f", "qcow2", "-o", opts, "r.qcow2", "64M"],
        );
    }
    // The size each tool gives the odd-sized image: whole sectors.
    t.same("qemu-img", &["create", "-f", "qcow2", "odd.qcow2", "1234"]);
    let (theirs, ours) = t.both("qemu-img", &["info", "odd.qcow2"]);
    let size = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.starts_with("virtual size: "))
            .map(str::to_owned)
    };
    assert_eq!(size(&ours), size(&theirs));
    assert_eq!(
        size(&ours).as_deref(),
        Some("virtual size: 1.5 KiB (1536 bytes)")
    );
}

#[test]
fn qemu_io_reports_requests_as_qemu_io_does() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "4M"],
    );
    let out = t.same(
        "qemu-io",
        &[
            "--cache",
            "writeback",
            "--aio",
            "threads",
            "-f",
            "qcow2",
            "-c",
            "write -P 0x11 0 4k",
            "-c",
            "write -P 0x22 1536 1536",
            "-c",
            "writev -P 0x33 64k 512 1k",
            "-c",
            "aio_write -P 0x44 1M 64k",
            "-c",
            "aio_flush",
            "-c",
            "read -P 0x11 0 512",
            "-c",
            "read -P 0x22 -s 1536 -l 1536 0 4k",
            "-c",
            "readv -P 0x33 64k 1k 512",
            "-c",
            "read -P 0x55 1M 4k",
            "-c",
            "write -z 2M 64k",
            "-c",
            "discard 1M 64k",
            "-c",
            "alloc 0 128k",
            "-c",
            "map",
            "-c",
            "length",
            "-c",
            "info",
            "-c",
            "read -v 0 32",
            "-c",
            "read 4M 512",
            "t.qcow2",
        ],
    );
    // The report lines are there (and were compared, timings filtered).
    assert!(
        out.contains("wrote 4096/4096 bytes at offset 0\n4 KiB, 1 ops; "),
        "{out}"
    );
    // QEMU finds qcsim's image clean, and reads what was written.
    crate::support::assert_clean("t.qcow2", &t.ours);
    let read = exec(
        "qemu-io",
        &[
            "-c",
            "read -P 0x11 0 1536",
            "-c",
            "read -P 0x44 1M 0",
            "-c",
            "read -P 0 1M 64k",
            "t.qcow2",
        ],
        &t.ours,
    );
    assert_eq!(
        read.status.code(),
        Some(0),
        "{}",
        crate::support::text(&read)
    );
}

#[test]
fn commands_on_standard_input_follow_a_prompt() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1M"],
    );
    let out = t.same_with_input(
        "qemu-io",
        &["t.qcow2"],
        "write -P 9 0 512\nbogus\nread -P 9 0 x\n\nread -P 9 0 512\n",
    );
    assert_eq!(out.matches("qemu-io> ").count(), 6, "{out}");
}

#[test]
fn errors_carry_qemus_words_prefixes_and_exit_codes() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "1M"],
    );
    t.same("qemu-img", &["create", "-q", "-f", "raw", "t.raw", "1M"]);
    // Opening a missing file, as qemu-io and qemu-img.
    t.same("qemu-io", &["-c", "read 0 512", "missing.qcow2"]);
    t.same("qemu-img", &["info", "missing.qcow2"]);
    t.same("qemu-img", &["check", "missing.qcow2"]);
    // Usage errors.
    t.same("qemu-io", &["-t", "bogus", "-c", "read 0 1", "t.qcow2"]);
    // Sizes qemu-img refuses, each with its message.
    for size in ["1x", "-1", "-1k", "16E", "abc"] {
        t.same(
            "qemu-img",
            &["create", "-f", "qcow2", "s.qcow2", "--", size],
        );
    }
    // A check of a format without checks: 63.
    t.same("qemu-img", &["check", "-f", "raw", "t.raw"]);
    // A bad cluster size: the same error (QEMU prints its Formatting
    // line first, qcsim refuses before it).
    let (theirs, ours) = t.both(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=3k",
            "x.qcow2",
            "1M",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stderr),
        String::from_utf8_lossy(&theirs.stderr)
    );
    assert_eq!(ours.status.code(), Some(1));
    // Requests qemu-io refuses, and a read-only image written.
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 300 0 1",
            "-c",
            "write -u 0 512",
            "-c",
            "read 0 1x",
            "-c",
            "nope",
            "t.qcow2",
        ],
    );
    t.same("qemu-io", &["-r", "-c", "write 0 512", "t.qcow2"]);
    // A backing file missing, or named without its format.
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "gone.qcow2",
            "-F",
            "qcow2",
            "x.qcow2",
            "1M",
        ],
    );
    t.same(
        "qemu-img",
        &["create", "-f", "qcow2", "-b", "t.qcow2", "x.qcow2", "1M"],
    );
}

#[test]
fn map_and_compare_match_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "b.qcow2", "1M"],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 1 0 128k",
            "-c",
            "write -z 256k 64k",
            "b.qcow2",
        ],
    );
    t.same(
        "qemu-img",
        &[
            "create", "-q", "-f", "qcow2", "-b", "b.qcow2", "-F", "qcow2", "t.qcow2",
        ],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 2 64k 64k",
            "-c",
            "write -z 512k 64k",
            "t.qcow2",
        ],
    );
    // Host offsets are filtered, as the iotests' map filter does; the
    // runs, layers and flags must agree.
    for args in [
        &["map", "t.qcow2"][..],
        &["map", "--output=json", "t.qcow2"],
    ] {
        let (theirs, ours) = t.both("qemu-img", args);
        assert_eq!(
            ours.status.code(),
            Some(0),
            "{}",
            crate::support::text(&ours)
        );
        let (theirs, ours) = (host_offsets_hidden(&theirs), host_offsets_hidden(&ours));
        assert_eq!(ours, theirs, "qemu-img {args:?}");
        assert!(
            ours.contains("b.qcow2") || ours.contains("\"depth\": 1"),
            "{ours}"
        );
    }
    // The chain's info alike but for the space the files take on disk,
    // which is the file system's.
    let (theirs, ours) = t.both("qemu-img", &["info", "--backing-chain", "t.qcow2"]);
    let layout = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.trim_start().starts_with("disk size: "))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    assert_eq!(layout(&ours), layout(&theirs));
    assert_eq!(layout(&ours).matches("image: ").count(), 2);
    t.same("qemu-img", &["compare", "b.qcow2", "t.qcow2"]);
    t.same("qemu-img", &["compare", "t.qcow2", "t.qcow2"]);
    // Converted by either tool, the copy compares equal to the original.
    t.same(
        "qemu-img",
        &[
            "convert", "-f", "qcow2", "-O", "qcow2", "t.qcow2", "c.qcow2",
        ],
    );
    t.same("qemu-img", &["compare", "t.qcow2", "c.qcow2"]);
    let cross = exec("qemu-img", &["compare", "t.qcow2", "c.qcow2"], &t.ours);
    assert_eq!(cross.status.code(), Some(0), "QEMU compares qcsim's copy");
}

/// A map's output with the host offsets replaced: the JSON "offset" field
/// and the human layout's "Mapped to" column.
fn host_offsets_hidden(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            if let Some(at) = l.find("\"offset\": ") {
                return format!("{}\"offset\": OFFSET}}", &l[..at])
                    + if l.ends_with(',') { "," } else { "" };
            }
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.as_slice() {
                [start, len, _host, file] if start.starts_with(|c: char| c.is_ascii_digit()) => {
                    format!("{start} {len} HOST {file}")
                }
                _ => l.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn resize_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "b.qcow2", "1M"],
    );
    t.same("qemu-io", &["-c", "write -P 0x11 0 1M", "b.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "create", "-q", "-f", "qcow2", "-b", "b.qcow2", "-F", "qcow2", "t.qcow2",
        ],
    );
    t.same("qemu-io", &["-c", "write -P 0x22 0 1M", "t.qcow2"]);
    // Refusals first: each leaves the image as it was.
    for size in ["512k", "-2M", "0", "+1x", "1000"] {
        t.same("qemu-img", &["resize", "t.qcow2", size]);
    }
    t.same("qemu-img", &["resize", "--shrink", "t.qcow2", "1000"]);
    t.same("qemu-img", &["resize", "t.qcow2"]);
    t.same("qemu-img", &["resize", "missing.qcow2", "2M"]);
    // Shrunk within a cluster, then grown over the longer backing file:
    // the tail reads zeroes, not the backing file's 0x11.
    t.same("qemu-img", &["resize", "--shrink", "t.qcow2", "520k"]);
    t.same("qemu-img", &["resize", "t.qcow2", "567k"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "read -P 0x22 0 520k",
            "-c",
            "read -P 0 520k 47k",
            "t.qcow2",
        ],
    );
    t.same("qemu-img", &["resize", "-q", "t.qcow2", "+64M"]);
    t.same(
        "qemu-img",
        &["resize", "-f", "qcow2", "t.qcow2", "--", "-1M"],
    );
    // Alike but for the space on disk, which is the file system's (the
    // file's length included: QEMU's shrink cuts the file, and so does
    // qcsim's, but the comparison should not hang on it).
    let (theirs, ours) = t.both("qemu-img", &["info", "t.qcow2"]);
    let layout = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| {
                let l = l.trim_start();
                !l.starts_with("disk size: ") && !l.starts_with("file length: ")
            })
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    assert_eq!(layout(&ours), layout(&theirs));
    assert!(
        layout(&ours).contains("virtual size: 64.6 MiB (67689472 bytes)"),
        "{}",
        layout(&ours)
    );
    // QEMU finds the image qcsim resized clean.
    let check = exec("qemu-img", &["check", "t.qcow2"], &t.ours);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        crate::support::text(&check)
    );
    // Where the clusters landed differs: host offsets hidden.
    let (theirs, ours) = t.both("qemu-img", &["map", "t.qcow2"]);
    assert_eq!(host_offsets_hidden(&ours), host_offsets_hidden(&theirs));
}

/// A JSON map's extents with host offsets dropped and neighbours that
/// then agree (same depth and flags) merged: which guest ranges hold
/// what, whatever the host placement split.
fn extents_merged(out: &Output) -> Vec<(u64, u64, String)> {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("map's JSON");
    let mut merged: Vec<(u64, u64, String)> = vec![];
    for e in v.as_array().expect("an array") {
        let (start, len) = (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        let kind = format!(
            "depth {} present {} zero {} data {}",
            e["depth"], e["present"], e["zero"], e["data"]
        );
        match merged.last_mut() {
            Some((s, l, k)) if *k == kind && *s + *l == start => *l += len,
            _ => merged.push((start, len, kind)),
        }
    }
    merged
}

/// `info` without the lines that depend on where clusters landed or on
/// the file system (the sizes on disk and the file's length).
fn info_layout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with("disk size: ") && !l.starts_with("file length: ")
        })
        .map(|l| format!("{}\n", without_dates(l)))
        .collect()
}

/// `line` with each `YYYY-MM-DD hh:mm:ss` (a snapshot's date, the wall
/// clock when its process took it: twin images' snapshots are taken by
/// two processes, a second apart now and then) as `DATE`.
fn without_dates(line: &str) -> String {
    const SHAPE: &[u8] = b"dddd-dd-dd dd:dd:dd";
    let b = line.as_bytes();
    let is_date = |at: usize| {
        b.len() >= at + SHAPE.len()
            && SHAPE.iter().zip(&b[at..]).all(|(&s, &c)| match s {
                b'd' => c.is_ascii_digit(),
                s => c == s,
            })
    };
    let (mut out, mut i) = (String::new(), 0);
    while i < b.len() {
        if is_date(i) {
            out.push_str("DATE");
            i += SHAPE.len();
        } else {
            let ch = line[i..].chars().next().expect("inside the line");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

#[test]
fn rebase_and_commit_match_qemu_img() {
    let t = Twins::new();
    let io = |cmds: &[&str], img: &str| {
        let mut args = vec![];
        for c in cmds {
            args.extend(["-c", *c]);
        }
        args.push(img);
        t.same("qemu-io", &args);
    };
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "base.qcow2", "1M"],
    );
    io(&["write -P 1 0 1M"], "base.qcow2");
    for (img, under) in [("itmd.qcow2", "base.qcow2"), ("top.qcow2", "itmd.qcow2")] {
        t.same(
            "qemu-img",
            &[
                "create", "-q", "-f", "qcow2", "-b", under, "-F", "qcow2", img,
            ],
        );
    }
    io(&["write -P 2 256k 256k"], "itmd.qcow2");
    io(&["write -P 3 512k 64k", "write -z 0 64k"], "top.qcow2");
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "new.qcow2", "1M"],
    );
    io(&["write -P 2 256k 128k"], "new.qcow2");

    // Safe rebase onto a file that agrees in part: the guest sees the same.
    t.same(
        "qemu-img",
        &["rebase", "-b", "new.qcow2", "-F", "qcow2", "top.qcow2"],
    );
    io(
        &[
            "read -P 0 0 64k",
            "read -P 1 64k 192k",
            "read -P 2 256k 256k",
            "read -P 3 512k 64k",
            "read -P 1 576k 448k",
        ],
        "top.qcow2",
    );
    let (theirs, ours) = t.both("qemu-img", &["info", "--backing-chain", "top.qcow2"]);
    assert_eq!(info_layout(&ours), info_layout(&theirs));
    assert!(info_layout(&ours).contains("backing file: new.qcow2"));
    let check = exec("qemu-img", &["check", "top.qcow2"], &t.ours);
    assert_eq!(
        check.status.code(),
        Some(0),
        "{}",
        crate::support::text(&check)
    );
    // Which ranges are the image's own and which the new backing file's.
    let (theirs, ours) = t.both("qemu-img", &["map", "--output=json", "top.qcow2"]);
    assert_eq!(host_offsets_hidden(&ours), host_offsets_hidden(&theirs));

    // Unsafe: the header only, back onto the old chain.
    t.same(
        "qemu-img",
        &[
            "rebase",
            "-u",
            "-b",
            "itmd.qcow2",
            "-F",
            "qcow2",
            "top.qcow2",
        ],
    );
    let (theirs, ours) = t.both("qemu-img", &["info", "top.qcow2"]);
    assert_eq!(info_layout(&ours), info_layout(&theirs));
    t.same("qemu-img", &["rebase", "top.qcow2"]);

    // Commit into the backing file; the image is emptied (not with -d).
    t.same("qemu-img", &["commit", "-d", "top.qcow2"]);
    let (theirs, ours) = t.both("qemu-img", &["map", "--output=json", "top.qcow2"]);
    assert_eq!(extents_merged(&ours), extents_merged(&theirs));
    t.same("qemu-img", &["commit", "top.qcow2"]);
    for img in ["top.qcow2", "itmd.qcow2"] {
        let (theirs, ours) = t.both("qemu-img", &["map", "--output=json", img]);
        assert_eq!(extents_merged(&ours), extents_merged(&theirs), "{img}");
        let check = exec("qemu-img", &["check", img], &t.ours);
        assert_eq!(
            check.status.code(),
            Some(0),
            "{}",
            crate::support::text(&check)
        );
    }
    io(&["read -P 0 0 64k", "read -P 3 512k 64k"], "itmd.qcow2");
    // Into a deeper base: the images above are kept.
    io(&["write -P 4 768k 64k"], "top.qcow2");
    t.same("qemu-img", &["commit", "-b", "base.qcow2", "top.qcow2"]);
    io(&["read -P 4 768k 64k", "read -P 2 256k 256k"], "base.qcow2");
    io(&["read -P 4 768k 64k"], "top.qcow2");
    t.same("qemu-img", &["commit", "base.qcow2"]);
}

#[test]
fn convert_onto_a_backing_file_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "base.qcow2", "1M"],
    );
    t.same("qemu-io", &["-c", "write -P 1 0 512k", "base.qcow2"]);
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "src.qcow2",
        ],
    );
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 2 128k 64k",
            "-c",
            "write -z 256k 64k",
            "src.qcow2",
        ],
    );
    // Both spellings: what the source's top image holds is the target's
    // own, the rest left to the backing file.
    for (target, args) in [
        (
            "b.qcow2",
            &["-B", "base.qcow2", "-o", "backing_fmt=qcow2"][..],
        ),
        (
            "o.qcow2",
            &["-o", "backing_file=base.qcow2,backing_fmt=qcow2"],
        ),
    ] {
        let mut cmd = vec!["convert", "-f", "qcow2", "-O", "qcow2"];
        cmd.extend(args);
        cmd.extend(["src.qcow2", target]);
        t.same("qemu-img", &cmd);
        let (theirs, ours) = t.both("qemu-img", &["map", "--output=json", target]);
        assert_eq!(extents_merged(&ours), extents_merged(&theirs), "{target}");
        assert!(
            extents_merged(&ours)
                .iter()
                .any(|e| e.2.starts_with("depth 1")),
            "{target}: some clusters come from the backing file"
        );
        t.same("qemu-img", &["compare", "src.qcow2", target]);
        let (theirs, ours) = t.both("qemu-img", &["info", target]);
        assert_eq!(info_layout(&ours), info_layout(&theirs));
    }
}

#[test]
fn a_file_prefix_names_the_plain_file() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-f", "qcow2", "file:a:b.qcow2", "1M"],
    );
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "base.qcow2", "1M"],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "file:image:top.qcow2",
        ],
    );
    let (theirs, ours) = t.both("qemu-img", &["info", "file:image:top.qcow2"]);
    assert_eq!(info_layout(&ours), info_layout(&theirs));
    assert!(info_layout(&ours).contains("image: ./image:top.qcow2"));
    t.same(
        "qemu-io",
        &["-c", "write -P 7 0 64k", "file:image:top.qcow2"],
    );
    t.same("qemu-io", &["-c", "read -P 7 0 64k", "./image:top.qcow2"]);
}

#[test]
fn convert_progress_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "s.qcow2", "128M"],
    );
    // iotest 086's four 1 MiB writes; then 48M and 49M, contiguous on
    // the guest but not in the file (64M's cluster lies between them), so
    // two requests for qemu-img, not one; a run longer than convert's
    // 2 MiB requests; and a zero range, which counts for nothing.
    t.same(
        "qemu-io",
        &[
            "-c",
            "write 0 1M",
            "-c",
            "write 2M 1M",
            "-c",
            "write 4M 1M",
            "-c",
            "write 32M 1M",
            "-c",
            "write 48M 64k",
            "-c",
            "write 64M 64k",
            "-c",
            "write 48.0625M 192k",
            "-c",
            "write 80M 5M",
            "-c",
            "write -z 90M 1M",
            "s.qcow2",
        ],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            "s.qcow2",
            "-F",
            "qcow2",
            "top.qcow2",
        ],
    );
    t.same("qemu-io", &["-c", "write 2.5M 3M", "top.qcow2"]);
    let runs: [&[&str]; 6] = [
        &["-O", "qcow2", "-f", "qcow2", "s.qcow2", "a.qcow2"],
        &["-O", "raw", "s.qcow2", "a.raw"],
        &["-O", "qcow2", "top.qcow2", "b.qcow2"],
        &[
            "-O",
            "qcow2",
            "-B",
            "s.qcow2",
            "-F",
            "qcow2",
            "top.qcow2",
            "c.qcow2",
        ],
        &["-n", "-O", "qcow2", "s.qcow2", "b.qcow2"],
        &["-q", "-O", "qcow2", "s.qcow2", "d.qcow2"],
    ];
    for args in runs {
        let mut cmd = vec!["convert", "-p"];
        cmd.extend(args);
        let (theirs, ours) = t.both("qemu-img", &cmd);
        // Byte for byte: the carriage returns and the final newline too.
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout),
            String::from_utf8_lossy(&theirs.stdout),
            "qemu-img {cmd:?}"
        );
        assert_same("qemu-img", &cmd, &theirs, &ours);
    }
    // The same input, the same lines: nothing depends on timing.
    let again = |dst: &str| {
        exec(
            t.bin.join("qemu-img").to_str().unwrap(),
            &["convert", "-p", "-O", "qcow2", "s.qcow2", dst],
            &t.ours,
        )
        .stdout
    };
    let first = again("e.qcow2");
    assert_eq!(again("f.qcow2"), first);
    // Whatever both tools print, it opens at 0 and closes at 100 twice
    // (the last request, then the end), as in 086's reference output.
    let text = String::from_utf8(first).unwrap();
    assert!(text.starts_with("    (0.00/100%)\r"), "{text:?}");
    assert!(
        text.ends_with("    (100.00/100%)\r    (100.00/100%)\r\n"),
        "{text:?}"
    );
    assert!(
        text.lines().next().unwrap().matches('\r').count() > 5,
        "{text:?}"
    );
}

#[test]
fn info_backing_chain_json_matches_qemu_img() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2.1.base", "128M"],
    );
    for (image, backing) in [
        ("t.qcow2.2.base", "t.qcow2.1.base"),
        ("t.qcow2", "t.qcow2.2.base"),
    ] {
        t.same(
            "qemu-img",
            &[
                "create", "-q", "-f", "qcow2", "-b", backing, "-F", "qcow2", image,
            ],
        );
    }
    t.same("qemu-io", &["-c", "write 0 64k", "t.qcow2"]);
    let args = ["info", "--backing-chain", "--output=json", "t.qcow2"];
    // On the files QEMU made, qcsim prints what qemu-img prints, byte for
    // byte (the space the files take on disk included).
    let theirs = exec("qemu-img", &args, &t.qemu);
    let ours = exec(t.bin.join("qemu-img").to_str().unwrap(), &args, &t.qemu);
    assert_same("qemu-img", &args, &theirs, &ours);
    let json = String::from_utf8(ours.stdout).unwrap();
    assert!(json.starts_with("[\n    {\n"), "{json}");
    assert!(json.ends_with("    }\n]\n"), "{json}");
    assert_eq!(json.matches("\"format\": \"qcow2\"").count(), 3, "{json}");
    // On each tool's own files, alike but for the space on disk and the
    // length of each file (its "file" child's size): how long a new image
    // file is, is each creator's layout.
    let (theirs, ours) = t.both("qemu-img", &args);
    let layout = |o: &Output| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.contains("\"actual-size\": "))
            .filter(|l| !l.starts_with(&format!("{}\"virtual-size\": ", " ".repeat(20))))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    assert_eq!(layout(&ours), layout(&theirs));
    // A loop is still refused before anything is printed.
    t.same(
        "qemu-img",
        &[
            "rebase",
            "-u",
            "-b",
            "t.qcow2",
            "-F",
            "qcow2",
            "t.qcow2.1.base",
        ],
    );
    t.same("qemu-img", &args);
}

/// `offset`'s big-endian `width`-byte field of `file` set to `value`.
fn poke_be(file: &Path, offset: u64, width: usize, value: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(&value.to_be_bytes()[8 - width..], offset)
        .unwrap();
}

/// `offset`'s big-endian 8-byte field of `file`.
fn peek_be(file: &Path, offset: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8; 8];
    std::fs::File::open(file)
        .unwrap()
        .read_exact_at(&mut b, offset)
        .unwrap();
    u64::from_be_bytes(b)
}

/// A repairing check reports each refcount mismatch as QEMU's does: first
/// as found ("Leaked cluster ..." or "ERROR cluster ..."), then as fixed
/// ("Repairing cluster ..."), since QEMU compares the refcounts once to
/// see what is wrong and again to fix it. Both tools repair twin images:
/// a leak (cluster 0 counted twice), then a leak and a COPIED flag
/// missing from an L1 entry, as QEMU's iotest 138 makes them.
#[test]
fn repairing_check_reports_what_it_found_and_what_it_fixed() {
    let t = Twins::new();
    for name in ["leak.qcow2", "both.qcow2"] {
        t.on_both("qemu-img", &["create", "-q", "-f", "qcow2", name, "64k"]);
        t.on_both("qemu-io", &["-c", "write 0 64k", name]);
    }
    for dir in [&t.qemu, &t.ours] {
        for name in ["leak.qcow2", "both.qcow2"] {
            let img = dir.join(name);
            let reftable = peek_be(&img, 48);
            let refblock = peek_be(&img, reftable);
            poke_be(&img, refblock, 2, 2);
            if name == "both.qcow2" {
                let l1 = peek_be(&img, 40);
                poke_be(&img, l1, 8, peek_be(&img, l1) & !(1 << 63));
            }
        }
    }
    for (name, mode) in [("leak.qcow2", "leaks"), ("both.qcow2", "all")] {
        t.same("qemu-img", &["check", "-r", mode, name]);
        // Repaired: both check clean, alike.
        t.same("qemu-img", &["check", name]);
    }
}

/// The offset of the data of `file`'s header extension `kind`.
fn header_extension(file: &Path, kind: u32) -> u64 {
    let mut at = peek_be(file, 100) >> 32;
    loop {
        let head = peek_be(file, at);
        let (k, len) = ((head >> 32) as u32, head & 0xffff_ffff);
        assert_ne!(k, 0, "no header extension {kind:#x}");
        if k == kind {
            return at + 8;
        }
        at += 8 + len.next_multiple_of(8);
    }
}

/// Unknown feature bits as QEMU treats them: an image with incompatible
/// bits it does not know is refused with the names its own feature name
/// table gives them, then the mask of the rest; a repairing check (a
/// read-write open) clears the autoclear bits of features QEMU does not
/// maintain. Both tools on twin images QEMU made.
#[test]
fn unknown_feature_bits_are_named_and_cleared_as_qemu_does() {
    let t = Twins::new();
    for name in ["incompat.qcow2", "autoclear.qcow2"] {
        t.on_both("qemu-img", &["create", "-q", "-f", "qcow2", name, "1M"]);
    }
    for dir in [&t.qemu, &t.ours] {
        // The feature name table's first two entries renamed: incompatible
        // bits 61 "test1" and 62 "test2"; bit 63 stays unnamed.
        let img = dir.join("incompat.qcow2");
        let table = header_extension(&img, 0x6803_f857);
        for (i, (bit, name)) in [(61u8, "test1"), (62, "test2")].into_iter().enumerate() {
            let mut entry = [0u8; 48];
            entry[1] = bit;
            entry[2..2 + name.len()].copy_from_slice(name.as_bytes());
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
            f.write_all_at(&entry, table + 48 * i as u64).unwrap();
        }
        poke_be(&img, 72, 8, 0xe000_0000_0000_0000);
        poke_be(&dir.join("autoclear.qcow2"), 88, 8, 1 << 63);
    }
    // The check refuses it in the same words as info (it once printed
    // a placeholder, "Unsupported IMGFMT feature(s): 0x...").
    for cmd in ["info", "check"] {
        let out = t.same("qemu-img", &[cmd, "incompat.qcow2"]);
        assert!(out.is_empty(), "{cmd}: {out}");
        let (_, ours) = t.both("qemu-img", &[cmd, "incompat.qcow2"]);
        let err = String::from_utf8_lossy(&ours.stderr);
        assert!(
            err.contains("Unsupported qcow2 feature(s): test1, test2, Unknown incompatible feature: 8000000000000000"),
            "{cmd}: {err}"
        );
    }
    t.same("qemu-img", &["check", "-r", "all", "autoclear.qcow2"]);
    for dir in [&t.qemu, &t.ours] {
        assert_eq!(peek_be(&dir.join("autoclear.qcow2"), 88), 0, "{dir:?}");
    }
}

/// An image the check cannot open (a header claiming 1 EiB, as iotest 054
/// makes it) is an open failure, worded and ended as qemu-img ends one,
/// with or without repair.
#[test]
fn a_check_that_cannot_open_the_image_says_so_as_qemu_img_does() {
    let t = Twins::new();
    t.on_both(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "t.qcow2", "4G"],
    );
    for dir in [&t.qemu, &t.ours] {
        poke_be(&dir.join("t.qcow2"), 24, 8, 1 << 60);
    }
    t.same("qemu-img", &["check", "t.qcow2"]);
    t.same("qemu-img", &["check", "-r", "all", "t.qcow2"]);
}

/// Each preallocation mode, by QEMU and by qcsim: QEMU's own tools find the
/// two images alike (check, map, info with its disk size) and the files
/// equal byte for byte, and qcsim's map and check print what QEMU's print.
#[test]
fn preallocated_images_match_qemus() {
    let t = Twins::new();
    let cases = [
        ("preallocation=metadata", "3M"),
        ("preallocation=falloc", "3M"),
        ("preallocation=full", "3M"),
        // The last cluster only partly inside the disk.
        ("preallocation=metadata", "1000000"),
        ("compat=0.10,preallocation=metadata", "1M"),
        // (qcsim's own map leaves out the host offset QEMU prints for
        // unallocated subclusters of a cluster that has one: only QEMU's
        // tools are compared on it below.)
        ("extended_l2=on,preallocation=metadata", "1M"),
        // A second refcount block, placed after the run that needs it.
        ("cluster_size=4k,preallocation=metadata", "200M"),
        (
            "cluster_size=4k,refcount_bits=64,preallocation=falloc",
            "20M",
        ),
    ];
    for (opts, size) in cases {
        let create = ["create", "-f", "qcow2", "-o", opts, "t.qcow2", size];
        t.same("qemu-img", &create);
        for args in [
            &["check", "t.qcow2"][..],
            &["map", "--output=json", "t.qcow2"],
        ] {
            t.on_both("qemu-img", args);
            if !(opts.contains("extended_l2") && args[0] == "map") {
                t.same("qemu-img", args);
            }
        }
        // The disk size is the blocks the file system gave each file,
        // which for equal files can differ by an extent tree block (seen:
        // 3.25 against 3.26 MiB on a loaded machine); the mode's effect
        // (sparse, fallocated, written) is megabytes.
        let info = ["info", "t.qcow2"];
        let by_qemu_on_ours = exec("qemu-img", &info, &t.ours);
        for (theirs, ours) in [
            t.both("qemu-img", &info),
            (exec("qemu-img", &info, &t.qemu), by_qemu_on_ours),
        ] {
            let (theirs, ours) = (text_of(&theirs), text_of(&ours));
            assert_eq!(
                without_disk_size(&ours),
                without_disk_size(&theirs),
                "{opts} {size}: info"
            );
            let (a, b) = (disk_sizes(&ours), disk_sizes(&theirs));
            assert_eq!(a.len(), b.len(), "{ours}\n{theirs}");
            for (a, b) in a.iter().zip(b) {
                assert!(
                    (a - b).abs() <= DISK_SIZE_SLACK_MIB,
                    "{opts} {size}: disk size {a} MiB against QEMU's {b} MiB:\n{ours}\n{theirs}"
                );
            }
        }
        // Past the header's first 1 KiB: below 64 KiB clusters QEMU
        // leaves out the feature name table, which qcsim writes.
        let bytes = |dir: &Path| std::fs::read(dir.join("t.qcow2")).unwrap()[1024..].to_vec();
        assert!(
            bytes(&t.ours) == bytes(&t.qemu),
            "{opts} {size}: the files differ"
        );
    }
    // Refused as QEMU refuses them.
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "raw",
            "-o",
            "preallocation=metadata",
            "r.raw",
            "1M",
        ],
    );
    // An unknown mode: the same message (qemu-img prints its Formatting
    // line first, which qcsim leaves out for a value it cannot parse).
    let bogus = [
        "create",
        "-f",
        "qcow2",
        "-o",
        "preallocation=bogus",
        "b.qcow2",
        "1M",
    ];
    let (theirs, ours) = t.both("qemu-img", &bogus);
    assert_eq!(ours.stderr, theirs.stderr);
    assert_eq!(ours.status.code(), theirs.status.code());
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "preallocation=metadata",
            "-b",
            "t.qcow2",
            "-F",
            "qcow2",
            "o.qcow2",
        ],
    );
    for mode in ["falloc", "full"] {
        let opts = format!("preallocation={mode}");
        t.same(
            "qemu-img",
            &["create", "-f", "raw", "-o", &opts, "r.raw", "1M"],
        );
        t.on_both("qemu-img", &["info", "-f", "raw", "r.raw"]);
    }
}

/// Guest writes into preallocated clusters go in place; QEMU reads back
/// what qcsim wrote and qcsim what QEMU wrote, and the images stay alike.
#[test]
fn writes_into_preallocated_clusters_read_back_across_tools() {
    let t = Twins::new();
    let writes = [
        "-c",
        "write -P 0xab 1000 70000",
        "-c",
        "write -P 0xcd 2M 4k",
        // A whole cluster (no `write -z`: qcsim's zeroing frees a
        // preallocated cluster where QEMU keeps it allocated as zeroes,
        // the difference README.md notes for iotest 313).
        "-c",
        "write -P 0xef 192k 64k",
    ];
    let reads = [
        "-c",
        "read -P 0 0 1000",
        "-c",
        "read -P 0xab 1000 70000",
        "-c",
        "read -P 0 71000 125608",
        "-c",
        "read -P 0xef 192k 64k",
        "-c",
        "read -P 0 256k 1792k",
        "-c",
        "read -P 0xcd 2M 4k",
        "-c",
        "read -P 0 2101248 1M",
    ];
    for mode in ["metadata", "falloc", "full"] {
        let opts = format!("preallocation={mode}");
        t.same(
            "qemu-img",
            &["create", "-q", "-f", "qcow2", "-o", &opts, "t.qcow2", "3M"],
        );
        let mut args = writes.to_vec();
        args.push("t.qcow2");
        t.same("qemu-io", &args);
        let mut args = reads.to_vec();
        args.push("t.qcow2");
        // QEMU's qemu-io on both images, then qcsim's on both.
        let out = t.on_both("qemu-io", &args);
        assert!(
            !out.contains("Pattern verification failed"),
            "{mode}: {out}"
        );
        t.on_both(&t.ours_as("qemu-io"), &args);
        t.on_both("qemu-img", &["check", "t.qcow2"]);
        t.on_both("qemu-img", &["map", "--output=json", "t.qcow2"]);
    }
}

/// A discard on a version 2 image with a backing file changes nothing, as
/// QEMU's qcow2 driver declines it: the clusters keep their data.
#[test]
fn discard_on_a_v2_overlay_changes_nothing() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "b.qcow2", "128k"],
    );
    t.same("qemu-io", &["-c", "write -P 0xff 0 128k", "b.qcow2"]);
    let overlay = [
        "create",
        "-q",
        "-f",
        "qcow2",
        "-o",
        "compat=0.10",
        "-b",
        "b.qcow2",
        "-F",
        "qcow2",
        "t.qcow2",
    ];
    t.same("qemu-img", &overlay);
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 0x01 0 128k",
            "-c",
            "discard 0 128k",
            "t.qcow2",
        ],
    );
    let out = t.same("qemu-io", &["-c", "read -P 0x01 0 128k", "t.qcow2"]);
    assert!(!out.contains("Pattern verification failed"), "{out}");
    t.same("qemu-img", &["map", "--output=json", "t.qcow2"]);
}

/// A size whose L1 table would pass QEMU's 32 MiB limit is the qcow2
/// driver's error, after the Formatting line (iotest 054's 1 EiB), and a
/// larger cluster size makes the same size fit.
#[test]
fn a_size_too_large_for_the_l1_table_is_refused_as_qemu_img_does() {
    let t = Twins::new();
    t.same(
        "qemu-img",
        &["create", "-f", "qcow2", "t.qcow2", "1048576T"],
    );
    t.same(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=2M",
            "u.qcow2",
            "1048576T",
        ],
    );
}

#[test]
fn block_options_open_and_fail_as_qemu_io_does() {
    let t = Twins::new();
    t.same("qemu-img", &["create", "-f", "qcow2", "t.qcow2", "1M"]);
    t.same("qemu-img", &["create", "-f", "raw", "r.raw", "1M"]);
    for d in [&t.qemu, &t.ours] {
        std::fs::create_dir(d.join("dir")).unwrap();
    }
    // Each protocol on a directory and on /dev/null, read-only and not:
    // the open's own error first, then the kind of file each driver takes.
    for proto in ["file", "host_device", "host_cdrom"] {
        for ro in ["-r ", ""] {
            for name in ["dir", "/dev/null"] {
                let open = format!("open {ro}-o driver={proto},filename={name},locking=off");
                // (QEMU asks a CD-ROM drive for its medium's length: not
                // modelled, so only the open is compared there.)
                let length = if proto == "host_cdrom" {
                    "close"
                } else {
                    "length"
                };
                t.same("qemu-io", &["-c", &open, "-c", length]);
            }
        }
    }
    for opts in [
        "driver=qcow2,file.filename=t.qcow2,bogus=1",
        "driver=qcow2,file.filename=t.qcow2,file.bogus=1",
        "driver=qcow2,file.filename=t.qcow2,read-only=foo",
        "driver=qcow2,file.filename=t.qcow2,discard=foo",
        "driver=qcow2,file.filename=t.qcow2,detect-zeroes=foo",
        "driver=qcow2",
        "driver=file",
        "filename=t.qcow2",
        "driver=raw,file.driver=file,file.filename=r.raw,file.locking=off",
        "driver=qcow2,file.driver=host_device,file.filename=t.qcow2",
    ] {
        t.same(
            "qemu-io",
            &["-c", &format!("open -o {opts}"), "-c", "length"],
        );
    }
    // qcow2's cache options, checked against the image's cluster size.
    for opts in [
        "cache-size=1.25M,l2-cache-size=1M,refcount-cache-size=0.25M",
        "cache-size=1M,l2-cache-size=2M",
        "cache-size=1M,refcount-cache-size=2M",
        "l2-cache-entry-size=256",
        "l2-cache-entry-size=4242",
        "l2-cache-entry-size=128k",
        "cache-size=abc",
        "cache-size=0",
        "cache-size=2M,l2-cache-size=1M",
        "l2-cache-size=1M,refcount-cache-size=0.25M",
        "l2-cache-entry-size=512",
    ] {
        let open = format!("open -o {opts} t.qcow2");
        t.same("qemu-io", &["-c", &open, "-c", "read 0 64k"]);
    }
    t.same("qemu-io", &["-c", "open"]);
    t.same("qemu-io", &["-c", "open -r"]);
    t.same(
        "qemu-io",
        &["-c", "open -o driver=qcow2 t.qcow2", "-c", "length"],
    );
    // detect-zeroes: a write of zeroes allocates no data in either image
    // (QEMU marks the cluster zero where qcsim's engine, on a cluster with
    // nothing below it, leaves it unallocated, so the maps are not compared
    // line for line); without it, the same write is data.
    let data_in = |t: &Twins| {
        let (theirs, ours) = t.both("qemu-img", &["map", "--output=json", "t.qcow2"]);
        [theirs, ours].map(|o| {
            String::from_utf8(o.stdout)
                .unwrap()
                .contains("\"data\": true")
        })
    };
    for detect in ["on", "unmap"] {
        let spec =
            format!("driver=qcow2,file.filename=t.qcow2,discard=unmap,detect-zeroes={detect}");
        t.same(
            "qemu-io",
            &["-c", "write -P 0 0 64k", "--image-opts", &spec],
        );
        assert_eq!(data_in(&t), [false, false], "detect-zeroes={detect}");
    }
    let spec = "driver=qcow2,file.filename=t.qcow2";
    t.same("qemu-io", &["-c", "write -P 0 0 64k", "--image-opts", spec]);
    assert_eq!(data_in(&t), [true, true]);
}

#[test]
fn a_v2_image_with_snapshots_is_not_resized_as_qemu_img_refuses() {
    let t = Twins::new();
    for (compat, name) in [("0.10", "v2.qcow2"), ("1.1", "v3.qcow2")] {
        let o = format!("compat={compat}");
        t.same("qemu-img", &["create", "-f", "qcow2", "-o", &o, name, "1M"]);
        t.same("qemu-img", &["snapshot", "-c", "s", name]);
        t.same("qemu-img", &["resize", name, "2M"]);
        // (The rest of info holds dates and file sizes.)
        let (theirs, ours) = t.both("qemu-img", &["info", name]);
        let size = |o: &Output| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find(|l| l.starts_with("virtual size:"))
                .map(str::to_owned)
        };
        let want = if compat == "0.10" { "1 MiB" } else { "2 MiB" };
        assert_eq!(size(&theirs), size(&ours));
        assert!(size(&ours)
            .unwrap()
            .starts_with(&format!("virtual size: {want}")));
    }
}

/// `write -c` (compressed writes) reports and refuses as qemu-io does (a
/// cluster already allocated, a misaligned request, one past the end, the
/// `-f` conflict); QEMU's tools read qcsim's
/// compressed clusters and find the same map and a clean check, for both
/// compression types; qcsim reads, maps and checks QEMU's alike.
#[test]
fn write_c_writes_compressed_clusters_qemu_reads() {
    for ctype in ["zlib", "zstd"] {
        let t = Twins::new();
        let o = format!("compression_type={ctype}");
        t.on_both(
            "qemu-img",
            &["create", "-q", "-f", "qcow2", "-o", &o, "a.qcow2", "1M"],
        );
        let cmds = [
            "write -c -P 0x11 0 64k",
            "write -c 0 64k",
            "write -c 65536 4k",
            "write -c 1024 64k",
            "write -c -P 0x22 128k 128k",
            "write -c -P 0x33 960k 64k",
            "write -c -z 192k 64k",
            "write -c 2M 64k",
            "write -c -f 0 64k",
            "write -c 0 0",
            "write -c -q -P 0x44 320k 64k",
            "discard 320k 64k",
        ];
        let mut args = vec![];
        for c in &cmds {
            args.extend(["-c", *c]);
        }
        args.push("a.qcow2");
        t.same("qemu-io", &args);
        // QEMU's own tools on each twin: the same runs (compressed ones
        // too), the same check, the same data.
        let map = t.on_both("qemu-img", &["map", "--output=json", "a.qcow2"]);
        assert!(map.contains("\"compressed\": true"), "{ctype}: {map}");
        let check = t.on_both("qemu-img", &["check", "a.qcow2"]);
        assert!(check.contains("No errors were found"), "{ctype}: {check}");
        t.on_both(
            "qemu-io",
            &[
                "-r",
                "-c",
                "read -P 0x11 0 64k",
                "-c",
                "read -P 0x22 128k 64k",
                "-c",
                "read -P 0 192k 128k",
                "-c",
                "read -P 0x33 960k 64k",
                "a.qcow2",
            ],
        );
        // And qcsim as qemu-img maps and checks each as QEMU does.
        t.same("qemu-img", &["map", "--output=json", "a.qcow2"]);
        t.same("qemu-img", &["check", "a.qcow2"]);
        same_info(&t, ctype, "a.qcow2");
    }
}

/// `qemu-img info` of the twins' `img` names the compression type, and is
/// QEMU's (but for the disk size) for zstd, whose compressed sizes are
/// QEMU's (the zlib ones come from another deflate implementation, so the
/// file may end a few sectors apart and `file length` differ).
fn same_info(t: &Twins, ctype: &str, img: &str) {
    // What the file system allocates (qcsim grows files ahead with
    // fallocate'd zeroes) is left out, as the iotests filter it.
    let info = |program: &str, dir: &Path| {
        let out = exec(program, &["info", img], dir);
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .filter(|l| !l.contains("disk size:"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    let ours = info(&t.ours_as("qemu-img"), &t.ours);
    if ctype == "zstd" {
        assert_eq!(ours, info("qemu-img", &t.qemu), "info {img}");
    }
    assert!(
        ours.contains(&format!("compression type: {ctype}\n")),
        "{ours}"
    );
}

/// A raw source of mixed content: text that compresses well, byte runs,
/// noise that does not compress, zero clusters, and a partial last
/// cluster.
fn mixed_source(len: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for (i, chunk) in d.chunks_mut(65536).enumerate() {
        match i % 5 {
            0 => {
                let w = format!("cluster {i} of the mixed source; ");
                for (j, b) in chunk.iter_mut().enumerate() {
                    *b = w.as_bytes()[j % w.len()];
                }
            }
            1 => chunk.fill(i as u8),
            2 => {
                for b in chunk.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
            }
            3 => {}
            _ => {
                // Noise from 16 symbols: compresses to about half.
                for b in chunk.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = b'a' + (x % 16) as u8;
                }
            }
        }
    }
    d
}

/// `convert -c` as qemu-img's: the same output and, read by QEMU, the
/// same guest data (`compare` identical), the same map (which clusters
/// are compressed) and a clean check, for both compression types; raw
/// output with `-c` refused in qemu-img's words; QEMU's `convert -c`
/// output read and checked by qcsim as QEMU reads and checks it.
#[test]
fn convert_c_compresses_as_qemu_img_does() {
    let len = 20 * 65536 + 3 * 512;
    let src = mixed_source(len);
    for ctype in ["zlib", "zstd"] {
        let t = Twins::new();
        for dir in [&t.qemu, &t.ours] {
            std::fs::write(dir.join("src.raw"), &src).unwrap();
        }
        let o = format!("compression_type={ctype}");
        t.same(
            "qemu-img",
            &[
                "convert", "-c", "-O", "qcow2", "-o", &o, "src.raw", "c.qcow2",
            ],
        );
        let same = t.on_both("qemu-img", &["compare", "src.raw", "c.qcow2"]);
        assert_eq!(same, "Images are identical.\n");
        let check = t.on_both("qemu-img", &["check", "c.qcow2"]);
        assert!(check.contains("No errors were found"), "{ctype}: {check}");
        let map = t.on_both("qemu-img", &["map", "--output=json", "c.qcow2"]);
        assert!(map.contains("\"compressed\": true"), "{ctype}: {map}");
        t.same("qemu-img", &["map", "--output=json", "c.qcow2"]);
        same_info(&t, ctype, "c.qcow2");
        // qcsim on QEMU's output: the same check, map and data as QEMU's
        // tools on it.
        for args in [
            &["check", "c.qcow2"][..],
            &["map", "--output=json", "c.qcow2"][..],
            &["compare", "src.raw", "c.qcow2"][..],
        ] {
            let theirs = exec("qemu-img", args, &t.qemu);
            let ours = exec(&t.ours_as("qemu-img"), args, &t.qemu);
            assert_same("qemu-img", args, &theirs, &ours);
        }
        t.same(
            "qemu-img",
            &["convert", "-c", "-O", "raw", "src.raw", "c.raw"],
        );
        // An external data file has no room for compressed clusters:
        // the files are made, then the first write fails.
        t.same(
            "qemu-img",
            &[
                "convert",
                "-c",
                "-O",
                "qcow2",
                "-o",
                "data_file=d.data",
                "src.raw",
                "d.qcow2",
            ],
        );
    }
}

/// `convert -c` of a qcow2 source whose clusters are smaller than the
/// target's (as iotests 013 and 023 convert theirs): data runs of the
/// source are widened to whole target clusters, the holes between read as
/// zeroes, so the copy is the source and lays out as QEMU's.
#[test]
fn convert_c_from_small_clusters_writes_whole_target_clusters() {
    let t = Twins::new();
    t.on_both(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=1024",
            "s.qcow2",
            "8G",
        ],
    );
    for off in [0u64, 4 << 30] {
        let cmds = [
            format!("writev -P 0x11 {off} 1k 1k 1k"),
            format!("write -P 0x22 {} 512", off + 3072),
            format!("write -z {} 1k", off + 4096),
            format!("write -P 0x33 {} 2k", off + 6144),
            format!("write -P 0x44 {} 1k", off + 96 * 1024),
        ];
        let mut args = vec![];
        for c in &cmds {
            args.extend(["-c", c.as_str()]);
        }
        args.push("s.qcow2");
        t.on_both("qemu-io", &args);
    }
    t.same(
        "qemu-img",
        &[
            "convert", "-f", "qcow2", "-O", "qcow2", "-c", "s.qcow2", "c.qcow2",
        ],
    );
    t.on_both("qemu-img", &["compare", "s.qcow2", "c.qcow2"]);
    let map = t.on_both("qemu-img", &["map", "--output=json", "c.qcow2"]);
    assert!(map.contains("\"compressed\": true"), "{map}");
    let check = t.on_both("qemu-img", &["check", "c.qcow2"]);
    assert!(check.contains("No errors were found"), "{check}");
}

/// A cluster referenced more often than its refcount field can count:
/// check's error and the advice qemu-img prints on the line after it.
#[test]
fn an_overflowing_reference_count_is_reported_with_qemus_advice() {
    let t = Twins::new();
    t.create_qcow2("refcount_bits=1", "t.qcow2", "1M");
    t.same("qemu-io", &["-c", "write 0 64k", "t.qcow2"]);
    // Guest cluster 1 mapped to guest cluster 0's host cluster (5), in
    // both images: three references where one bit counts one.
    for dir in [&t.qemu, &t.ours] {
        let img = dir.join("t.qcow2");
        let entry = peek_be(&img, 0x40000);
        poke_be(&img, 0x40008, 8, entry);
        poke_be(&img, 0x40010, 8, entry);
    }
    t.same("qemu-img", &["check", "t.qcow2"]);
    let (_, ours) = t.both("qemu-img", &["check", "t.qcow2"]);
    let err = String::from_utf8_lossy(&ours.stderr);
    assert!(
        err.contains("ERROR: overflow cluster offset=0x50000\nUse qemu-img amend"),
        "{err}"
    );
}
