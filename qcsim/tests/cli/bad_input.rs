//! The robustness issue: bad input to any subcommand gets a clear error
//! naming the problem and a non-zero exit, never a panic, a hang or an
//! unbounded allocation, and a command that fails never destroys a file.
//!
//! - `create` and `convert` check every size, option, backing file and
//!   lock before they empty anything, and tell files apart by device and
//!   inode (hard links included);
//! - `campaign` bounds `--jobs` and `--time` and says which part of
//!   `--shard` is wrong, and runs and reports its range at the top of the
//!   seed space;
//! - `run --save` and `run --export` say what they could not write or
//!   what they created;
//! - `dump` fails on files it cannot read and on truncated headers;
//! - an image's backing name past the end of its file is named as such;
//! - `io` names the request that is out of range, and writes nothing;
//! - `check -r`, `dump` and `bench FILE` take QEMU's locks, and `info`,
//!   `check`, `convert` (and `dump`) take `-U`, as qemu-img does.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::support::{assert_clean, exec, qcsim, run, text, QCSIM};

/// What a file holds before a command that must leave it alone.
const PRECIOUS: &[u8] = b"precious data that no failed command may destroy\n";

/// Run `qcsim`, which must fail cleanly (exit 1, or 2 for a usage error
/// clap refuses; never a panic or a signal) with every needle in its
/// output. Returns standard output and error together.
fn refused(args: &[&str], dir: &Path, needles: &[&str]) -> String {
    refused_keeping(args, dir, needles, &[])
}

/// [`refused`], and first of all every file of `kept` still holds
/// [`PRECIOUS`].
fn refused_keeping(args: &[&str], dir: &Path, needles: &[&str], kept: &[&str]) -> String {
    let out = exec(QCSIM, args, dir);
    let all = text(&out);
    for name in kept {
        assert_precious(dir, name, &format!("qcsim {args:?}: {all}"));
    }
    assert!(
        matches!(out.status.code(), Some(1) | Some(2)),
        "qcsim {args:?} should fail with 1 or 2: {all}"
    );
    assert!(!all.contains("panicked"), "qcsim {args:?} panicked: {all}");
    for n in needles {
        assert!(all.contains(n), "qcsim {args:?}: output lacks {n:?}: {all}");
    }
    all
}

fn precious(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), PRECIOUS).unwrap();
}

fn assert_precious(dir: &Path, name: &str, case: &str) {
    let now = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{case}: {name}: {e}"));
    assert_eq!(
        now,
        PRECIOUS,
        "{case}: {name} was changed: now {} bytes {:?}",
        now.len(),
        String::from_utf8_lossy(&now[..now.len().min(64)])
    );
}

/// How long a holder may take to answer; generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(60);

/// `qemu-io` holding an image open (and locked) until dropped: killed and
/// reaped then, whatever happened.
struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
}

