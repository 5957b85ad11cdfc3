//! `tools::io`: a session runs qemu-io commands on an image and returns
//! each command's output and typed failure.

use futures::executor::block_on;
use tools::files::{OpenError, OpenOptions};
use tools::io::{parse_command, CmdFailure, Executed, Session};

use crate::support::{qcow2, truncate, SIZE};

fn run(session: &Session, line: &str) -> Executed {
    let cmd = parse_command(line).unwrap().expect("a command");
    block_on(session.execute(&cmd))
}

fn open(path: &std::path::Path, read_only: bool) -> Session {
    let opts = OpenOptions {
        read_only,
        ..OpenOptions::default()
    };
    block_on(Session::open(path, &opts)).unwrap()
}

#[test]
fn writes_persist_and_reads_verify_them() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[]);
    let session = open(&path, false);
    let done = run(&session, "write -P 0xab 0 64k");
    assert_eq!(done.lines, ["wrote 65536/65536 bytes at offset 0"]);
    assert!(done.failure.is_none());
    let done = run(&session, "write -z 64k 4k");
    assert_eq!(done.lines, ["wrote 4096/4096 bytes at offset 65536"]);
    let done = run(&session, "discard -q 128k 64k");
    assert!(done.lines.is_empty() && done.failure.is_none());
    assert!(run(&session, "flush").lines.is_empty());
    block_on(session.close()).unwrap();

    let session = open(&path, true);
    let done = run(&session, "read -P 0xab 0 64k");
    assert_eq!(done.lines, ["read 65536/65536 bytes at offset 0"]);
    assert!(done.failure.is_none());
    let done = run(&session, "read -v 65532 8");
    assert_eq!(
        done.lines,
        [
            "0000fffc:  ab ab ab ab 00 00 00 00  ........",
            "read 8/8 bytes at offset 65532",
        ]
    );
    block_on(session.close()).unwrap();
}

#[test]
fn a_pattern_mismatch_is_the_typed_failure() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[(4096, 0xab, 4096)]);
    let session = open(&path, true);
    let done = run(&session, "read -P 0xab 0 8k");
    assert_eq!(
        done.lines,
        [
            "Pattern verification failed at offset 0, 8192 bytes",
            "read 8192/8192 bytes at offset 0",
        ]
    );
    match done.failure {
        Some(CmdFailure::PatternMismatch {
            path: p,
            offset: 0,
            len: 8192,
        }) => assert_eq!(p, path),
        other => panic!("not a pattern mismatch: {other:?}"),
    }
    // Quiet: only the mismatch is said.
    let done = run(&session, "read -q -P 0 4k 4k");
    assert_eq!(
        done.lines,
        ["Pattern verification failed at offset 4096, 4096 bytes"]
    );
    assert!(run(&session, "read -P 0xab 4k 4k").failure.is_none());
}

#[test]
fn refused_requests_are_failures_naming_the_command() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[]);
    let before = std::fs::read(&path).unwrap();
    let session = open(&path, true);
    // qemu-io says this on standard error, with its prefix: the line is
    // the caller's, the failure typed.
    let done = run(&session, "write 0 512");
    assert!(done.lines.is_empty(), "{:?}", done.lines);
    assert!(
        matches!(&done.failure, Some(CmdFailure::ReadOnly { path: p }) if *p == path),
        "{:?}",
        done.failure
    );
    // A request past the end is qemu-io's EIO; the typed failure names
    // the whole request, and nothing is done.
    let done = run(&session, "read 4M 512");
    assert_eq!(done.lines, ["read failed: Input/output error"]);
    assert!(matches!(
        done.failure,
        Some(CmdFailure::Request {
            op: "read",
            error: engine::Error::OutOfRange {
                offset: SIZE,
                len: 512,
                size: SIZE
            },
            ..
        })
    ));
    block_on(session.close()).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing written");
}

#[test]
fn a_malformed_image_is_a_typed_error_naming_the_file() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "cut.qcow2", &[]);
    truncate(&path, 100);
    let err = block_on(Session::open(&path, &OpenOptions::default()))
        .err()
        .expect("refused");
    assert!(
        matches!(&err, OpenError::Engine { path: p, .. } if *p == path),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&path.display().to_string()),
        "{err}"
    );
}

