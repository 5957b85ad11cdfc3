//! Issue 10: real image files that must not be destroyed.
//!
//! - A file an image refers to (backing file, external data file) that is
//!   the image itself, or a file already open in the same chain, compared
//!   by device and inode (so symlinks and hard links count), is refused at
//!   open with an error naming the field and the file, and nothing is
//!   written: the files stay byte-for-byte as they were.
//! - Image locking as QEMU does it (OFD locks on bytes 100.. and 200.. of
//!   every file): `qcsim` and `qemu-io`/`qemu-img` refuse to write an image
//!   the other holds open for writing, in both directions, for backing and
//!   data files too; `-r -U` reads an image in use, as qemu-io's does;
//!   `check` locks an external data file as `qemu-img check` does.
//! - `qcsim io` without `-c` reads commands from standard input one at a
//!   time, which is how these tests hold an image open.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::support::{exec, run, text, QCSIM};

/// How long a holder may take to answer; generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Run and require failure whose standard error contains every needle.
fn refused(program: &str, args: &[&str], dir: &Path, needles: &[&str]) -> String {
    let out = exec(program, args, dir);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "{program} {args:?} should have failed: {}",
        text(&out)
    );
    for n in needles {
        assert!(
            stderr.contains(n),
            "{program} {args:?}: stderr lacks {n:?}: {}",
            text(&out)
        );
    }
    stderr
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Replace the one occurrence of `from` in the first cluster of `name` by
/// `to` (same length): how a header extension or backing name is retargeted.
fn patch(dir: &Path, name: &str, from: &str, to: &str) {
    assert_eq!(from.len(), to.len(), "patch keeps the length");
    let path = dir.join(name);
    let mut bytes = std::fs::read(&path).unwrap();
    let head = &bytes[..bytes.len().min(65536)];
    let hits: Vec<usize> = head
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from.as_bytes())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(hits.len(), 1, "{name}: '{from}' found at {hits:?}");
    bytes[hits[0]..hits[0] + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(&path, bytes).unwrap();
}

/// Set autoclear bit 0 (bitmaps) in a version 3 header: qcsim clears bits
/// it does not maintain at a read-write open, so any open that gets as far
/// as the engine changes the file.
fn set_autoclear_bitmaps(dir: &Path, name: &str) {
    let path = dir.join(name);
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[4..8], &3u32.to_be_bytes(), "version 3 header");
    bytes[95] |= 1;
    std::fs::write(&path, bytes).unwrap();
}

/// A process holding an image open, fed commands on standard input. Killed
/// and reaped when dropped, whatever happened.
struct Holder {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Holder {
    fn spawn(program: &str, args: &[&str], dir: &Path) -> Holder {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        // The reader ends at EOF, when the child exits or is killed.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Holder {
            what: format!("{program} {args:?}"),
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| {
                panic!("{}: cannot send {line:?}: {e}", self.what);
            });
    }