impl Holder {
    /// Open `image` with `qemu-io` (`args` before the image, e.g. `-r`) and
    /// wait until it answered a read: then its open and locks are done.
    fn qemu_io(args: &[&str], image: &str, dir: &Path) -> Holder {
        let mut child = Command::new("qemu-io")
            .args(args)
            .arg(image)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run qemu-io (install qemu-utils)");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut h = Holder {
            child,
            stdin,
            lines,
        };
        let stdin = h.stdin.as_mut().expect("stdin");
        writeln!(stdin, "read 0 512")
            .and_then(|()| stdin.flush())
            .unwrap();
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match h.lines.recv_timeout(left) {
                Ok(line) if line.contains("read 512/512 bytes at offset 0") => return h,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("qemu-io {image}: no answer"),
                Err(RecvTimeoutError::Disconnected) => panic!("qemu-io {image}: exited"),
            }
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Item 1: create and convert validate everything before touching a file.

#[test]
fn create_errors_leave_existing_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&[&str], &[&str])] = &[
        // Larger than any file offset.
        (
            &["create", "-f", "qcow2", "keep", "8E"],
            &["keep", "9223372036854775807"],
        ),
        (
            &["create", "-f", "raw", "keep", "8E"],
            &["keep", "9223372036854775807"],
        ),
        // The engine's own limits: an L1 table above 32 MiB.
        (
            &[
                "create",
                "-f",
                "qcow2",
                "-o",
                "cluster_size=512",
                "keep",
                "1T",
            ],
            &["'size'", "too large for file format 'qcow2'"],
        ),
        (
            &["create", "-f", "qcow2", "-o", "bogus=1", "keep", "1M"],
            &["'bogus'"],
        ),
        (
            &[
                "create",
                "-f",
                "qcow2",
                "-b",
                "missing.raw",
                "-F",
                "raw",
                "keep",
                "1M",
            ],
            &["missing.raw"],
        ),
        (
            &[
                "create",
                "-f",
                "qcow2",
                "-o",
                "cluster_size=4M",
                "keep",
                "1M",
            ],
            &["cluster size"],
        ),
        (
            &[
                "create",
                "-f",
                "qcow2",
                "-o",
                "compat=v2,lazy_refcounts=on",
                "keep",
                "1M",
            ],
            &["Lazy refcounts"],
        ),
        // The data file is emptied only once the image is known good.
        (
            &[
                "create",
                "-f",
                "qcow2",
                "-o",
                "data_file=data",
                "keep",
                "8E",
            ],
            &["9223372036854775807"],
        ),
        (
            &[
                "create",
                "-f",
                "qcow2",
                "-o",
                "data_file=data,cluster_size=512",
                "keep",
                "1T",
            ],
            &["'size'", "too large for file format 'qcow2'"],
        ),
    ];
    for (args, needles) in cases {
        precious(d, "keep");
        precious(d, "data");
        refused_keeping(args, d, needles, &["keep", "data"]);
    }
}

#[test]
fn convert_errors_leave_the_existing_destination_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "src.qcow2", "1M"], d);
    qcsim(&["create", "-q", "-f", "qcow2", "big.qcow2", "1T"], d);
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[
                "convert",
                "-O",
                "qcow2",
                "-o",
                "compat=v2,lazy_refcounts=on",
                "src.qcow2",
                "keep",
            ],
            &["Lazy refcounts"],
        ),
        (
            &[
                "convert",
                "-O",
                "qcow2",
                "-o",
                "compat=v2,data_file=data",
                "src.qcow2",
                "keep",
            ],
            &["External data files"],
        ),
        // Only the source's size shows that 512-byte clusters need an L1
        // table above 32 MiB.
        (
            &[
                "convert",
                "-O",
                "qcow2",
                "-o",
                "cluster_size=512",
                "big.qcow2",
                "keep",
            ],
            &["'size'", "too large for file format 'qcow2'"],
        ),
        (
            &[
                "convert",
                "-O",
                "qcow2",
                "-o",
                "data_file=data,cluster_size=512",
                "big.qcow2",
                "keep",
            ],
            &["'size'", "too large for file format 'qcow2'"],
        ),
        (
            &[
                "convert",
                "-O",
                "qcow2",
                "-o",
                "bogus=1",
                "src.qcow2",
                "keep",
            ],
            &["'bogus'"],
        ),
        (&["convert", "missing.qcow2", "keep"], &["missing.qcow2"]),
    ];
    for (args, needles) in cases {
        precious(d, "keep");
        precious(d, "data");
        refused_keeping(args, d, needles, &["keep", "data"]);
    }
}

/// A data file is emptied only once the image file is known to be free:
/// an image another process holds is refused with both files intact.
#[test]
fn create_refused_by_a_lock_leaves_the_data_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "img.qcow2", "1M"],
        d,
    );
    let before = std::fs::read(d.join("img.qcow2")).unwrap();
    precious(d, "data");
    let holder = Holder::qemu_io(&[], "img.qcow2", d);
    refused_keeping(
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "data_file=data",
            "img.qcow2",
            "1M",
        ],
        d,
        &["img.qcow2", "lock"],
        &["data"],
    );
    drop(holder);
    assert_eq!(std::fs::read(d.join("img.qcow2")).unwrap(), before);
}

/// The data file of a new image cannot be its backing file (by any name):
/// creating it would empty the backing file.
#[test]
fn create_refuses_a_data_file_that_is_the_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    precious(d, "base.raw");
    std::fs::hard_link(d.join("base.raw"), d.join("alias.raw")).unwrap();
    for data in ["base.raw", "alias.raw"] {
        let opts = format!("data_file={data}");
        refused_keeping(
            &[
                "create",
                "-f",
                "qcow2",
                "-b",
                "base.raw",
                "-F",
                "raw",
                "-o",
                &opts,
                "top.qcow2",
                "1M",
            ],
            d,
            &["data file", "backing file"],
            &["base.raw"],
        );
    }
}

