//! Internal snapshots on the in-memory device: create, write, apply and
//! delete, with the image judged after every operation by the checker
//! (`oracle::check`: refcounts exact, no leaks, COPIED flags right) and
//! the guest data compared with what was written when.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Error, Image, SnapshotError};
use futures::executor::block_on;

const MIB: u64 = 1 << 20;

fn create(o: &CreateOptions) -> Image<MemDev> {
    let dev = MemDev::new();
    block_on(Image::create(&dev, o)).expect("create");
    block_on(Image::open(dev, EngineOptions::default())).expect("open")
}

fn options(size: u64, cluster_size: u64) -> CreateOptions {
    CreateOptions {
        size,
        cluster_size,
        ..CreateOptions::default()
    }
}

fn write(img: &Image<MemDev>, off: u64, byte: u8, len: usize) {
    block_on(img.write(off, &vec![byte; len])).expect("write");
}

fn read(img: &Image<MemDev>, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    block_on(img.read(off, &mut b)).expect("read");
    b
}

/// Close the image, check it with the oracle (clean: no corruption, no
/// leak, no finding of any kind) and open it again.
fn checked(img: Image<MemDev>, what: &str) -> Image<MemDev> {
    let dev = block_on(img.close()).expect("close");
    let bytes = dev.to_bytes();
    let report = oracle::check::check(&bytes);
    assert_eq!(report.exit_code(), 0, "{what}: {report:?}");
    assert!(report.findings.is_empty(), "{what}: {:?}", report.findings);
    block_on(Image::open(dev, EngineOptions::default())).expect("reopen")
}

#[test]
fn apply_restores_what_the_snapshot_saw() {
    let mut img = create(&options(4 * MIB, 65536));
    write(&img, 0, 0x11, 128 << 10);
    write(&img, 3 * MIB, 0x22, 4096);
    let sn = block_on(img.snapshot_create("one", 1_700_000_000, 5_000)).unwrap();
    assert_eq!((sn.id.as_str(), sn.name.as_str()), ("1", "one"));
    let mut img = checked(img, "after create");
    let l1_entry = |img: &Image<MemDev>| {
        let mut e = [0u8; 8];
        let off = img.header().l1_table_offset;
        block_on(engine::dev::BlockDev::read(img.device(), off, &mut e)).unwrap();
        u64::from_be_bytes(e)
    };
    let shared_l2 = l1_entry(&img);
    assert_eq!(shared_l2 >> 63, 0, "the shared L2 table is not COPIED");
    // Overwrite part of a shared cluster, all of another, and a new one.
    write(&img, 4096, 0x33, 4096);
    block_on(img.flush()).unwrap();
    assert_eq!(
        img.counters().clusters_allocated,
        1,
        "the shared cluster is copied"
    );
    let own_l2 = l1_entry(&img);
    assert_ne!(own_l2 & !(1 << 63), shared_l2, "the L2 table is copied");
    assert_eq!(own_l2 >> 63, 1, "the copy is COPIED");
    write(&img, 65536, 0x44, 65536);
    write(&img, 2 * MIB, 0x55, 512);
    assert_eq!(read(&img, 4096, 4096), vec![0x33; 4096]);
    let img2 = checked(img, "after writes over the snapshot");
    img = img2;
    block_on(img.snapshot_apply("one")).unwrap();
    assert_eq!(read(&img, 0, 128 << 10), vec![0x11; 128 << 10]);
    assert_eq!(read(&img, 2 * MIB, 512), vec![0; 512]);
    assert_eq!(read(&img, 3 * MIB, 4096), vec![0x22; 4096]);
    let img = checked(img, "after apply");
    let list = block_on(img.snapshots()).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].date_sec, 1_700_000_000);
    assert_eq!(list[0].date_nsec, 5_000);
    assert_eq!(list[0].disk_size, Some(4 * MIB));
    assert_eq!(list[0].icount, Some(0));
}

