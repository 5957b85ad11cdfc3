//! `qcsim serve` and FUA, through a raw client (`nbd::Client`): requests
//! flagged FUA reach the engine as FUA requests (its counts, printed when
//! the server stops), not as a write and a flush; FUA elsewhere is
//! accepted as the protocol says once advertised, while a flag the
//! command does not take gets EINVAL and a write to a read-only export
//! EPERM, nothing written and the connection still usable; a raw file
//! takes FUA too; the simulated disk keeps a FUA write durable without
//! any flush.

use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nbd::wire::{
    CMD_FLAG_FUA, CMD_FLAG_NO_HOLE, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES,
    FLAG_READ_ONLY, FLAG_SEND_FLUSH, FLAG_SEND_FUA,
};
use nbd::{Client, ClientError};

use crate::serve::{qemu_io_ok, Served};
use crate::serve_sim::logged_count as count;
use crate::support::{assert_clean, qcsim};

fn client(served: &Served) -> Client<UnixStream> {
    // The socket's file appears at bind, a moment before the server
    // listens on it: a connection refused then is tried again.
    let start = Instant::now();
    let s = loop {
        match UnixStream::connect(served.socket()) {
            Err(e)
                if e.kind() == ErrorKind::ConnectionRefused
                    && start.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            r => break r.unwrap(),
        }
    };
    // No read in these tests may hang the suite.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    Client::connect(s).unwrap()
}

/// The error value the server refused a request with.
fn refused(r: Result<Vec<u8>, ClientError>) -> u32 {
    match r {
        Err(ClientError::Server { errno, .. }) => errno,
        other => panic!("not refused by the server: {other:?}"),
    }
}

#[test]
fn fua_requests_reach_the_engine_and_bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "8M"], d);
    qemu_io_ok(&["-f", "qcow2", "-c", "write -P 0x11 0 8M", "img.qcow2"], d);
    let served = Served::start(d, "img.qcow2", &[]);
    let mut c = client(&served);
    let flags = c.export();
    assert!(
        flags.has(FLAG_SEND_FUA) && flags.has(FLAG_SEND_FLUSH),
        "{flags:?}"
    );

    c.write(0, &[0x5a; 65536], true).unwrap();
    c.write(1 << 20, &[0x66; 4096], false).unwrap();
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FUA, 2 << 20, 65536, &[])
        .unwrap();
    // NO_HOLE: written as zeroes, each piece with FUA.
    c.request(
        CMD_WRITE_ZEROES,
        CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        3 << 20,
        4096,
        &[],
    )
    .unwrap();
    c.request(CMD_TRIM, CMD_FLAG_FUA, 4 << 20, 65536, &[])
        .unwrap();
    // FUA on a read and on a flush: accepted once advertised, as the
    // protocol says (clients are known to send it there).
    let data = c.request(CMD_READ, CMD_FLAG_FUA, 0, 65536, &[]).unwrap();
    assert!(data.iter().all(|&b| b == 0x5a));
    c.request(CMD_FLUSH, CMD_FLAG_FUA, 0, 0, &[]).unwrap();
    // A flag the command does not take: EINVAL, the connection goes on,
    // and a refused write's data is not written.
    assert_eq!(
        refused(c.request(CMD_READ, CMD_FLAG_NO_HOLE, 0, 512, &[])),
        22
    );
    let mut buf = [0u8; 512];
    c.read(0, &mut buf).unwrap();
    assert_eq!(buf, [0x5a; 512]);
    assert_eq!(
        refused(c.request(CMD_WRITE, CMD_FLAG_NO_HOLE, 5 << 20, 512, &[0xee; 512])),
        22
    );
    c.read(5 << 20, &mut buf).unwrap();
    assert_eq!(buf, [0x11; 512], "a refused write wrote nothing");
    c.disconnect().unwrap();

    let log = served.stop(libc::SIGTERM);
    // Four FUA requests (the write, both zeroings, the trim), each the
    // engine's FUA call: the one guest flush is the client's own.
    let engine = "qcsim serve: engine:";
    assert_eq!(count(&log, engine, "FUA requests"), 4, "{log}");
    assert_eq!(count(&log, engine, "flushes,"), 1, "{log}");
    assert_eq!(count(&log, engine, "writes"), 3, "{log}");
    assert_eq!(count(&log, engine, "write zeroes"), 1, "{log}");
    assert_eq!(count(&log, engine, "discards"), 1, "{log}");
    assert!(count(&log, engine, "device flushes for them") > 0, "{log}");
    assert_clean("img.qcow2", d);
    qemu_io_ok(
        &[
            "-f",
            "qcow2",
            "-c",
            "read -P 0x5a 0 64k",
            "-c",
            "read -P 0x11 64k 960k",
            "-c",
            "read -P 0x66 1M 4k",
            "-c",
            "read -P 0 2M 64k",
            "-c",
            "read -P 0 3M 4k",
            "-c",
            "read -P 0 4M 64k",
            "-c",
            "read -P 0x11 5M 512",
            "img.qcow2",
        ],
        d,
    );
}