// Item 10 (part): files compared by device and inode, not by path.

#[test]
fn create_and_convert_see_through_hard_links() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    precious(d, "base.raw");
    std::fs::hard_link(d.join("base.raw"), d.join("alias.raw")).unwrap();
    std::os::unix::fs::symlink("base.raw", d.join("sym.raw")).unwrap();
    for unsafe_flag in [&[][..], &["-u"][..]] {
        for target in ["alias.raw", "sym.raw"] {
            let mut args = vec!["create", "-f", "qcow2"];
            args.extend_from_slice(unsafe_flag);
            args.extend(["-b", "base.raw", "-F", "raw", target, "1M"]);
            refused_keeping(&args, d, &["same file"], &["base.raw"]);
        }
    }
    // Nor a file deeper in the backing chain (the backing file's own
    // backing file here), nor the data file of the new image.
    qcsim(
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            "base.raw",
            "-F",
            "raw",
            "mid.qcow2",
            "1M",
        ],
        d,
    );
    for args in [
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "mid.qcow2",
            "-F",
            "qcow2",
            "alias.raw",
        ][..],
        &[
            "create",
            "-f",
            "qcow2",
            "-b",
            "mid.qcow2",
            "-F",
            "qcow2",
            "-o",
            "data_file=alias.raw",
            "new.qcow2",
        ][..],
    ] {
        refused_keeping(
            args,
            d,
            &["same file", "backing file of mid.qcow2"],
            &["base.raw"],
        );
    }
    for target in ["alias.raw", "sym.raw"] {
        refused_keeping(
            &["convert", "-f", "raw", "base.raw", target],
            d,
            &["same file"],
            &["base.raw"],
        );
    }
    // A destination that is a file of the source's chain (its raw backing
    // file here) is refused too, naming the file's role.
    qcsim(
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            "base.raw",
            "-F",
            "raw",
            "top.qcow2",
            "1M",
        ],
        d,
    );
    for target in ["base.raw", "alias.raw"] {
        refused_keeping(
            &["convert", "top.qcow2", target],
            d,
            &["same file", "backing file"],
            &["base.raw"],
        );
    }
}

// Item 2: --jobs bounded.

#[test]
fn campaign_jobs_are_bounded_and_never_zero() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = [
        "campaign",
        "--seeds",
        "0..1",
        "--quiet",
        "--reports",
        "r",
        "--corpus",
        "c",
        "--jobs",
    ];
    let with = |jobs: &'static str| {
        let mut v = base.to_vec();
        v.push(jobs);
        v
    };
    refused(&with("0"), d, &["--jobs", "0", "at least 1"]);
    refused(&with("100000"), d, &["--jobs", "100000", "1024"]);
    refused(&with("1025"), d, &["1024"]);
    refused(&with("many"), d, &["--jobs", "many"]);
    assert!(!d.join("r").exists(), "a refused campaign wrote no report");
    let out = qcsim(&with("3"), d);
    assert!(out.contains("(3 jobs)"), "{out}");
}

// Item 3: --time checked.

#[test]
fn campaign_time_overflow_and_zero_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&str, &[&str])] = &[
        (
            "1152921504606846976h",
            &["1152921504606846976h", "too long"],
        ),
        ("307445734561825861m", &["too long"]),
        ("18446744073709551616s", &["too long"]),
        ("0", &["--time", "0", "longer than 0"]),
        ("0s", &["longer than 0"]),
        ("0h", &["longer than 0"]),
        ("10d", &["unit"]),
        ("h", &["number"]),
    ];
    for (time, needles) in cases {
        let args = [
            "campaign",
            "--time",
            time,
            "--quiet",
            "--reports",
            "r",
            "--corpus",
            "c",
        ];
        refused(&args, d, needles);
    }
    assert!(!d.join("r").exists(), "a refused campaign wrote no report");
}

// Item 4: --shard says which part is wrong.