#[test]
fn several_snapshots_apply_and_delete_in_any_order() {
    // Small clusters: several L2 tables, each shared and then copied.
    let mut img = create(&options(2 * MIB, 4096));
    let mut expect = Vec::new();
    for (i, byte) in [0xa1u8, 0xb2, 0xc3].into_iter().enumerate() {
        write(&img, i as u64 * 300_000, byte, 200_000);
        expect.push(read(&img, 0, 2 * MIB as usize));
        block_on(img.snapshot_create(&format!("s{i}"), 0, 0)).unwrap();
        img = checked(img, &format!("after snapshot {i}"));
    }
    write(&img, 0, 0xff, MIB as usize);
    img = checked(img, "after overwriting");
    for (i, want) in expect.iter().enumerate().rev() {
        block_on(img.snapshot_apply(&format!("s{i}"))).unwrap();
        assert!(read(&img, 0, 2 * MIB as usize) == *want, "data of s{i}");
        img = checked(img, &format!("after applying s{i}"));
    }
    // By id; the middle one first.
    block_on(img.snapshot_delete("2")).unwrap();
    img = checked(img, "after deleting id 2");
    let names: Vec<String> = block_on(img.snapshots())
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["s0", "s2"]);
    block_on(img.snapshot_apply("s2")).unwrap();
    assert!(read(&img, 0, 2 * MIB as usize) == expect[2]);
    for name in ["s0", "s2"] {
        block_on(img.snapshot_delete(name)).unwrap();
        img = checked(img, &format!("after deleting {name}"));
    }
    assert!(block_on(img.snapshots()).unwrap().is_empty());
    assert_eq!(img.header().snapshots_offset, 0);
    assert!(read(&img, 0, 2 * MIB as usize) == expect[2]);
    // Every cluster is the active table's alone again (COPIED): written
    // in place, nothing allocated.
    write(&img, 0, 0x77, 200_000);
    assert_eq!(img.counters().clusters_allocated, 0);
    checked(img, "after writing in place");
}

#[test]
fn deleting_frees_what_only_the_snapshot_held() {
    let mut img = create(&options(4 * MIB, 65536));
    write(&img, 0, 0x11, 2 * MIB as usize);
    block_on(img.snapshot_create("a", 0, 0)).unwrap();
    // Rewriting everything gives the active table its own copies.
    write(&img, 0, 0x22, 2 * MIB as usize);
    img = checked(img, "rewritten");
    block_on(img.snapshot_delete("a")).unwrap();
    let img = checked(img, "after delete");
    let end = |img: Image<MemDev>| {
        let dev = block_on(img.close()).unwrap();
        let end = oracle::check::check(&dev.to_bytes()).image_end_offset;
        (
            block_on(Image::open(dev, EngineOptions::default())).unwrap(),
            end,
        )
    };
    let (img, before) = end(img);
    assert_eq!(read(&img, 0, 4096), vec![0x22; 4096]);
    // The snapshot's 32 data clusters are free again: 2 MiB more of guest
    // data fits in them without the image growing.
    write(&img, 2 * MIB, 0x33, 2 * MIB as usize);
    let img = checked(img, "after reusing the freed clusters");
    let (_, after) = end(img);
    assert_eq!(after, before, "the freed clusters were reused");
}

#[test]
fn apply_of_a_snapshot_of_another_size_resizes() {
    let mut img = create(&options(MIB, 65536));
    write(&img, 0, 0x5a, 65536);
    block_on(img.snapshot_create("small", 0, 0)).unwrap();
    block_on(img.resize(64 * MIB)).unwrap();
    write(&img, 60 * MIB, 0x6b, 65536);
    block_on(img.snapshot_create("big", 0, 0)).unwrap();
    img = checked(img, "grown with snapshots");
    block_on(img.snapshot_apply("small")).unwrap();
    assert_eq!(img.virtual_size(), MIB);
    assert_eq!(read(&img, 0, 65536), vec![0x5a; 65536]);
    img = checked(img, "applied the small one");
    assert_eq!(img.virtual_size(), MIB);
    block_on(img.snapshot_apply("big")).unwrap();
    assert_eq!(img.virtual_size(), 64 * MIB);
    assert_eq!(read(&img, 60 * MIB, 65536), vec![0x6b; 65536]);
    checked(img, "applied the big one");
}

#[test]
fn lazy_refcounts_and_v2_images_stay_clean() {
    for o in [
        CreateOptions {
            lazy_refcounts: true,
            ..options(MIB, 512)
        },
        CreateOptions {
            compat: engine::Compat::V2,
            ..options(MIB, 65536)
        },
    ] {
        let mut img = create(&o);
        write(&img, 1000, 0x31, 100_000);
        block_on(img.snapshot_create("x", 0, 0)).unwrap();
        write(&img, 0, 0x32, 50_000);
        // Not closed: what the operations themselves left must be clean
        // but for the writes after them.
        block_on(img.flush()).unwrap();
        img = checked(img, "lazy or v2");
        block_on(img.snapshot_apply("x")).unwrap();
        assert_eq!(read(&img, 1000, 100_000), vec![0x31; 100_000]);
        block_on(img.snapshot_delete("x")).unwrap();
        checked(img, "lazy or v2 after delete");
    }
}

