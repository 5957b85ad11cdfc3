//! Malformed and hostile images: each crafted case must be refused with a
//! typed error naming the field, and random corruption of the metadata must
//! never panic or hang the engine.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Error, Image};
use futures::executor::block_on;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CS: usize = 4096;

/// A clean 4 KiB-cluster image with some data; layout: header at 0,
/// refcount table at 4096, refcount block at 8192, L1 at 12288.
fn base_image() -> Vec<u8> {
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 16 << 20,
        cluster_size: CS as u64,
        ..Default::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(img.write(0, &[0xab; 10000])).unwrap();
    block_on(img.write(9 << 20, &[0xcd; 5000])).unwrap();
    block_on(img.close()).unwrap().into_bytes()
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

fn open(bytes: Vec<u8>, read_only: bool) -> Result<Image<MemDev>, Error> {
    block_on(Image::open(
        MemDev::from_bytes(bytes),
        EngineOptions {
            read_only,
            ..Default::default()
        },
    ))
}

/// The error's text must name `what`.
fn expect_err(name: &str, bytes: Vec<u8>, read_only: bool, what: &str) {
    match open(bytes, read_only) {
        Ok(_) => panic!("{name}: opened a hostile image"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(what),
                "{name}: error {msg:?} does not name {what:?}"
            );
        }
    }
}

#[test]
fn crafted_headers_and_tables_are_refused_naming_the_field() {
    let base = base_image();
    let l1_entry0 = u64::from_be_bytes(base[12288..12296].try_into().unwrap());
    assert_ne!(l1_entry0, 0, "the base image has an L2 table");
    type Edit = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Edit, bool, &str)> = vec![
        ("bad magic", Box::new(|b| b[0] = b'X'), true, "magic"),
        ("version 4", Box::new(|b| put32(b, 4, 4)), true, "version"),
        (
            "cluster_bits 30",
            Box::new(|b| put32(b, 20, 30)),
            true,
            "cluster_bits",
        ),
        (
            "cluster_bits 8",
            Box::new(|b| put32(b, 20, 8)),
            true,
            "cluster_bits",
        ),
        (
            "size beyond L1",
            Box::new(|b| put64(b, 24, 1 << 50)),
            true,
            "l1_size",
        ),
        (
            "l1_size absurd",
            Box::new(|b| put32(b, 36, u32::MAX)),
            true,
            "l1_size",
        ),
        (
            "l1 unaligned",
            Box::new(|b| put64(b, 40, 12289)),
            true,
            "l1_table_offset",
        ),
        (
            "l1 at header",
            Box::new(|b| put64(b, 40, 0)),
            true,
            "l1_table_offset",
        ),
        (
            "l1 beyond EOF",
            Box::new(|b| put64(b, 40, 1 << 40)),
            true,
            "l1_table_offset",
        ),
        (
            "reftable beyond EOF",
            Box::new(|b| put64(b, 48, 1 << 40)),
            true,
            "refcount_table_offset",
        ),
        (
            "reftable at header",
            Box::new(|b| put64(b, 48, 0)),
            true,
            "refcount_table_offset",
        ),
        (
            "reftable over L1",
            Box::new(|b| put64(b, 48, 12288)),
            true,
            "overlaps the refcount table",
        ),
        (
            "reftable clusters 0",
            Box::new(|b| put32(b, 56, 0)),
            true,
            "refcount_table_clusters",
        ),
        (
            "reftable clusters huge",
            Box::new(|b| put32(b, 56, 1 << 30)),
            true,
            "refcount_table_clusters",
        ),
        (
            "refcount_order 7",
            Box::new(|b| put32(b, 96, 7)),
            true,
            "refcount_order",
        ),
        (
            "unknown incompatible bit",
            Box::new(|b| put64(b, 72, 1 << 10)),
            true,
            // QEMU's words: the mask of the bits nothing names.
            "Unsupported qcow2 feature(s): Unknown incompatible feature: 400",
        ),
        (
            "corrupt bit, read-write",
            Box::new(|b| put64(b, 72, 2)),
            false,
            "corrupt",
        ),
        (
            "external data file",
            Box::new(|b| put64(b, 72, 4)),
            true,
            "external data",
        ),
        (
            "header_length short",
            Box::new(|b| put32(b, 100, 64)),
            true,
            "header_length",
        ),
        (
            "header_length huge",
            Box::new(|b| put32(b, 100, 1 << 20)),
            true,
            "header_length",
        ),
        (
            "backing name too long",
            Box::new(|b| {
                put64(b, 8, 200);
                put32(b, 16, 5000)
            }),
            true,
            "backing_file_size",
        ),
        (
            "backing name outside cluster",
            Box::new(|b| {
                put64(b, 8, 4000);
                put32(b, 16, 500)
            }),
            true,
            "backing_file_offset",
        ),
        (
            "extension runs past cluster",
            Box::new(|b| {
                put32(b, 112, 0x1234);
                put32(b, 116, 100_000)
            }),
            true,
            "extension",
        ),
        (
            "encrypted",
            Box::new(|b| put32(b, 32, 1)),
            true,
            "crypt_method",
        ),
        (
            "L1 entry beyond EOF",
            Box::new(|b| put64(b, 12288, (1 << 40) | (1 << 63))),
            true,
            "L1 entry 0",
        ),
        (
            "L1 entry at a refcount block",
            Box::new(|b| put64(b, 12288, 8192 | (1 << 63))),
            true,
            "L1 entry 0",
        ),
        (
            "L1 entry at refcount table",
            Box::new(|b| put64(b, 12288, 4096 | (1 << 63))),
            true,
            "L1 entry 0",
        ),
        (
            "L1 entry at L1 itself",
            Box::new(|b| put64(b, 12288, 12288 | (1 << 63))),
            true,
            "L1 entry 0",
        ),
        (
            "L1 entry unaligned",
            Box::new(move |b| put64(b, 12288, l1_entry0 + 512)),
            true,
            "L1 entry 0",
        ),
        (
            "L1 entry reserved bits",
            Box::new(move |b| put64(b, 12288, l1_entry0 | 1)),
            true,
            "L1 entry 0",
        ),
        (
            "refblock beyond EOF",
            Box::new(|b| put64(b, 4096, 1 << 40)),
            true,
            "refcount table entry 0",
        ),
        (
            "refblock is the reftable",
            Box::new(|b| put64(b, 4096, 4096)),
            true,
            "refcount table entry 0",
        ),
        (
            "refblock at header",
            Box::new(|b| put64(b, 4096 + 8, 0x200)),
            true,
            "refcount table entry 1",
        ),
        (
            "snapshot table unaligned",
            Box::new(|b| {
                put32(b, 60, 1);
                put64(b, 64, 77)
            }),
            true,
            "snapshots_offset",
        ),
        ("truncated", Box::new(|b| b.truncate(50)), true, "header"),
    ];
    for (name, edit, ro, what) in cases {
        let mut b = base.clone();
        edit(&mut b);
        expect_err(name, b, ro, what);
    }
}