    /// Wait for an output line containing `needle` (qemu-io's prompt may
    /// stand before it on the line).
    fn wait_for(&mut self, needle: &str) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = line.contains(needle);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!(
                    "{}: no line with {needle:?} within {TIMEOUT:?}; saw {:?}",
                    self.what, self.seen
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "{}: exited before printing {needle:?} ({:?}); saw {:?}",
                    self.what,
                    self.child.try_wait(),
                    self.seen
                ),
            }
        }
    }

    /// Open, and ready: it answered a read, so the open (and its locks)
    /// are done.
    fn ready(program: &str, args: &[&str], dir: &Path) -> Holder {
        let mut h = Holder::spawn(program, args, dir);
        h.send("read 0 512");
        h.wait_for("read 512/512 bytes at offset 0");
        h
    }

    /// Close standard input (EOF ends the session) and wait for the exit.
    fn finish(mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                other => panic!("{}: did not exit at EOF: {other:?}", self.what),
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

fn qemu_create(dir: &Path, args: &[&str]) {
    let mut all = vec!["create", "-q"];
    all.extend_from_slice(args);
    run("qemu-img", &all, dir);
}

/// The links a case can name instead of the file itself.
fn make_links(dir: &Path, target: &str) {
    std::os::unix::fs::symlink(target, dir.join("sym.qcow2")).unwrap();
    std::fs::hard_link(dir.join(target), dir.join("hln.qcow2")).unwrap();
}

#[test]
fn a_data_file_that_is_the_image_itself_is_refused_and_nothing_is_written() {
    for raw in [false, true] {
        // The image itself, a symlink to it, a hard link to it: all the
        // same file, and all 9 bytes long like the data file name patched.
        for name in ["img.qcow2", "sym.qcow2", "hln.qcow2"] {
            let dir = tempfile::tempdir().unwrap();
            let d = dir.path();
            let opts = if raw {
                "data_file=img.dataf,data_file_raw=on"
            } else {
                "data_file=img.dataf"
            };
            qemu_create(d, &["-f", "qcow2", "-o", opts, "img.qcow2", "1M"]);
            patch(d, "img.qcow2", "img.dataf", name);
            make_links(d, "img.qcow2");
            let before = read(d, "img.qcow2");
            let case = format!("raw={raw} data file {name}");
            let quoted = format!("data file '{name}'");
            let err = refused(
                QCSIM,
                &[
                    "io",
                    "-c",
                    "write -P 0x55 0 64k",
                    "-c",
                    "flush",
                    "img.qcow2",
                ],
                d,
                &[&quoted, "img.qcow2"],
            );
            assert!(err.contains("already"), "{case}: {err}");
            refused(
                QCSIM,
                &["io", "-r", "-c", "read 0 64k", "img.qcow2"],
                d,
                &[&quoted],
            );
            assert!(read(d, "img.qcow2") == before, "{case}: image changed");
            let info = run("qemu-img", &["info", "img.qcow2"], d);
            assert!(
                String::from_utf8_lossy(&info.stdout).contains("file format: qcow2"),
                "{case}: {}",
                text(&info)
            );
        }
    }
}

#[test]
fn a_backing_file_that_is_the_image_itself_is_refused_and_nothing_is_written() {
    for name in ["img.qcow2", "sym.qcow2", "hln.qcow2"] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        qemu_create(
            d,
            &[
                "-f",
                "qcow2",
                "-u",
                "-b",
                "bas.qcow2",
                "-F",
                "qcow2",
                "img.qcow2",
                "1M",
            ],
        );
        patch(d, "img.qcow2", "bas.qcow2", name);
        // A read-write open that reached the engine would clear this bit.
        set_autoclear_bitmaps(d, "img.qcow2");
        make_links(d, "img.qcow2");
        let before = read(d, "img.qcow2");
        let quoted = format!("backing file '{name}'");
        refused(
            QCSIM,
            &[
                "io",
                "-c",
                "write -P 0x55 0 64k",
                "-c",
                "flush",
                "img.qcow2",
            ],
            d,
            &[&quoted, "img.qcow2", "loops"],
        );
        assert!(
            read(d, "img.qcow2") == before,
            "backing {name}: image changed"
        );
    }
}

#[test]
fn a_data_file_that_is_the_backing_file_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(d, &["-f", "qcow2", "base.qcow2", "1M"]);
    run("qemu-io", &["-c", "write -P 0x22 0 64k", "base.qcow2"], d);
    qemu_create(
        d,
        &[
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "-o",
            "data_file=data0.file",
            "top.qcow2",
        ],
    );
    patch(d, "top.qcow2", "data0.file", "base.qcow2");
    set_autoclear_bitmaps(d, "top.qcow2");
    let base = read(d, "base.qcow2");
    let top = read(d, "top.qcow2");
    refused(
        QCSIM,
        &[
            "io",
            "-c",
            "write -P 0x55 0 64k",
            "-c",
            "flush",
            "top.qcow2",
        ],
        d,
        &["data file 'base.qcow2'", "top.qcow2", "backing file"],
    );
    assert!(read(d, "base.qcow2") == base, "backing file changed");
    assert!(read(d, "top.qcow2") == top, "image changed");
}

#[test]
fn commands_come_from_standard_input_until_quit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(d, &["-f", "qcow2", "img.qcow2", "1M"]);
    let mut h = Holder::ready(QCSIM, &["io", "img.qcow2"], d);
    h.send("write -P 7 0 4k");
    h.wait_for("wrote 4096/4096 bytes at offset 0");
    h.send("read -P 7 0 4k");
    h.wait_for("read 4096/4096 bytes at offset 0");
    h.send("quit");
    // Whatever follows quit is not run.
    let _ = writeln!(h.stdin.as_mut().unwrap(), "write -P 8 0 4k");
    assert!(h.finish().success());
    run("qemu-io", &["-c", "read -P 7 0 4k", "img.qcow2"], d);
}