#[test]
fn a_missing_snapshot_and_a_data_file_are_refused() {
    let mut img = create(&options(MIB, 65536));
    let e = block_on(img.snapshot_apply("nope")).unwrap_err();
    assert_eq!(e, Error::Snapshot(SnapshotError::NotFound("nope".into())));
    let e = block_on(img.snapshot_delete("nope")).unwrap_err();
    assert_eq!(e, Error::Snapshot(SnapshotError::NotFound("nope".into())));
    checked(img, "after refusals");

    let (dev, data) = (MemDev::new(), MemDev::new());
    let o = CreateOptions {
        data_file: Some("d.raw".into()),
        ..options(MIB, 65536)
    };
    block_on(Image::create_with_data(&dev, Some(&data), &o)).unwrap();
    let mut img = block_on(Image::open_with_data(
        dev,
        Some(data),
        EngineOptions::default(),
    ))
    .unwrap();
    let e = block_on(img.snapshot_create("x", 0, 0)).unwrap_err();
    assert_eq!(e, Error::Snapshot(SnapshotError::DataFile));
}

#[test]
fn narrow_refcounts_refuse_without_changing_anything() {
    let mut img = create(&CreateOptions {
        refcount_bits: 1,
        ..options(MIB, 65536)
    });
    write(&img, 0, 1, 4096);
    let e = block_on(img.snapshot_create("x", 0, 0)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Snapshot(SnapshotError::RefcountOverflow { bits: 1, .. })
        ),
        "{e:?}"
    );
    let img = checked(img, "after the refusal");
    assert!(block_on(img.snapshots()).unwrap().is_empty());
}

/// An image with one snapshot, closed: its bytes and where the
/// snapshot table starts.
fn image_with_a_snapshot() -> (Vec<u8>, usize) {
    let mut img = create(&options(MIB, 65536));
    write(&img, 0, 0x11, 4096);
    block_on(img.snapshot_create("s", 0, 0)).unwrap();
    let at = img.header().snapshots_offset as usize;
    (block_on(img.close()).unwrap().to_bytes(), at)
}

fn open_bytes(bytes: Vec<u8>) -> Image<MemDev> {
    block_on(Image::open(
        MemDev::from_bytes(bytes),
        EngineOptions::default(),
    ))
    .unwrap()
}

#[test]
fn a_hostile_snapshot_table_is_refused_not_obeyed() {
    let (good, at) = image_with_a_snapshot();
    let is_format = |r: engine::Result<()>| matches!(r, Err(Error::Format { .. }));
    // A name running past the end of the file.
    let mut b = good.clone();
    b.truncate(at + 4096);
    b[at + 14..at + 16].copy_from_slice(&u16::MAX.to_be_bytes());
    let img = open_bytes(b);
    assert!(is_format(block_on(img.snapshots()).map(|_| ())));
    // Extra data above QEMU's 1 KiB limit.
    let mut b = good.clone();
    b[at + 36..at + 40].copy_from_slice(&4096u32.to_be_bytes());
    let mut img = open_bytes(b);
    assert!(is_format(block_on(img.snapshot_apply("s"))));
    // A snapshot L1 table that is not cluster aligned, or too large.
    for (field, value) in [(0..8, 0x10200u64), (8..12, 1 << 30)] {
        let mut b = good.clone();
        let len = field.len();
        b[at + field.start..at + field.end].copy_from_slice(&value.to_be_bytes()[8 - len..]);
        let mut img = open_bytes(b.clone());
        assert!(is_format(block_on(img.snapshot_apply("s"))));
        let mut img2 = open_bytes(b);
        assert!(is_format(block_on(img2.snapshot_delete("s"))));
        drop(img);
    }
    // More snapshots than the file holds (zeroes read as empty entries).
    let mut b = good;
    b[60..64].copy_from_slice(&65536u32.to_be_bytes());
    let img = open_bytes(b);
    assert!(is_format(block_on(img.snapshots()).map(|_| ())));
}