#[test]
fn campaign_shard_errors_name_the_part() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&str, &[&str])] = &[
        ("x/y", &["--shard", "index \"x\"", "I/N"]),
        ("1/y", &["count \"y\"", "I/N"]),
        ("-1/4", &["index \"-1\""]),
        ("3", &["I/N"]),
        ("2/2", &["index 2", "below the count 2"]),
        ("0/0", &["count 0"]),
    ];
    for (shard, needles) in cases {
        // `=`, so that clap takes "-1/4" as the value it is.
        let shard_arg = format!("--shard={shard}");
        let args = ["campaign", "--seeds", "0..1", "--quiet", &shard_arg];
        let all = refused(&args, d, needles);
        assert!(!all.contains("invalid digit"), "{shard}: {all}");
    }
}

// Item 5: run --save says it could not write.

#[test]
fn run_save_failure_says_it_could_not_write_the_case() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let all = refused(
        &["run", "--seed", "1", "--save", "/"],
        d,
        &["could not write the case to /", "Is a directory"],
    );
    assert!(!all.contains("reading"), "{all}");
    refused(
        &["run", "--seed", "1", "--save", "no/such/dir/case.json"],
        d,
        &[
            "could not write the case to no/such/dir/case.json",
            "No such file",
        ],
    );
    // And a case that cannot be read says so, once.
    let all = refused(
        &["replay", "missing.json"],
        d,
        &["could not read the case from missing.json"],
    );
    assert_eq!(all.matches("No such file").count(), 1, "{all}");
}

// Item 6: dump fails on what it cannot read.

#[test]
fn dump_fails_on_unreadable_files_and_truncated_headers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("sub")).unwrap();
    refused(&["dump", "sub"], d, &["sub", "not a regular file"]);
    refused(
        &["dump", "missing.qcow2"],
        d,
        &["missing.qcow2", "No such file"],
    );
    qcsim(&["create", "-q", "-f", "qcow2", "v3.qcow2", "1M"], d);
    qcsim(
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "compat=v2",
            "v2.qcow2",
            "1M",
        ],
        d,
    );
    let v3 = std::fs::read(d.join("v3.qcow2")).unwrap();
    let v2 = std::fs::read(d.join("v2.qcow2")).unwrap();
    std::fs::write(d.join("t3.qcow2"), &v3[..50]).unwrap();
    std::fs::write(d.join("t2.qcow2"), &v2[..70]).unwrap();
    std::fs::write(d.join("t0.qcow2"), &v3[..2]).unwrap();
    std::fs::write(d.join("empty.qcow2"), b"").unwrap();
    std::fs::write(d.join("text.qcow2"), PRECIOUS).unwrap();
    refused(
        &["dump", "t3.qcow2"],
        d,
        &["t3.qcow2", "truncated", "50 bytes", "104"],
    );
    refused(
        &["dump", "t2.qcow2"],
        d,
        &["t2.qcow2", "truncated", "70 bytes", "72"],
    );
    refused(&["dump", "t0.qcow2"], d, &["truncated", "2 bytes", "72"]);
    refused(&["dump", "empty.qcow2"], d, &["truncated", "0 bytes"]);
    refused(
        &["dump", "text.qcow2"],
        d,
        &["text.qcow2", "not a qcow2 image"],
    );
    // A whole image still dumps.
    let out = qcsim(&["dump", "v3.qcow2"], d);
    assert!(out.starts_with("header\n  version 3\n"), "{out}");
}

// Item 7: a backing file name past the end of the file.

#[test]
fn backing_name_past_the_end_of_the_file_is_named_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("base.raw"), vec![0u8; 1 << 20]).unwrap();
    qcsim(
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            "base.raw",
            "-F",
            "raw",
            "top.qcow2",
            "1M",
        ],
        d,
    );
    let bytes = std::fs::read(d.join("top.qcow2")).unwrap();
    let offset = u64::from_be_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let len = u32::from_be_bytes(bytes[16..20].try_into().unwrap()) as usize;
    assert_eq!(len, "base.raw".len());
    std::fs::write(d.join("cut.qcow2"), &bytes[..offset + 2]).unwrap();
    let cut_len = (offset + 2).to_string();
    // Every command that opens the image through the engine says so.
    for args in [
        &["info", "cut.qcow2"][..],
        &["io", "-c", "read 0 512", "cut.qcow2"][..],
        &["convert", "cut.qcow2", "out.raw"][..],
    ] {
        let all = refused(args, d, &["past the end of the file", &cut_len]);
        assert!(
            !all.contains("outside the first cluster"),
            "{args:?}: {all}"
        );
    }
}

