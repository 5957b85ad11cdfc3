//! `tools::convert`: data round-trips through raw and qcow2, holes stay
//! holes, and refusals leave every file as it was.

use futures::executor::block_on;
use testkit::assert_clean;
use tools::convert::{convert, ConvertError, ConvertOptions, ConvertStats};
use tools::files::{Format, Role};
use tools::qemu_args::ArgError;

use crate::support::{qcow2, SIZE};

/// The guest disk of `writes` on a zeroed [`SIZE`]-byte disk.
fn expected(writes: &[(u64, u8, usize)]) -> Vec<u8> {
    let mut disk = vec![0u8; SIZE as usize];
    for &(offset, byte, len) in writes {
        disk[offset as usize..offset as usize + len].fill(byte);
    }
    disk
}

const WRITES: [(u64, u8, usize); 2] = [(0, 0xab, 65536), (2 << 20, 0x5a, 4096)];

#[test]
fn qcow2_to_raw_round_trips_and_writes_only_data() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let src = qcow2(dir.path(), "src.qcow2", &WRITES);
    let dst = dir.path().join("out.raw");
    let stats = block_on(convert(&src, &dst, &ConvertOptions::default())).unwrap();
    assert_eq!(std::fs::read(&dst).unwrap(), expected(&WRITES));
    // Only the two allocated clusters are read, only their non-zero 4 KiB
    // blocks written.
    assert_eq!(stats.source_size, SIZE);
    assert_eq!(stats.reads, 2);
    assert_eq!(stats.bytes_read, 2 * 65536);
    assert_eq!(stats.writes, 2);
    assert_eq!(stats.bytes_written, 65536 + 4096);
    let engine = stats.source_engine.expect("a qcow2 source");
    assert_eq!(engine.guest_reads, 2);
    assert_eq!(engine.backing_bytes_read, 0);
}

#[test]
fn raw_to_qcow2_and_back_round_trips() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("src.raw");
    std::fs::write(&raw, expected(&WRITES)).unwrap();
    let q = dir.path().join("out.qcow2");
    let opts = ConvertOptions {
        output_format: Format::Qcow2,
        options: vec!["cluster_size=4k".into()],
        parallel: 3,
        ..ConvertOptions::default()
    };
    let stats = block_on(convert(&raw, &q, &opts)).unwrap();
    assert_eq!(stats.source_engine, None, "a raw source has no engine");
    assert_eq!(stats.reads, 4, "a raw source is data throughout");
    assert_eq!(stats.bytes_written, 65536 + 4096);
    assert_clean(&q, "the converted image");
    let info = tools::info::info(&q, &Default::default()).unwrap();
    assert_eq!(info.cluster_size, Some(4096));

    let back = dir.path().join("back.raw");
    block_on(convert(&q, &back, &ConvertOptions::default())).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), expected(&WRITES));
}

#[test]
fn the_source_is_never_overwritten_by_any_name() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let src = qcow2(dir.path(), "src.qcow2", &WRITES);
    let link = dir.path().join("link.qcow2");
    std::fs::hard_link(&src, &link).unwrap();
    let before = std::fs::read(&src).unwrap();
    for dst in [&src, &link] {
        let err = block_on(convert(&src, dst, &ConvertOptions::default())).unwrap_err();
        match &err {
            ConvertError::SameAsSource { path, first } => {
                assert_eq!(path, dst);
                assert_eq!(first.path, src);
                assert!(matches!(first.role, Role::Image), "{first:?}");
            }
            other => panic!("not refused as the source: {other:?}"),
        }
        assert!(err
            .to_string()
            .contains("writing it would destroy the source"));
    }
    assert_eq!(std::fs::read(&src).unwrap(), before);
}

