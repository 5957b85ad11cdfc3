//! `qcsim serve --sim`: QEMU's own qcow2 driver on the simulated disk over
//! NBD (`qemu-img create` and `qemu-io` through `file.driver=nbd`), the
//! export's FLUSH and FUA as QEMU's client reads them, the file written at
//! a clean shutdown, the request log replayed without QEMU to the same
//! bytes, and a write QEMU never flushed left out of the durable state.

use std::io::Write;
use std::path::Path;

use crate::serve::{peer, qemu_io_ok, Served};
use crate::support::{assert_clean, number_before, qcsim, run, text};

/// The `json:` file name of a qcow2 image whose storage is the export.
fn qcow2_over(served: &Served) -> String {
    format!(
        r#"json:{{"driver":"qcow2","file":{{"driver":"nbd","server":{{"type":"unix","path":"{}"}}}}}}"#,
        served.socket().display()
    )
}

/// The counts the server prints at its end, by name.
fn count(log: &str, name: &str) -> u64 {
    logged_count(log, "simulated disk:", name)
}

/// The count before `name` on the first line of `log` that has `prefix`
/// (where `qcsim serve` prints its counts when it stops).
pub(crate) fn logged_count(log: &str, prefix: &str, name: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains(prefix) && l.contains(name))
        .unwrap_or_else(|| panic!("no {prefix:?} counts in the log: {log}"));
    number_before(line, name)
}

#[test]
fn qemu_qcow2_driver_runs_on_the_simulated_disk() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = Served::start(
        d,
        "disk.raw",
        &["--sim", "--sim-size", "128M", "--record", "req.log"],
    );
    // The handshake as QEMU's client reads it: flush and FUA advertised.
    let list = text(&run(
        "qemu-nbd",
        &["--list", "-k", served.socket().to_str().unwrap()],
        d,
    ));
    let flags = list.lines().find(|l| l.contains("flags:")).unwrap();
    for f in ["flush", "fua", "trim", "zeroes"] {
        assert!(flags.contains(f), "no {f} in {flags:?}: {list}");
    }
    assert!(list.contains("size:  134217728"), "{list}");

    run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", &served.uri(), "64M"],
        d,
    );
    let image = qcow2_over(&served);
    qemu_io_ok(
        &[
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "write -P 0xcd 10M 64k",
            "-c",
            "write -z 20M 128k",
            "-c",
            "flush",
            "-c",
            "write -P 0xef 30M 4k",
            &image,
        ],
        d,
    );
    qemu_io_ok(
        &[
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "read -P 0xcd 10M 64k",
            "-c",
            "read -P 0 20M 128k",
            "-c",
            "read -P 0xef 30M 4k",
            &image,
        ],
        d,
    );
    let check = run("qemu-img", &["check", &image], d);
    assert!(
        String::from_utf8_lossy(&check.stdout).contains("No errors were found"),
        "{}",
        text(&check)
    );
    let log = served.stop(libc::SIGTERM);
    assert!(count(&log, "flushes") > 0, "QEMU sent no flush: {log}");
    assert!(count(&log, "writes") > 0, "{log}");

    // The file holds the image now: QEMU and qcsim find it clean and read
    // back what was written, straight from the file.
    assert_clean("disk.raw", d);
    qemu_io_ok(
        &[
            "-r",
            "-f",
            "qcow2",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "read -P 0xef 30M 4k",
            "disk.raw",
        ],
        d,
    );
    // The session replayed from its log, without QEMU: the same bytes.
    let out = qcsim(&["disk-replay", "req.log", "--out", "replayed.raw"], d);
    assert!(out.contains("the log was closed"), "{out}");
    assert_same(d, "replayed.raw", "disk.raw");
}

fn assert_same(d: &Path, a: &str, b: &str) {
    let (x, y) = (
        std::fs::read(d.join(a)).unwrap(),
        std::fs::read(d.join(b)).unwrap(),
    );
    assert_eq!(x.len(), y.len(), "{a} and {b} differ in length");
    let first = x.iter().zip(&y).position(|(p, q)| p != q);
    assert_eq!(first, None, "{a} and {b} differ from byte {first:?}");
}