// Item 8: run --export creates the directory and says so.

#[test]
fn run_export_creates_the_directory_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = exec(QCSIM, &["run", "--seed", "1", "--export", "out/new"], d);
    let all = text(&out);
    assert!(matches!(out.status.code(), Some(0) | Some(1)), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("created out/new"), "{all}");
    assert!(stdout.contains("out/new/seed-1"), "{all}");
    assert!(d.join("out/new/seed-1/final.qcow2").is_file(), "{all}");
    // With --json the standard output stays one JSON document.
    let out = exec(
        QCSIM,
        &["run", "--seed", "1", "--json", "--export", "out/json"],
        d,
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("out/json/seed-1"),
        "{}",
        text(&out)
    );
    // A directory that cannot be made is an error before anything runs.
    precious(d, "plain");
    refused(
        &["run", "--seed", "1", "--export", "plain"],
        d,
        &["plain", "export"],
    );
    qcsim(&["run", "--seed", "1", "--save", "case.json"], d);
    refused(
        &["replay", "--export", "plain/sub", "case.json"],
        d,
        &["plain/sub", "export"],
    );
    assert_precious(d, "plain", "export into a file");
}

// Item 9: io refuses a request out of range and writes nothing. As qemu-io
// it says only "Input/output error" (the typed failure of `tools::io`
// names the request).

#[test]
fn io_out_of_range_names_the_request_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "16M"], d);
    qcsim(&["create", "-q", "-f", "raw", "img.raw", "16M"], d);
    for (image, format) in [("img.qcow2", "qcow2"), ("img.raw", "raw")] {
        for (cmd, op) in [
            ("read 0 1g", "read"),
            ("write 0 1g", "write"),
            ("write -z 0 1g", "write"),
            ("discard 0 1g", "discard"),
        ] {
            let all = refused(&["io", "-f", format, "-c", cmd, image], d, &[]);
            let want = format!("{op} failed: Input/output error");
            assert!(all.contains(&want), "{image} {cmd}: {all}");
        }
        let all = refused(&["io", "-f", format, "-c", "read 16m 512", image], d, &[]);
        assert!(all.contains("read failed: Input/output error"), "{all}");
        // Nothing of the refused writes reached the image.
        let out = qcsim(&["io", "-f", format, "-c", "read -P 0 0 16M", image], d);
        assert!(out.contains("read 16777216/16777216"), "{image}: {out}");
    }
    assert_clean("img.qcow2", d);
}

// Item 10: locks for check -r, dump and bench; -U for info, check,
// convert and dump.

#[test]
fn check_repair_dump_and_bench_take_locks_and_u_shares() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "img.qcow2", "1M"],
        d,
    );
    {
        // A writer holds the image: nothing may repair it, and readers
        // get in only with -U, as with qemu-img.
        let _writer = Holder::qemu_io(&[], "img.qcow2", d);
        let locked = ["lock", "img.qcow2"];
        refused(&["check", "-r", "leaks", "img.qcow2"], d, &locked);
        refused(&["check", "-r", "all", "img.qcow2"], d, &locked);
        refused(&["check", "img.qcow2"], d, &locked);
        refused(&["info", "img.qcow2"], d, &locked);
        refused(&["dump", "img.qcow2"], d, &locked);
        refused(&["bench", "-c", "4", "-d", "1", "img.qcow2"], d, &locked);
        refused(&["convert", "img.qcow2", "out.raw"], d, &locked);
        refused(
            &["check", "-U", "-r", "leaks", "img.qcow2"],
            d,
            &["force-share", "read-only"],
        );
        qcsim(&["check", "-U", "img.qcow2"], d);
        qcsim(&["check", "--force-share", "img.qcow2"], d);
        qcsim(&["info", "-U", "img.qcow2"], d);
        qcsim(&["dump", "-U", "img.qcow2"], d);
        qcsim(&["bench", "-U", "-c", "4", "-d", "1", "img.qcow2"], d);
        qcsim(&["convert", "-U", "img.qcow2", "out.raw"], d);
    }
    {
        // A reader holds the image: reading is fine, repairing is not.
        let _reader = Holder::qemu_io(&["-r"], "img.qcow2", d);
        refused(
            &["check", "-r", "leaks", "img.qcow2"],
            d,
            &["lock", "img.qcow2"],
        );
        qcsim(&["check", "img.qcow2"], d);
        qcsim(&["dump", "img.qcow2"], d);
    }
    // Alone, repair works, and takes the write locks while it runs (a
    // qemu-io started meanwhile could not write; here it just finds the
    // image free again afterwards).
    qcsim(&["check", "-r", "all", "img.qcow2"], d);
    run("qemu-io", &["-c", "write 0 4k", "img.qcow2"], d);
    assert_clean("img.qcow2", d);
}