#[test]
fn vectored_requests_allocation_and_info_print_as_qemu_io_prints_them() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[(65536, 0x5a, 65536)]);
    let session = open(&path, false);
    let done = run(&session, "writev -P 3 0 512 1k");
    assert_eq!(done.lines, ["wrote 1536/1536 bytes at offset 0"]);
    let done = run(&session, "readv -P 3 0 1k 512");
    assert_eq!(done.lines, ["read 1536/1536 bytes at offset 0"]);
    assert!(done.failure.is_none());
    // -s and -l check part of what is read.
    let done = run(&session, "read -P 3 -s 512 -l 1024 0 4k");
    assert!(done.failure.is_none(), "{:?}", done.lines);
    let done = run(&session, "read -P 3 -s 1024 -l 1024 0 4k");
    assert_eq!(
        done.lines,
        [
            "Pattern verification failed at offset 1024, 1024 bytes",
            "read 4096/4096 bytes at offset 0",
        ]
    );
    let done = run(&session, "write -z 128k 64k");
    assert!(done.failure.is_none());
    assert_eq!(
        run(&session, "alloc 0 256k").lines,
        ["196608/262144 bytes allocated at offset 0 bytes"]
    );
    assert_eq!(
        run(&session, "alloc 1M").lines,
        ["0/512 bytes allocated at offset 1 MiB"]
    );
    assert_eq!(
        run(&session, "map").lines,
        [
            "192 KiB (0x30000) bytes     allocated at offset 0 bytes (0x0)",
            "3.812 MiB (0x3d0000) bytes not allocated at offset 192 KiB (0x30000)",
        ]
    );
    assert_eq!(run(&session, "length").lines, ["4 MiB"]);
    let info = run(&session, "info").lines;
    assert_eq!(
        info[..3],
        [
            "format name: qcow2",
            "cluster size: 64 KiB",
            "vm state offset: 512 MiB"
        ]
    );
    // With timing, each request's second line follows qemu-io's form.
    let session = session.with_timing(true);
    let done = run(&session, "read 0 4k");
    assert_eq!(done.lines[0], "read 4096/4096 bytes at offset 0");
    let second = &done.lines[1];
    assert!(
        second.starts_with("4 KiB, 1 ops; ") && second.ends_with(" ops/sec)"),
        "{second}"
    );
    block_on(session.close()).unwrap();
}

/// `info`'s VM state offset is where `write -b` puts VM state: past the
/// last L1 entry the disk uses, an L1 entry spanning half as much with
/// extended L2 entries. QEMU's qemu-io prints 1.250 GiB for this image
/// (1280 MiB, 64 KiB clusters, extended L2); it printed 1.500 GiB here
/// while `info` counted 8-byte L2 entries.
#[test]
fn info_puts_vm_state_where_the_engine_does_with_extended_l2() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = engine::CreateOptions {
        size: 1280 << 20,
        cluster_size: 64 << 10,
        extended_l2: true,
        ..engine::CreateOptions::default()
    };
    let path = crate::support::qcow2_with(dir.path(), "ext.qcow2", &o, &[]);
    let session = open(&path, false);
    let info = run(&session, "info").lines;
    assert_eq!(info[2], "vm state offset: 1.250 GiB");
    block_on(session.close()).unwrap();
}

/// `-f` (force unit access) on `write`, `writev`, `aio_write` and
/// zeroing sends each request to the engine's FUA call, not a write
/// followed by a flush of everything: the engine counts FUA requests and
/// no guest flush. The report lines are those without `-f`, as in
/// qemu-io; `-f` with `-c` or `-b` is refused as qemu-io refuses it.
#[test]
fn write_f_is_a_fua_request_to_the_engine() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[]);
    let session = open(&path, false);
    let counts = |s: &Session| s.disk().qcow2().expect("a qcow2 image").counters();
    let before = counts(&session);
    let lines = [
        (
            "write -f -P 0x11 0 64k",
            "wrote 65536/65536 bytes at offset 0",
        ),
        (
            "writev -f -P 0x22 64k 4k 4k",
            "wrote 8192/8192 bytes at offset 65536",
        ),
        (
            "aio_write -f -P 0x33 128k 4k",
            "wrote 4096/4096 bytes at offset 131072",
        ),
        (
            "write -f -z 192k 64k",
            "wrote 65536/65536 bytes at offset 196608",
        ),
        (
            "aio_write -f -z -u 256k 64k",
            "wrote 65536/65536 bytes at offset 262144",
        ),
    ];
    for (line, want) in lines {
        let done = run(&session, line);
        assert_eq!(done.lines, [want], "{line}");
        assert!(done.failure.is_none(), "{line}");
    }
    let fua = counts(&session).since(&before);
    assert_eq!(fua.guest_fua_requests, 5, "{fua:?}");
    assert_eq!((fua.guest_writes, fua.guest_zero_writes), (3, 2));
    assert_eq!(fua.guest_flushes, 0, "FUA is not a guest flush: {fua:?}");
    // Without -f: no FUA request.
    let before = counts(&session);
    assert!(run(&session, "write -P 0x44 1M 4k").failure.is_none());
    assert_eq!(counts(&session).since(&before).guest_fua_requests, 0);
    for line in ["write -f -c 0 64k", "write -b -f 0 4k"] {
        let e = parse_command(line).unwrap_err();
        assert_eq!(
            e.message, "-f and -b or -c cannot be specified at the same time",
            "{line}"
        );
    }
    block_on(session.close()).unwrap();

    let session = open(&path, true);
    for line in [
        "read -P 0x11 0 64k",
        "read -P 0x22 64k 8k",
        "read -P 0x33 128k 4k",
        "read -P 0 192k 128k",
        "read -P 0x44 1M 4k",
    ] {
        assert!(run(&session, line).failure.is_none(), "{line}");
    }
    block_on(session.close()).unwrap();
}

/// `write -f` on a raw image: the file's own FUA write, the data there.
#[test]
fn write_f_on_a_raw_image_writes_through() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img.raw");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let session = open(&path, false);
    for line in ["write -f -P 0x5a 4k 8k", "write -f -z 0 4k"] {
        assert!(run(&session, line).failure.is_none(), "{line}");
    }
    block_on(session.close()).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes[4096..12288].iter().all(|&b| b == 0x5a));
    assert!(bytes[..4096].iter().all(|&b| b == 0));
}