#[test]
fn qcsim_holding_an_image_for_writing_locks_qemu_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(d, &["-f", "qcow2", "img.qcow2", "1M"]);
    let mut h = Holder::ready(QCSIM, &["io", "img.qcow2"], d);
    refused("qemu-io", &["-c", "write 0 4k", "img.qcow2"], d, &["lock"]);
    // A plain read-only open fails too (it does not share writing), and
    // so does qemu-img info; with force-share a reader gets in.
    refused(
        "qemu-io",
        &["-r", "-c", "read 0 4k", "img.qcow2"],
        d,
        &["lock"],
    );
    refused("qemu-img", &["info", "img.qcow2"], d, &["lock"]);
    run("qemu-io", &["-r", "-U", "-c", "read 0 4k", "img.qcow2"], d);
    run("qemu-img", &["info", "-U", "img.qcow2"], d);
    // The holder still writes, and its locks go with it.
    h.send("write -P 0x33 0 4k");
    h.wait_for("wrote 4096/4096 bytes at offset 0");
    assert!(h.finish().success());
    run("qemu-io", &["-c", "read -P 0x33 0 4k", "img.qcow2"], d);
}

#[test]
fn qemu_holding_an_image_for_writing_locks_qcsim_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(d, &["-f", "qcow2", "img.qcow2", "1M"]);
    let h = Holder::ready("qemu-io", &["img.qcow2"], d);
    let before = read(d, "img.qcow2");
    refused(
        QCSIM,
        &["io", "-c", "write 0 4k", "img.qcow2"],
        d,
        &["\"write\" lock", "img.qcow2", "another process"],
    );
    refused(
        QCSIM,
        &["io", "-r", "-c", "read 0 4k", "img.qcow2"],
        d,
        &["shared \"write\" lock", "img.qcow2"],
    );
    // Creating over it would truncate it: refused before anything is done.
    refused(
        QCSIM,
        &["create", "-f", "qcow2", "img.qcow2", "1M"],
        d,
        &["lock", "img.qcow2"],
    );
    assert!(read(d, "img.qcow2") == before, "image changed");
    let out = run(
        QCSIM,
        &["io", "-r", "-U", "-c", "read -P 0 0 4k", "img.qcow2"],
        d,
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("read 4096/4096 bytes at offset 0"),
        "{}",
        text(&out)
    );
    // As in qemu-io, force-share is for read-only opens only.
    refused(
        QCSIM,
        &["io", "-U", "-c", "read 0 4k", "img.qcow2"],
        d,
        &["read-only"],
    );
    assert!(h.finish().success());
    run(QCSIM, &["io", "-c", "write 0 4k", "img.qcow2"], d);
}

#[test]
fn read_only_holders_keep_writers_out_and_let_readers_in() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(d, &["-f", "qcow2", "img.qcow2", "1M"]);

    let h = Holder::ready(QCSIM, &["io", "-r", "img.qcow2"], d);
    refused("qemu-io", &["-c", "write 0 4k", "img.qcow2"], d, &["lock"]);
    run("qemu-io", &["-r", "-c", "read 0 4k", "img.qcow2"], d);
    assert!(h.finish().success());

    let h = Holder::ready("qemu-io", &["-r", "img.qcow2"], d);
    refused(
        QCSIM,
        &["io", "-c", "write 0 4k", "img.qcow2"],
        d,
        &["\"write\" lock", "img.qcow2"],
    );
    run(QCSIM, &["io", "-r", "-c", "read 0 4k", "img.qcow2"], d);
    assert!(h.finish().success());

    // A force-share reader blocks nobody.
    let h = Holder::ready(QCSIM, &["io", "-r", "-U", "img.qcow2"], d);
    run("qemu-io", &["-c", "write 0 4k", "img.qcow2"], d);
    assert!(h.finish().success());
}

