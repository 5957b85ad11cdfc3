//! Crash safety of `qemu-img amend`'s changes (`engine::amend`): every
//! request an upgrade, a downgrade (zero clusters converted), a lazy
//! refcounts switch and a refcount width change send is journaled, and
//! every state a crash could leave (what the last flush made durable, or
//! every write so far) must be consistent to the checker, as the snapshot
//! operations' are. The image after each change reads as before.

use engine::dev::MemDev;
use engine::{Compat, CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

use super::snapshot_crash::{assert_crash_states_consistent, journal};

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

/// The guest sees `image`'s data: zeroes where `zeroes` put them.
fn assert_reads(bytes: &[u8], zeroes: bool, what: &str) {
    let img = block_on(Image::open(
        MemDev::from_bytes(bytes.to_vec()),
        EngineOptions {
            read_only: true,
            ..EngineOptions::default()
        },
    ))
    .unwrap();
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
