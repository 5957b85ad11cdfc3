//! `tools::resize` and the engine's `Image::resize` under it: growing past
//! the L1 table's length (a new table), growing within it, shrinking with
//! and without `--shrink`, and the zeroes a grown image over a longer
//! backing file reads; each image then judged by the checker
//! (`oracle::check`), by `qemu-img check` and by what QEMU reads.

use std::path::Path;

use engine::{CreateOptions, Image};
use testkit::{assert_clean, qemu_io, qemu_raw};
use tools::files::OpenOptions;
use tools::resize::{resize_image, ResizeError, SizeChange};

use crate::support::qcow2_with;

fn resize(path: &Path, change: SizeChange, shrink: bool) -> Result<u64, ResizeError> {
    futures::executor::block_on(resize_image(path, &OpenOptions::default(), change, shrink))
}

/// Our checker and QEMU's agree the image is clean.
fn assert_both_clean(path: &Path, what: &str) {
    let bytes = std::fs::read(path).unwrap();
    let report = oracle::check::check(&bytes);
    assert_eq!(report.exit_code(), 0, "{what}: oracle::check: {report:?}");
    assert!(report.findings.is_empty(), "{what}: {:?}", report.findings);
    assert_clean(path, what);
}

fn header(path: &Path) -> engine::format::Header {
    let bytes = std::fs::read(path).unwrap();
    futures::executor::block_on(Image::read_header(&engine::dev::MemDev::from_bytes(bytes)))
        .unwrap()
}

#[test]
fn growing_past_the_l1_table_moves_it_and_keeps_the_data() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    // 512-byte clusters: one L2 table maps 32 KiB, so 1 MiB needs 32 L1
    // entries and 64 MiB 2048 (32 clusters of table).
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: 512,
        ..CreateOptions::default()
    };
    let writes = [
        (0, 0x11, 4096),
        (500_000, 0x22, 10_000),
        ((1 << 20) - 512, 0x33, 512),
    ];
    let path = qcow2_with(dir.path(), "grow.qcow2", &o, &writes);
    let before = header(&path);
    assert_eq!(before.l1_size, 32);
    let expected = qemu_raw(&path);

    assert_eq!(
        resize(&path, SizeChange::To(64 << 20), false).unwrap(),
        64 << 20
    );
    let after = header(&path);
    assert_eq!(after.size, 64 << 20);
    assert_eq!(after.l1_size, 2048);
    assert_ne!(
        after.l1_table_offset, before.l1_table_offset,
        "a new L1 table"
    );
    assert_both_clean(&path, "grown past the L1 table");
    let raw = qemu_raw(&path);
    assert_eq!(raw.len(), 64 << 20);
    assert_eq!(
        &raw[..1 << 20],
        &expected[..],
        "the data before the old end"
    );
    assert!(
        raw[1 << 20..].iter().all(|&b| b == 0),
        "the new range reads zeroes"
    );

    // Writes past the old end land and stay consistent.
    qemu_io(None, &path, &["write -P 0x44 60M 64k".to_owned()]);
    assert_both_clean(&path, "written past the old end");
    let raw = qemu_raw(&path);
    assert!(raw[60 << 20..(60 << 20) + 65536].iter().all(|&b| b == 0x44));
}

#[test]
fn growing_within_the_l1_table_only_changes_the_size() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = CreateOptions {
        size: 1 << 20,
        ..CreateOptions::default()
    };
    let path = qcow2_with(dir.path(), "small.qcow2", &o, &[(4096, 0x5a, 8192)]);
    let before = header(&path);
    resize(&path, SizeChange::Grow(1 << 20), false).unwrap();
    let after = header(&path);
    assert_eq!(after.size, 2 << 20);
    assert_eq!(after.l1_table_offset, before.l1_table_offset);
    assert_both_clean(&path, "grown within the L1 table");
    let raw = qemu_raw(&path);
    assert!(raw[4096..12288].iter().all(|&b| b == 0x5a));
}

#[test]
fn shrinking_needs_the_flag_and_then_drops_what_is_past_the_end() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = CreateOptions {
        size: 8 << 20,
        cluster_size: 4096,
        ..CreateOptions::default()
    };
    // One write in each of the four L2 tables' ranges (2 MiB each).
    let writes = [
        (0, 1, 4096),
        (3 << 20, 2, 4096),
        (5 << 20, 3, 4096),
        (7 << 20, 4, 4096),
    ];
    let path = qcow2_with(dir.path(), "shrink.qcow2", &o, &writes);
    let err = resize(&path, SizeChange::Shrink(4 << 20), false).unwrap_err();
    assert!(matches!(err, ResizeError::NeedsShrink), "{err}");
    assert_eq!(header(&path).size, 8 << 20, "refused: nothing changed");

    resize(&path, SizeChange::To(4 << 20), true).unwrap();
    assert_eq!(header(&path).size, 4 << 20);
    // The clusters and L2 tables past the end are freed: no leaks.
    assert_both_clean(&path, "shrunk");
    let raw = qemu_raw(&path);
    assert_eq!(raw.len(), 4 << 20);
    assert!(raw[..4096].iter().all(|&b| b == 1));
    assert!(raw[3 << 20..(3 << 20) + 4096].iter().all(|&b| b == 2));

    // Growing back: the dropped data does not come back.
    resize(&path, SizeChange::To(8 << 20), false).unwrap();
    assert_both_clean(&path, "grown back");
    let raw = qemu_raw(&path);
    assert!(raw[4 << 20..].iter().all(|&b| b == 0));
}

#[test]
fn sizes_that_are_not_positive_or_not_sectors_are_refused() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = crate::support::qcow2(dir.path(), "img.qcow2", &[]);
    let size = crate::support::SIZE;
    let err = resize(&path, SizeChange::Shrink(size), true).unwrap_err();
    assert!(matches!(err, ResizeError::NotPositive), "{err}");
    let err = resize(&path, SizeChange::Shrink(size + 1), true).unwrap_err();
    assert!(matches!(err, ResizeError::NotPositive), "{err}");
    let err = resize(&path, SizeChange::Grow(1000), false).unwrap_err();
    assert!(matches!(err, ResizeError::Unaligned), "{err}");
    assert_eq!(header(&path).size, size);
    assert_both_clean(&path, "after refusals");
}

#[test]
fn growing_over_a_longer_backing_file_reads_zeroes_not_the_backing_data() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.qcow2");
    let top = dir.path().join("top.qcow2");
    testkit::qemu_create(&base, "", "1M", None);
    qemu_io(None, &base, &["write -P 0x11 0 1M".to_owned()]);
    testkit::qemu_create(&top, "", "1M", Some(("base.qcow2", "qcow2")));
    qemu_io(None, &top, &["write -P 0x22 0 1M".to_owned()]);
    // Within one 64 KiB cluster: the cluster at 512 KiB stays, partly past
    // the end.
    resize(&top, SizeChange::To(520 << 10), true).unwrap();
    resize(&top, SizeChange::To(567 << 10), false).unwrap();
    assert_both_clean(&top, "shrunk and grown over a backing file");
    let raw = qemu_raw(&top);
    assert_eq!(raw.len(), 567 << 10);
    assert!(raw[..520 << 10].iter().all(|&b| b == 0x22));
    assert!(raw[520 << 10..].iter().all(|&b| b == 0));
}
