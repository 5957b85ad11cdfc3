//! `tools::bench`: the flags parse as qemu-img bench's (a bad one is the
//! typed error naming it), and a run does its job's requests, no more, on
//! a qcow2 or raw file, leaving a qcow2 image clean.

use testkit::assert_clean;
use tools::bench::{Aio, FileBench, FileBenchError, FileBenchFlags, FileBenchOptions};
use tools::files::Format;
use tools::qemu_args::ArgError;

use crate::support::{qcow2, SIZE};

fn flags(f: impl FnOnce(&mut FileBenchFlags)) -> FileBenchFlags {
    let mut flags = FileBenchFlags::default();
    f(&mut flags);
    flags
}

#[test]
fn flags_parse_and_a_bad_one_is_named() {
    let _serial = crate::support::serial();
    let opts = flags(|f| {
        f.count = Some("1k".into());
        f.depth = Some("4".into());
        f.buffer_size = Some("64k".into());
        f.format = Some("qcow2".into());
        f.cache = Some("none".into());
        f.aio = Some("io_uring".into());
        f.write = true;
        f.pattern = Some("0x5a".into());
        f.flush_interval = Some("100".into());
        f.off = vec!["zero_cow".into()];
    })
    .parse()
    .unwrap();
    assert_eq!(opts.count, 1024);
    assert_eq!(opts.depth, 4);
    assert_eq!(opts.buffer_size, 65536);
    assert_eq!(opts.format, Some(Format::Qcow2));
    assert_eq!(opts.aio, Some(Aio::IoUring));
    assert_eq!(opts.pattern, Some(0x5a));
    assert_eq!(opts.flush_interval, 100);
    assert!(!opts.switches.zero_cow);
    assert_eq!(flags(|_| ()).parse().unwrap(), FileBenchOptions::default());

    let err = flags(|f| f.count = Some("lots".into()))
        .parse()
        .unwrap_err();
    assert!(
        matches!(&err, FileBenchError::Number { flag: "-c", value, error: ArgError::Size(_) } if value == "lots"),
        "{err:?}"
    );
    let err = flags(|f| f.off = vec!["turbo".into()]).parse().unwrap_err();
    assert!(
        matches!(&err, FileBenchError::UnknownSwitch { name } if name == "turbo"),
        "{err:?}"
    );
    let err = flags(|f| f.aio = Some("posix".into())).parse().unwrap_err();
    assert!(
        matches!(&err, FileBenchError::Aio(a) if a == "posix"),
        "{err:?}"
    );
    let err = flags(|f| f.pattern = Some("256".into()))
        .parse()
        .unwrap_err();
    assert!(
        matches!(&err, FileBenchError::Pattern(p) if p == "256"),
        "{err:?}"
    );
    let err = flags(|f| f.format = Some("vmdk".into()))
        .parse()
        .unwrap_err();
    assert!(matches!(err, FileBenchError::Format(_)), "{err:?}");
    let err = flags(|f| f.flush_interval = Some("4".into()))
        .parse()
        .unwrap_err();
    assert!(err.to_string().contains("only available in write"), "{err}");
}

#[test]
fn a_write_then_a_read_run_do_their_jobs_requests() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "b.qcow2", &[]);
    let write = FileBenchOptions {
        count: 100,
        depth: 8,
        write: true,
        pattern: Some(0x5a),
        flush_interval: 25,
        ..FileBenchOptions::default()
    };
    let report = FileBench::new(&path, &write, false).unwrap().run().unwrap();
    assert_eq!(report.format, Format::Qcow2);
    assert_eq!(report.requests, 100);
    assert_eq!(report.guest_flushes, 4, "one every 25 requests");
    let engine = report.engine.expect("a qcow2 image");
    assert_eq!(engine.guest_writes, 100);
    assert_eq!(engine.guest_bytes_written, 100 * 4096);
    assert_eq!(engine.guest_reads, 0);
    assert_eq!(engine.guest_flushes, 4);
    assert_clean(&path, "the image after a write run");

    // The same range read back: every read checked against the pattern.
    let read = FileBenchOptions {
        write: false,
        flush_interval: 0,
        ..write.clone()
    };
    let report = FileBench::new(&path, &read, false).unwrap().run().unwrap();
    let engine = report.engine.expect("a qcow2 image");
    assert_eq!(engine.guest_reads, 100);
    assert_eq!(engine.guest_writes, 0);
    assert_eq!(report.device.writes, 0, "a read run writes nothing");
    // Past the written range the disk reads zeroes, not the pattern.
    let beyond = FileBenchOptions {
        offset: 100 * 4096,
        ..read
    };
    let err = FileBench::new(&path, &beyond, false)
        .unwrap()
        .run()
        .unwrap_err();
    assert!(
        matches!(
            err,
            FileBenchError::Mismatch {
                found: 0,
                pattern: 0x5a,
                ..
            }
        ),
        "{err:?}"
    );
}

/// At queue depth 1 every request is the pool's only one and runs on the
/// bench's thread; at depth 16 the first sixteen, issued together, go to
/// the workers, and so does every request issued while others are in
/// flight.
#[test]
fn requests_run_alone_at_depth_1_and_on_workers_at_depth_16() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.raw");
    std::fs::File::create(&path).unwrap().set_len(SIZE).unwrap();
    let depth1 = FileBenchOptions {
        count: 40,
        depth: 1,
        write: true,
        pattern: Some(0x33),
        format: Some(Format::Raw),
        ..FileBenchOptions::default()
    };
    let report = FileBench::new(&path, &depth1, false)
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(report.device.writes, 40);
    assert_eq!(report.alone_runs, 40, "depth 1: every request alone");
    let depth16 = FileBenchOptions {
        depth: 16,
        ..depth1
    };
    let report = FileBench::new(&path, &depth16, false)
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(report.device.writes, 40);
    assert!(
        report.alone_runs <= 40 - 16,
        "depth 16: {} of 40 ran alone",
        report.alone_runs
    );
}

#[test]
fn a_raw_file_is_read_directly() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.raw");
    std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
    let opts = FileBenchOptions {
        count: 300,
        depth: 4,
        pattern: Some(7),
        ..FileBenchOptions::default()
    };
    let report = FileBench::new(&path, &opts, false).unwrap().run().unwrap();
    assert_eq!(report.format, Format::Raw);
    assert!(report.engine.is_none());
    assert_eq!(report.device.reads, 300);
    assert_eq!(report.device.bytes_read, 300 * 4096);
}

#[test]
fn a_missing_file_or_a_request_past_the_end_is_refused() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.qcow2");
    let err = FileBench::new(&missing, &FileBenchOptions::default(), true)
        .err()
        .expect("refused");
    assert!(
        matches!(&err, FileBenchError::NoSuchFile { path } if *path == missing),
        "{err:?}"
    );
    let path = qcow2(dir.path(), "b.qcow2", &[]);
    let past = FileBenchOptions {
        offset: SIZE,
        ..FileBenchOptions::default()
    };
    let bench = FileBench::new(&path, &past, false).unwrap();
    assert!(bench.run_qemu().is_none(), "no copy was asked for");
    let err = bench.run().unwrap_err();
    assert!(
        matches!(err, FileBenchError::OutOfRange { size: SIZE, .. }),
        "{err:?}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no copy left"
    );
}