/// A write no flush followed is in the disk's content but not in its
/// durable state; one QEMU flushed is in both.
#[test]
fn only_flushed_writes_are_durable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = Served::start(
        d,
        "disk.raw",
        &["--sim", "--sim-size", "1M", "--record", "req.log"],
    );
    qemu_io_ok(
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x22 64k 4k",
            "-c",
            "flush",
            &served.uri(),
        ],
        d,
    );
    // QEMU flushes on closing even with cache=unsafe: a peer of our own
    // writes and hangs up without one.
    let (mut s, _) = peer::open(served.socket());
    peer::request(&mut s, 1, 7, 0, 4096);
    s.write_all(&[0x11; 4096]).unwrap();
    let (cookie, _, error, _) = peer::reply(&mut s);
    assert_eq!((cookie, error), (7, 0));
    peer::request(&mut s, 2, 8, 0, 0); // NBD_CMD_DISC
    assert!(peer::closed(&mut s));
    let log = served.stop(libc::SIGTERM);
    assert!(count(&log, "flushes") >= 1, "QEMU sent no flush: {log}");
    let out = qcsim(
        &[
            "disk-replay",
            "req.log",
            "--out",
            "content.raw",
            "--durable",
            "durable.raw",
        ],
        d,
    );
    assert!(out.contains("the log was closed"), "{out}");
    assert!(out.contains("1 writes not durable"), "{out}");
    let content = std::fs::read(d.join("content.raw")).unwrap();
    let durable = std::fs::read(d.join("durable.raw")).unwrap();
    assert!(content[..4096].iter().all(|&b| b == 0x11));
    assert!(durable[..4096].iter().all(|&b| b == 0));
    assert!(content[65536..69632].iter().all(|&b| b == 0x22));
    assert!(durable[65536..69632].iter().all(|&b| b == 0x22));
    // A clean shutdown writes the content, unflushed writes included.
    assert_same(d, "content.raw", "disk.raw");
}

/// `--disk-ignores-flush`: QEMU's write and flush succeed, and nothing
/// is durable.
#[test]
fn a_disk_that_ignores_flush_keeps_nothing_durable() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let served = Served::start(
        d,
        "disk.raw",
        &[
            "--sim",
            "--sim-size",
            "1M",
            "--record",
            "req.log",
            "--disk-ignores-flush",
        ],
    );
    qemu_io_ok(
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0x22 64k 4k",
            "-c",
            "flush",
            &served.uri(),
        ],
        d,
    );
    let log = served.stop(libc::SIGTERM);
    assert!(count(&log, "flushes") >= 1, "QEMU sent no flush: {log}");
    qcsim(&["disk-replay", "req.log", "--durable", "durable.raw"], d);
    let durable = std::fs::read(d.join("durable.raw")).unwrap();
    assert!(durable.iter().all(|&b| b == 0), "something became durable");
    let content = std::fs::read(d.join("disk.raw")).unwrap();
    assert!(content[65536..69632].iter().all(|&b| b == 0x22));
}

/// Bad arguments are refused with a message naming the problem.
#[test]
fn bad_sim_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sock = d.join("s.sock");
    let sock = sock.to_str().unwrap();
    for (args, want) in [
        (vec!["--sim", "missing.raw"], "give --sim-size to create it"),
        (
            vec!["--sim", "--sim-size", "0", "x.raw"],
            "must be more than 0",
        ),
        (vec!["--sim", "--sim-size", "12Q", "x.raw"], "unknown unit"),
    ] {
        let mut all = vec!["serve", "--socket", sock];
        all.extend(args);
        let out = crate::support::exec(crate::support::QCSIM, &all, d);
        assert_ne!(out.status.code(), Some(0), "{all:?}");
        assert!(text(&out).contains(want), "{all:?}: {}", text(&out));
    }
    std::fs::write(d.join("small.raw"), [0u8; 4096]).unwrap();
    let out = crate::support::exec(
        crate::support::QCSIM,
        &[
            "serve",
            "--socket",
            sock,
            "--sim",
            "--sim-size",
            "1M",
            "small.raw",
        ],
        d,
    );
    assert!(
        text(&out).contains("exists with 4096 bytes"),
        "{}",
        text(&out)
    );
    // A request log that is not one is refused, not replayed.
    std::fs::write(d.join("bad.log"), b"not a log at all").unwrap();
    let out = crate::support::exec(crate::support::QCSIM, &["disk-replay", "bad.log"], d);
    assert!(
        text(&out).contains("not a qcsim request log"),
        "{}",
        text(&out)
    );
}