#[test]
fn fua_writes_to_a_read_only_export_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "1M"], d);
    qemu_io_ok(
        &["-f", "qcow2", "-c", "write -P 0x42 0 64k", "img.qcow2"],
        d,
    );
    let before = std::fs::read(d.join("img.qcow2")).unwrap();
    let served = Served::start(d, "img.qcow2", &["--read-only"]);
    let mut c = client(&served);
    let flags = c.export();
    assert!(
        flags.has(FLAG_READ_ONLY) && flags.has(FLAG_SEND_FUA),
        "{flags:?}"
    );
    for (kind, data) in [
        (CMD_WRITE, &[0xee; 4096][..]),
        (CMD_WRITE_ZEROES, &[][..]),
        (CMD_TRIM, &[][..]),
    ] {
        let r = c.request(kind, CMD_FLAG_FUA, 0, 4096, data);
        assert_eq!(refused(r), 1, "command {kind}: EPERM");
        // The connection goes on: the data is still there.
        let mut buf = [0u8; 4096];
        c.read(0, &mut buf).unwrap();
        assert_eq!(buf, [0x42; 4096], "after command {kind}");
    }
    // FUA on a read of a read-only export: accepted.
    let data = c.request(CMD_READ, CMD_FLAG_FUA, 4096, 512, &[]).unwrap();
    assert_eq!(data, [0x42; 512]);
    c.disconnect().unwrap();
    let log = served.stop(libc::SIGTERM);
    let engine = "qcsim serve: engine:";
    assert_eq!(count(&log, engine, "writes"), 0, "{log}");
    assert_eq!(count(&log, engine, "FUA requests"), 0, "{log}");
    assert_eq!(
        std::fs::read(d.join("img.qcow2")).unwrap(),
        before,
        "the image file is as it was"
    );
}

#[test]
fn a_raw_file_takes_fua_requests() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("img.raw"), vec![0x11u8; 1 << 20]).unwrap();
    let served = Served::start(d, "img.raw", &["-f", "raw"]);
    let mut c = client(&served);
    assert!(c.export().has(FLAG_SEND_FUA));
    c.write(4096, &[0x5a; 8192], true).unwrap();
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FUA, 65536, 4096, &[])
        .unwrap();
    c.request(
        CMD_WRITE_ZEROES,
        CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
        131072,
        4096,
        &[],
    )
    .unwrap();
    // A trim of a raw file may leave the old bytes: only its success is
    // asked.
    c.request(CMD_TRIM, CMD_FLAG_FUA, 262144, 65536, &[])
        .unwrap();
    let mut buf = [0u8; 8192];
    c.read(4096, &mut buf).unwrap();
    assert_eq!(buf, [0x5a; 8192]);
    c.disconnect().unwrap();
    let log = served.stop(libc::SIGTERM);
    assert!(!log.contains("engine:"), "a raw file has no engine: {log}");
    let bytes = std::fs::read(d.join("img.raw")).unwrap();
    assert_eq!(bytes.len(), 1 << 20);
    assert!(bytes[..4096].iter().all(|&b| b == 0x11));
    assert!(bytes[4096..12288].iter().all(|&b| b == 0x5a));
    assert!(bytes[65536..69632].iter().all(|&b| b == 0));
    assert!(bytes[131072..135168].iter().all(|&b| b == 0));
}

/// On the simulated disk a FUA write and a FUA zeroing are durable when
/// answered, with no flush; a plain write beside them is not.
#[test]
fn the_simulated_disk_keeps_fua_writes_durable_without_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut content = vec![0u8; 1 << 20];
    content[262144..266240].fill(0x77);
    std::fs::write(d.join("disk.raw"), &content).unwrap();
    let served = Served::start(d, "disk.raw", &["--sim", "--record", "req.log"]);
    let mut c = client(&served);
    assert!(c.export().has(FLAG_SEND_FUA));
    c.write(0, &[0x11; 4096], false).unwrap();
    c.write(131072, &[0x33; 4096], true).unwrap();
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FUA, 262144, 4096, &[])
        .unwrap();
    c.disconnect().unwrap();
    let log = served.stop(libc::SIGTERM);
    assert_eq!(count(&log, "simulated disk:", "flushes"), 0, "{log}");
    assert_eq!(count(&log, "simulated disk:", "FUA"), 2, "{log}");
    qcsim(&["disk-replay", "req.log", "--durable", "durable.raw"], d);
    let durable = std::fs::read(d.join("durable.raw")).unwrap();
    assert!(durable[..4096].iter().all(|&b| b == 0), "the plain write");
    assert!(durable[131072..135168].iter().all(|&b| b == 0x33));
    assert!(durable[262144..266240].iter().all(|&b| b == 0));
}