/// A campaign whose report cannot be written fails and says where, after
/// running its cases (before, `--reports /proc/x` exited 0 with no report
/// and no message, so a scripted campaign lost its figures silently).
#[test]
fn campaign_report_write_failure_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A regular file where the report directory should be: creating the
    // directory fails whoever runs the test (root included, unlike a
    // read-only directory).
    std::fs::write(d.join("taken"), b"not a directory").unwrap();
    let args = [
        "campaign",
        "--seeds",
        "0..2",
        "--quiet",
        "--reports",
        "taken/reports",
        "--corpus",
        "c",
    ];
    let err = refused(&args, d, &["report", "taken/reports"]);
    assert!(
        err.contains("campaign: 2 cases"),
        "the cases still ran: {err}"
    );
    assert_eq!(
        std::fs::read(d.join("taken")).unwrap(),
        b"not a directory",
        "the file in the way is left alone"
    );
}

// A campaign at the top of the seed space runs and names its range (the
// end of a timed campaign's range is `timed_end`, unit-tested in
// cli/campaign.rs: `--time` starts at seed 0).

#[test]
fn a_campaign_at_the_top_of_the_seed_space_reports_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // u64::MAX is 18446744073709551615: of the ten seeds below it, shard
    // 605/1000 holds one, 18446744073709551605.
    let args = [
        "campaign",
        "--seeds",
        "18446744073709551605..18446744073709551615",
        "--shard",
        "605/1000",
        "--jobs",
        "1",
        "--quiet",
        "--reports",
        "r",
        "--corpus",
        "c",
    ];
    let out = exec(QCSIM, &args, d);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("campaign: 1 cases"), "{}", text(&out));
    let name = "campaign-18446744073709551605-18446744073709551615-shard-605-of-1000";
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.join("r").join(name).join("summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        report["campaign"]["seeds"],
        serde_json::json!([18446744073709551605u64, 18446744073709551615u64])
    );
}

/// A tool that writes is at least as strict as one that reads: an image
/// whose snapshot table `info` refuses (an entry with more extra data
/// than QEMU's 1 KiB limit) is opened by no command, so `io` writes
/// nothing to it.
#[test]
fn io_refuses_an_image_whose_snapshot_table_info_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "16M"], d);
    qcsim(&["img", "snapshot", "-c", "s1", "img.qcow2"], d);
    let path = d.join("img.qcow2");
    let mut bytes = std::fs::read(&path).unwrap();
    let table = u64::from_be_bytes(bytes[64..72].try_into().unwrap()) as usize;
    bytes[table + 36..table + 40].copy_from_slice(&5000u32.to_be_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let needle = "snapshot table entry 0: 5000 bytes of extra data exceed the 1024-byte limit";
    refused(&["info", "img.qcow2"], d, &[needle]);
    for cmd in [
        "write 0 512",
        "write -z 0 64k",
        "discard 0 64k",
        "read 0 512",
    ] {
        refused(&["io", "-c", cmd, "img.qcow2"], d, &[needle]);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{cmd} changed the image"
        );
    }
    // The same image with the entry's extra data back in bounds opens.
    bytes[table + 36..table + 40].copy_from_slice(&24u32.to_be_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let out = qcsim(&["io", "-c", "write 0 512", "img.qcow2"], d);
    assert!(out.contains("wrote 512/512"), "{out}");
}