#[test]
fn backing_files_and_data_files_are_locked_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(d, &["-f", "qcow2", "base.qcow2", "1M"]);
    qemu_create(
        d,
        &[
            "-f",
            "qcow2",
            "-b",
            "base.qcow2",
            "-F",
            "qcow2",
            "top.qcow2",
        ],
    );
    // Two images sharing one data file.
    qemu_create(
        d,
        &["-f", "qcow2", "-o", "data_file=d.raw", "b.qcow2", "1M"],
    );
    qemu_create(
        d,
        &["-f", "qcow2", "-o", "data_file=d.raw", "c.qcow2", "1M"],
    );

    // qcsim holds the top image: its backing file takes read-only locks,
    // which keep writers out and let readers in.
    let h = Holder::ready(QCSIM, &["io", "top.qcow2"], d);
    refused("qemu-io", &["-c", "write 0 4k", "base.qcow2"], d, &["lock"]);
    run("qemu-io", &["-r", "-c", "read 0 4k", "base.qcow2"], d);
    assert!(h.finish().success());

    // And the other way: qemu-io on the top image keeps qcsim from
    // writing its backing file.
    let h = Holder::ready("qemu-io", &["top.qcow2"], d);
    refused(
        QCSIM,
        &["io", "-c", "write 0 4k", "base.qcow2"],
        d,
        &["lock", "base.qcow2"],
    );
    assert!(h.finish().success());

    // Data file: the holder of b.qcow2 keeps its data file from being
    // resized, which a read-write open of c.qcow2 (same data file) needs.
    let h = Holder::ready(QCSIM, &["io", "b.qcow2"], d);
    refused("qemu-io", &["-c", "write 0 4k", "c.qcow2"], d, &["lock"]);
    assert!(h.finish().success());
    let h = Holder::ready("qemu-io", &["b.qcow2"], d);
    refused(
        QCSIM,
        &["io", "-c", "write 0 4k", "c.qcow2"],
        d,
        &["lock", "d.raw"],
    );
    assert!(h.finish().success());
}

/// `qcsim check` takes the locks QEMU's check takes on an external data
/// file (those of an image's data file, read-only without `-r`): a qemu-io
/// holding another image on the same data file for writing keeps every
/// check out, a read-only one keeps repairs out, `-U` checks regardless;
/// a writer of the raw data file itself keeps none out. qemu-img check
/// agrees on every case.
#[test]
fn check_locks_the_data_file_as_qemu_img_check_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(
        d,
        &["-f", "qcow2", "-o", "data_file=d.raw", "img.qcow2", "1M"],
    );
    // A second image on the same data file: only the data file is shared,
    // so only its locks can conflict.
    std::fs::copy(d.join("img.qcow2"), d.join("other.qcow2")).unwrap();
    let before = read(d, "img.qcow2");
    let checks: [&[&str]; 4] = [
        &["check", "img.qcow2"],
        &["check", "-r", "all", "img.qcow2"],
        &["check", "-r", "leaks", "img.qcow2"],
        &["check", "-U", "img.qcow2"],
    ];
    // Per holder: which of `checks` are refused.
    let holders: [(&[&str], [bool; 4]); 4] = [
        (&["other.qcow2"], [true, true, true, false]),
        (&["-r", "other.qcow2"], [false, true, true, false]),
        (&["-f", "raw", "d.raw"], [false, false, false, false]),
        (&["-r", "-f", "raw", "d.raw"], [false, false, false, false]),
    ];
    for (holder, refusals) in holders {
        let h = Holder::ready("qemu-io", holder, d);
        for (args, refuse) in checks.iter().zip(refusals) {
            let case = format!("qemu-io {holder:?} holding; {args:?}");
            let theirs = exec("qemu-img", args, d);
            assert_eq!(
                theirs.status.success(),
                !refuse,
                "{case}: qemu-img: {}",
                text(&theirs)
            );
            if refuse {
                refused(QCSIM, args, d, &["lock", "d.raw", "img.qcow2"]);
            } else {
                let ours = exec(QCSIM, args, d);
                assert_eq!(ours.status.code(), Some(0), "{case}: {}", text(&ours));
            }
        }
        assert!(h.finish().success());
    }
    assert!(
        read(d, "img.qcow2") == before,
        "a refused repair wrote nothing"
    );
}