#[test]
fn bad_options_are_refused_before_any_file_is_touched() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let src = qcow2(dir.path(), "src.qcow2", &WRITES);
    let dst = dir.path().join("never");
    let run = |opts: ConvertOptions| block_on(convert(&src, &dst, &opts)).unwrap_err();
    let err = run(ConvertOptions {
        parallel: 0,
        ..ConvertOptions::default()
    });
    assert!(
        matches!(err, ConvertError::Parallel { given: 0 }),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "-m must be between 1 and 16");
    let err = run(ConvertOptions {
        options: vec!["cluster_size=4k".into()],
        ..ConvertOptions::default()
    });
    assert!(matches!(err, ConvertError::RawOptions), "{err:?}");
    let err = run(ConvertOptions {
        output_format: Format::Qcow2,
        options: vec!["size=1M".into()],
        ..ConvertOptions::default()
    });
    assert!(matches!(err, ConvertError::ChainOptions), "{err:?}");
    let err = run(ConvertOptions {
        output_format: Format::Qcow2,
        options: vec!["cluster_size=3000".into()],
        ..ConvertOptions::default()
    });
    // The range is the qcow2 driver's check, made on the options once
    // the source's size is known (still before any file is touched).
    assert!(
        matches!(&err, ConvertError::DestinationOptions { error: ArgError::BadValue { key, .. }, .. } if key == "cluster_size"),
        "{err:?}"
    );
    let err = run(ConvertOptions {
        output_format: Format::Qcow2,
        options: vec!["compat=0.10,extended_l2=on".into()],
        ..ConvertOptions::default()
    });
    match &err {
        ConvertError::DestinationOptions { path, .. }
        | ConvertError::DestinationRefused { path, .. } => {
            assert_eq!(path, &dst)
        }
        other => panic!("not refused for the destination: {other:?}"),
    }
    assert!(!dst.exists(), "no refusal creates the destination");
}

#[test]
fn stats_print_as_the_command_line_shows_them() {
    let _serial = crate::support::serial();
    let stats = ConvertStats {
        source_size: 4096,
        reads: 1,
        bytes_read: 4096,
        writes: 2,
        bytes_written: 1024,
        source_engine: None,
    };
    assert_eq!(
        stats.lines(),
        ["convert: read 4096 bytes of the 4096-byte source in 1 reads; wrote 1024 bytes in 2 writes"]
    );
}

/// `compress` (`-c`): every data cluster compressed but the one that does
/// not shrink, all-zero clusters left unallocated, the guest data the
/// source's, the map's compressed flag set where it should be; refused for
/// raw output before any file is touched.
#[test]
fn compress_writes_compressed_clusters() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let cs = 4096usize;
    let mut disk = expected(&WRITES);
    // One cluster of noise: it stays uncompressed.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in &mut disk[8 * cs..9 * cs] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let raw = dir.path().join("src.raw");
    std::fs::write(&raw, &disk).unwrap();
    let q = dir.path().join("c.qcow2");
    let opts = ConvertOptions {
        output_format: Format::Qcow2,
        options: vec!["cluster_size=4k".into()],
        compress: true,
        ..ConvertOptions::default()
    };
    block_on(convert(&raw, &q, &opts)).unwrap();
    assert_clean(&q, "the compressed image");
    let back = dir.path().join("back.raw");
    block_on(convert(&q, &back, &ConvertOptions::default())).unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), disk);
    let map = block_on(tools::map::map_image(&q, &Default::default())).unwrap();
    let at = |off: u64| {
        map.iter()
            .find(|e| e.start <= off && off < e.start + e.length)
    };
    for off in [0, 65536 - 4096, 2 << 20] {
        let e = at(off).unwrap();
        assert!(e.data && e.compressed && e.offset.is_none(), "{off}: {e:?}");
    }
    let noise = at(8 * cs as u64).unwrap();
    assert!(
        noise.data && !noise.compressed && noise.offset.is_some(),
        "{noise:?}"
    );
    let hole = at(1 << 20).unwrap();
    assert!(!hole.data && !hole.compressed, "{hole:?}");
    let never = dir.path().join("never");
    let err = block_on(convert(
        &raw,
        &never,
        &ConvertOptions {
            compress: true,
            ..ConvertOptions::default()
        },
    ))
    .unwrap_err();
    assert!(matches!(err, ConvertError::CompressUnsupported), "{err:?}");
    assert_eq!(
        err.to_string(),
        "Compression not supported for this file format"
    );
    assert!(!never.exists());
}
