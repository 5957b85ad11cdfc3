//! A reader that goes away (`qcsim ... | head -1`): every command stops
//! printing quietly and exits 141, the status of a program killed by
//! SIGPIPE, with nothing on standard error (no panic); another write error
//! on standard output is reported and exits 1.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::support::{assert_clean, exec, run, text, QCSIM};

/// `qcsim args` in `dir` with its standard output a pipe that has no read
/// end at all when the command starts. The read end is closed the instant
/// the pipe is made, before the spawn: had it stayed open during the spawn
/// (as with `Stdio::piped()`), a child forked meanwhile by another test
/// would share it until that child's exec, and a write landing in that
/// window would succeed instead of failing with `EPIPE`.
fn with_closed_stdout(args: &[&str], dir: &Path) -> Output {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", std::io::Error::last_os_error());
    // SAFETY: pipe2 succeeded, so both are open descriptors that nothing
    // else owns; each is owned once, by one OwnedFd.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read_end);
    Command::new(QCSIM)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap()
}

#[test]
fn every_command_ends_quietly_when_its_reader_has_gone() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "i.qcow2", "4M"],
        d,
    );
    let commands: &[&[&str]] = &[
        &["campaign", "--seeds", "0..2", "--jobs", "1"],
        &["run", "--seed", "3"],
        &["dump", "i.qcow2"],
        &["io", "-c", "read -v 0 1M", "i.qcow2"],
        &["info", "i.qcow2"],
        &["info", "--output", "json", "i.qcow2"],
        &["check", "i.qcow2"],
        &["check", "--output", "json", "i.qcow2"],
    ];
    for args in commands {
        let out = with_closed_stdout(args, d);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", text(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out));
    }
    // The campaign still wrote its report.
    let reports = std::fs::read_dir(d.join("reports")).unwrap().count();
    assert_eq!(reports, 1);
}

/// `qcsim io` stops at the command whose output cannot be written, and
/// still closes the image: what the commands before wrote is in it, the
/// commands after did not run, and it is clean.
#[test]
fn io_stops_at_the_unwritable_output_and_closes_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "i.qcow2", "4M"],
        d,
    );
    let out = with_closed_stdout(
        &[
            "io",
            "-c",
            "write -P 5 0 64k",
            "-c",
            "write -P 6 1M 64k",
            "i.qcow2",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(141), "{}", text(&out));
    assert!(out.stderr.is_empty(), "{}", text(&out));
    assert_clean("i.qcow2", d);
    let read = |cmd: &str| {
        let out = exec("qemu-io", &["-r", "-c", cmd, "i.qcow2"], d);
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(
        !read("read -P 5 0 64k").contains("Pattern verification failed"),
        "the first write, whose line could not be printed, is in the image"
    );
    assert!(
        read("read -P 6 1M 64k").contains("Pattern verification failed"),
        "the second write did not run"
    );
}

#[test]
fn a_full_standard_output_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "i.qcow2", "4M"],
        d,
    );
    let out = Command::new(QCSIM)
        .args(["info", "i.qcow2"])
        .current_dir(d)
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "qcsim: writing standard output: No space left on device (os error 28)\n"
    );
}