#[test]
fn metadata_memory_limit_is_enforced() {
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 1 << 40,
        cluster_size: 65536,
        ..Default::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let opts = EngineOptions {
        metadata_memory_limit: 4096,
        ..Default::default()
    };
    match block_on(Image::open(dev, opts)) {
        Err(Error::MetadataLimit { what, .. }) => assert!(what.contains("L1"), "{what}"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("opened past the metadata limit"),
    }
}

#[test]
fn requests_outside_the_disk_are_errors() {
    let img = open(base_image(), false).unwrap();
    let size = img.virtual_size();
    let mut buf = [0u8; 512];
    assert!(matches!(
        block_on(img.read(size - 100, &mut buf)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        block_on(img.write(size, &buf)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        block_on(img.write(u64::MAX - 10, &buf)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        block_on(img.discard(size - 512, 1024)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        block_on(img.write_zeroes(0, size + 1, false)),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
fn random_metadata_corruption_never_panics() {
    let base = base_image();
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut opened = 0;
    // Corrupt bytes in the header, refcount table, refcount block, L1 and
    // the first L2 table; then use the image.
    for round in 0..2000 {
        let mut b = base.clone();
        for _ in 0..rng.gen_range(1..6) {
            let region = rng.gen_range(0..5) * CS;
            let at = region + rng.gen_range(0..if region == 0 { 128 } else { 64 });
            b[at] ^= 1 << rng.gen_range(0..8);
        }
        let snapshot = b.clone();
        let Ok(img) = open(b, false) else { continue };
        opened += 1;
        let mut buf = vec![0u8; 64 << 10];
        let size = img.virtual_size();
        for k in 0..4u64 {
            let off = ((k * 3) << 20).min(size.saturating_sub(buf.len() as u64));
            let _ = block_on(img.read(off, &mut buf));
            let _ = block_on(img.write(off + 100, &buf[..5000]));
        }
        let _ = block_on(img.discard(0, 1 << 20));
        let _ = block_on(img.flush());
        let _ = block_on(img.close());
        let _ = (round, snapshot);
    }
    // The loop is only worth something if many corrupted images opened.
    assert!(
        opened > 300,
        "only {opened} of 2000 corrupted images opened"
    );
}

#[test]
fn allocation_over_metadata_with_refcount_zero_is_refused_not_hung() {
    // Refcount table entry 0 emptied: the header, tables and refcount block
    // all read as free. Allocating must stop at the overlap, as QEMU does.
    let mut b = base_image();
    put64(&mut b, 4096, 0);
    let img = open(b, false).expect("opens");
    let r = block_on(img.write(12 << 20, &[7u8; 4096]));
    match r {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("metadata cluster"), "{what}"),
        other => panic!("expected a corruption error, got {other:?}"),
    }
    assert!(matches!(
        block_on(img.write(13 << 20, &[7u8; 512])),
        Err(Error::Poisoned)
    ));
}

/// The base image's L2 table for guest offset 0 and the one for 9 MiB.
fn l2_tables(b: &[u8]) -> (usize, usize) {
    let e = |i: usize| {
        (u64::from_be_bytes(b[12288 + i * 8..12296 + i * 8].try_into().unwrap())
            & 0x00ff_ffff_ffff_fe00) as usize
    };
    (e(0), e(4))
}

#[test]
fn guest_writes_never_land_on_metadata_an_l2_entry_points_at() {
    let base = base_image();
    let (l2, other_l2) = l2_tables(&base);
    const COPIED: u64 = 1 << 63;
    for (name, target) in [
        ("the refcount table", 4096usize),
        ("a refcount block", 8192),
        ("the L1 table", 12288),
        ("another L2 table", other_l2),
        ("its own L2 table", l2),
    ] {
        let mut b = base.clone();
        // Guest cluster 1 (offset 4096) claims to live at `target`. (An
        // offset of 0, the header, would mean "unallocated".)
        put64(&mut b, l2 + 8, target as u64 | COPIED);
        let Ok(img) = open(b.clone(), false) else {
            continue; // refused at open: also fine
        };
        let r = block_on(img.write(4096, &[0x5a; 4096]));
        match r {
            Err(Error::Corrupt { what, .. }) => {
                assert!(what.contains("metadata"), "{name}: {what}")
            }
            other => panic!("{name}: expected a corruption error, got {other:?}"),
        }
        let after = block_on(img.close()).map(|d| d.into_bytes());
        if let Ok(after) = after {
            let t = target & !(CS - 1);
            assert_eq!(
                after[t..t + CS],
                b[t..t + CS],
                "{name}: the metadata was overwritten"
            );
        }
    }
}

#[test]
fn an_l2_table_shared_by_two_l1_entries_as_unshared_is_refused() {
    let mut b = base_image();
    let e0 = u64::from_be_bytes(b[12288..12296].try_into().unwrap());
    put64(&mut b, 12288 + 8, e0);
    expect_err("shared L2 table", b, false, "L1 entry 1");
}

#[test]
fn allocation_over_an_l2_table_with_refcount_zero_is_refused() {
    let mut b = base_image();
    let (l2, _) = l2_tables(&b);
    // 16-bit refcounts in the block at 8192: the L2 table reads as free.
    let idx = l2 / CS;
    b[8192 + idx * 2..8192 + idx * 2 + 2].copy_from_slice(&[0, 0]);
    let img = open(b, false).expect("opens");
    let r = block_on(img.write(12 << 20, &[7u8; 4096]));
    match r {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("metadata cluster"), "{what}"),
        other => panic!("expected a corruption error, got {other:?}"),
    }
}
