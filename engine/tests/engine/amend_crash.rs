//! Crash safety of `qemu-img amend`'s changes (`engine::amend`): every
//! request an upgrade, a downgrade (zero clusters converted), a lazy
//! refcounts switch and a refcount width change send is journaled, and
//! every state a crash could leave (what the last flush made durable, or
//! every write so far) must be consistent to the checker, as the snapshot
//! operations' are. The image after each change reads as before.

use engine::dev::MemDev;
use engine::format::snapshot::{decode_entry, Decoded};
use engine::{Compat, CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

use super::snapshot_crash::{assert_crash_states_consistent, journal, replay, Ev};

/// An image made by `o`, with data at 0, zeroes (one zero cluster kept
/// allocated over data, one not) where `zeroes` says.
fn image(o: &CreateOptions, zeroes: bool) -> Vec<u8> {
    let dev = MemDev::new();
    block_on(Image::create(&dev, o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(img.write(0, &[0x11; 300_000])).unwrap();
    if zeroes {
        block_on(img.write_zeroes(0, 8192, false)).unwrap();
        block_on(img.write_zeroes(600_000, 40_000, false)).unwrap();
    }
    block_on(img.close()).unwrap().to_bytes()
}

/// The version the header of `bytes` says.
fn version(bytes: &[u8]) -> u32 {
    block_on(Image::read_header(&MemDev::from_bytes(bytes.to_vec())))
        .unwrap()
        .version
}

fn open_read_only(bytes: &[u8]) -> Image<MemDev> {
    let opts = EngineOptions {
        read_only: true,
        ..EngineOptions::default()
    };
    block_on(Image::open(MemDev::from_bytes(bytes.to_vec()), opts)).unwrap()
}

/// The guest sees `image`'s data: zeroes where `zeroes` put them.
fn assert_reads(bytes: &[u8], zeroes: bool, what: &str) {
    let img = open_read_only(bytes);
    let mut buf = vec![0u8; 1 << 20];
    block_on(img.read(0, &mut buf)).unwrap();
    let from = if zeroes { 8192 } else { 0 };
    assert!(buf[..from].iter().all(|&b| b == 0), "{what}");
    assert!(buf[from..300_000].iter().all(|&b| b == 0x11), "{what}");
    assert!(buf[300_000..].iter().all(|&b| b == 0), "{what}");
}

#[test]
fn every_crash_during_an_amendment_leaves_a_consistent_image() {
    let small = CreateOptions {
        size: 1 << 20,
        cluster_size: 4096,
        ..CreateOptions::default()
    };
    // Up from version 2.
    let v2 = image(
        &CreateOptions {
            compat: Compat::V2,
            ..small.clone()
        },
        false,
    );
    let (v3, evs) = journal(&v2, async |img| img.upgrade_to_v3().await.unwrap());
    assert_crash_states_consistent(&v2, &evs, "upgrade");
    assert_eq!(version(&v3), 3);
    assert_reads(&v3, false, "upgrade");
    // Down, with zero clusters to convert.
    let z = image(&small, true);
    let (down, evs) = journal(&z, async |img| {
        img.downgrade_to_v2(&mut |_, _| {}).await.unwrap()
    });
    assert_crash_states_consistent(&z, &evs, "downgrade");
    assert_eq!(version(&down), 2);
    assert_reads(&down, true, "downgrade");
    // Lazy refcounts on, data written under them, off.
    let (lazy, evs) = journal(&z, async |img| img.set_lazy_refcounts(true).await.unwrap());
    assert_crash_states_consistent(&z, &evs, "lazy on");
    let (off, evs) = journal(&lazy, async |img| {
        img.write(8192, &[0x11; 100_000]).await.unwrap();
        img.set_lazy_refcounts(false).await.unwrap()
    });
    assert_crash_states_consistent(&lazy, &evs, "lazy off");
    assert_reads(&off, true, "lazy off");
    // Refcount widths: narrower, wider, back.
    let mut cur = z.clone();
    for bits in [1, 64, 8, 16] {
        let (next, evs) = journal(&cur, async |img| img.set_refcount_bits(bits).await.unwrap());
        assert_crash_states_consistent(&cur, &evs, &format!("refcount_bits={bits}"));
        assert_reads(&next, true, &format!("refcount_bits={bits}"));
        cur = next;
    }
}

#[test]
fn an_upgrade_rewrites_version_2_snapshot_entries_crash_safely() {
    let v2 = {
        // As older writers wrote it: no extra data, so no disk size.
        let mut img = legacy_v2();
        block_on(img.write(0, &[0x11; 300_000])).unwrap();
        block_on(img.snapshot_create("s", 1, 0)).unwrap();
        let bytes = block_on(img.close()).unwrap().to_bytes();
        assert_eq!(extra_data_sizes(&bytes), [0]);
        bytes
    };
    let snapshots_of = |bytes: &[u8]| block_on(open_read_only(bytes).snapshots()).unwrap();
    // A version 2 entry has no disk size; the upgrade writes one.
    assert_eq!(snapshots_of(&v2)[0].disk_size, None);
    let (v3, evs) = journal(&v2, async |img| img.upgrade_to_v3().await.unwrap());
    assert_crash_states_consistent(&v2, &evs, "upgrade with a snapshot");
    assert_eq!(version(&v3), 3);
    let snaps = snapshots_of(&v3);
    assert_eq!(snaps.len(), 1);
    assert_eq!(snaps[0].disk_size, Some(1 << 20));
    assert_reads(&v3, false, "upgrade with a snapshot");
}

#[test]
fn an_upgrade_with_512_byte_clusters_leaves_the_feature_table_out_when_it_does_not_fit() {
    // The header's cluster holds the header, the backing format, the
    // backing file's name and, at version 3, the feature name table,
    // which is optional: QEMU 10.0 leaves it out of a 512-byte cluster
    // with a backing file (its `amend -o compat=1.1` succeeds), and so
    // does create here.
    let v2 = v2_with_backing(8 << 20, 512, 300_000);
    let (v3, evs) = journal(&v2, async |img| img.upgrade_to_v3().await.unwrap());
    assert_crash_states_consistent(&v2, &evs, "upgrade with 512-byte clusters");
    assert_eq!(version(&v3), 3);
    let h = block_on(Image::read_header(&MemDev::from_bytes(v3.clone()))).unwrap();
    assert!(h
        .extension(engine::format::header::ext::FEATURE_TABLE)
        .is_none());
    assert_eq!(h.backing_format().as_deref(), Some("raw"));
    let img = open_read_only(&v3);
    let mut buf = vec![0u8; 300_000];
    block_on(img.read(0, &mut buf)).unwrap();
    assert!(buf.iter().all(|&b| b == 0x11));
}

#[test]
fn an_upgrade_keeps_the_backing_file_name_in_every_crash_state() {
    // With a backing file the version 3 header (its feature table) is
    // longer than a sector: its rest is written and made durable before
    // the first sector switches, so no crash state names a backing file
    // whose name is not there.
    let v2 = v2_with_backing(4 << 20, 4096, 100_000);
    let (v3, evs) = journal(&v2, async |img| img.upgrade_to_v3().await.unwrap());
    assert_crash_states_consistent(&v2, &evs, "upgrade with a backing file");
    let name = |bytes: &[u8]| {
        let h = block_on(Image::read_header(&MemDev::from_bytes(bytes.to_vec()))).unwrap();
        let at = h.backing_file_offset as usize;
        String::from_utf8_lossy(&bytes[at..at + h.backing_file_size as usize]).into_owned()
    };
    assert_eq!(version(&v3), 3);
    assert_eq!(name(&v3), "backing.raw");
    // Every prefix of the journal, each write whole or torn at any
    // sector, names the backing file.
    for state in torn_states(&v2, &evs) {
        assert_eq!(name(&state), "backing.raw");
    }
}

/// The states a crash can leave after each prefix of `evs` over `base`,
/// with the next write, if it spans more than one sector, torn: its first
/// sector landed without the rest, or the rest without its first sector.
fn torn_states(base: &[u8], evs: &[Ev]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for k in 0..=evs.len() {
        let before = replay(base, &evs[..k]);
        if let Some(Ev::Write(off, data) | Ev::FuaWrite(off, data)) = evs.get(k) {
            if data.len() > 512 {
                let (head, rest) = data.split_at(512);
                out.push(replay(&before, &[Ev::Write(*off, head.to_vec())]));
                out.push(replay(&before, &[Ev::Write(off + 512, rest.to_vec())]));
            }
        }
        out.push(before);
    }
    out
}

/// A version 2 image of `size` bytes and `cluster_size` clusters naming a
/// raw backing file, its first `written` bytes written with 0x11.
fn v2_with_backing(size: u64, cluster_size: u64, written: usize) -> Vec<u8> {
    let dev = MemDev::new();
    let o = CreateOptions {
        size,
        cluster_size,
        compat: Compat::V2,
        backing_file: Some("backing.raw".into()),
        backing_format: Some("raw".into()),
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(img.write(0, &vec![0x11; written])).unwrap();
    block_on(img.close()).unwrap().to_bytes()
}

#[test]
fn an_image_kept_open_after_an_amend_goes_on_as_its_new_header_says() {
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: 4096,
        ..CreateOptions::default()
    };
    // Downgraded and kept open: zeroes written over data must not make
    // zero clusters, which version 2 does not have.
    let v3 = image(&o, false);
    let mut img = block_on(Image::open(
        MemDev::from_bytes(v3),
        EngineOptions::default(),
    ))
    .unwrap();
    block_on(img.downgrade_to_v2(&mut |_, _| {})).unwrap();
    block_on(img.write_zeroes(0, 8192, false)).unwrap();
    let v2 = block_on(img.close()).unwrap().to_bytes();
    assert_eq!(version(&v2), 2);
    let r = oracle::check::check(&v2);
    assert!(r.failure.is_none() && r.findings.is_empty(), "{r:?}");
    assert_reads(&v2, true, "zeroes written after a downgrade");
    // Upgraded and kept open with lazy refcounts turned on: writes defer
    // their refcounts under the dirty bit, as after an open of such an
    // image, and the close leaves it clean and consistent.
    let mut img = block_on(Image::open(
        MemDev::from_bytes(v2),
        EngineOptions::default(),
    ))
    .unwrap();
    block_on(img.upgrade_to_v3()).unwrap();
    block_on(img.set_lazy_refcounts(true)).unwrap();
    block_on(img.write(400_000, &[0x22; 8192])).unwrap();
    block_on(img.flush()).unwrap();
    assert!(img.header().is_dirty(), "lazy refcounts set the dirty bit");
    let v3 = block_on(img.close()).unwrap().to_bytes();
    let r = oracle::check::check(&v3);
    assert!(r.failure.is_none() && r.findings.is_empty(), "{r:?}");
}

/// An empty 1 MiB version 2 image with 4 KiB clusters, opened to write
/// its snapshot entries without extra data.
fn legacy_v2() -> Image<MemDev> {
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: 4096,
        compat: Compat::V2,
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let legacy = EngineOptions {
        legacy_snapshot_entries: true,
        ..EngineOptions::default()
    };
    block_on(Image::open(dev, legacy)).unwrap()
}

/// The extra data size field of each entry of the snapshot table `bytes`'
/// header names.
fn extra_data_sizes(bytes: &[u8]) -> Vec<u32> {
    let h = block_on(Image::read_header(&MemDev::from_bytes(bytes.to_vec()))).unwrap();
    let mut at = h.snapshots_offset as usize;
    let mut sizes = Vec::new();
    for _ in 0..h.nb_snapshots {
        let Decoded::Entry(_, len) = decode_entry(&bytes[at..], 0).unwrap() else {
            panic!("the entry decodes");
        };
        sizes.push(u32::from_be_bytes(
            bytes[at + 36..at + 40].try_into().unwrap(),
        ));
        at += len.next_multiple_of(8);
    }
    sizes
}

/// The option that writes entries without extra data acts on version 2
/// images only: once an open image is upgraded, its next table has the
/// extra data version 3 requires, the snapshot taken before with the
/// image's size.
#[test]
fn entries_without_extra_data_stop_at_the_upgrade() {
    let mut img = legacy_v2();
    block_on(img.write(0, &[0x11; 8192])).unwrap();
    block_on(img.snapshot_create("a", 1, 0)).unwrap();
    block_on(img.snapshot_create("b", 2, 0)).unwrap();
    block_on(img.upgrade_to_v3()).unwrap();
    block_on(img.snapshot_create("c", 3, 0)).unwrap();
    let bytes = block_on(img.close()).unwrap().to_bytes();
    assert_eq!(version(&bytes), 3);
    assert!(
        extra_data_sizes(&bytes).iter().all(|&n| n >= 16),
        "{:?}",
        extra_data_sizes(&bytes)
    );
    let snaps = block_on(open_read_only(&bytes).snapshots()).unwrap();
    assert!(
        snaps.iter().all(|s| s.disk_size == Some(1 << 20)),
        "{snaps:?}"
    );
}
