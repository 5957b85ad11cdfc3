//! Review: with an external data file an L2 entry must name its own guest
//! offset. With extended L2 entries the engine checked only what the
//! accessed subcluster decodes to, so an entry naming another cluster's
//! offset with that subcluster unallocated passed, and a write then filled
//! it "in place" at the named offset: in another guest cluster's data.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Error, Image};
use futures::executor::block_on;

const CS: u64 = 64 << 10;

#[test]
fn extended_entry_naming_another_offset_is_corrupt() {
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: CS,
        extended_l2: true,
        data_file: Some("disk.data".into()),
        ..Default::default()
    };
    let (dev, data) = (MemDev::new(), MemDev::new());
    block_on(Image::create_with_data(&dev, Some(&data), &o)).unwrap();
    let img = block_on(Image::open_with_data(
        dev,
        Some(data),
        EngineOptions::default(),
    ))
    .unwrap();
    block_on(img.write(CS, &vec![0x11; CS as usize])).unwrap();
    block_on(img.write(2 * CS, &[0x22; 4096])).unwrap();
    let (dev, data) = block_on(img.close_with_data()).unwrap();
    let mut bytes = dev.into_bytes();
    let l1 = u64::from_be_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let l2 = (u64::from_be_bytes(bytes[l1..l1 + 8].try_into().unwrap()) & 0x00ff_ffff_ffff_fe00)
        as usize;
    // Cluster 2's entry now names cluster 1's offset, COPIED, with no
    // subcluster allocated (as after zeroing them all).
    let e = l2 + 2 * 16;
    bytes[e..e + 8].copy_from_slice(&(CS | 1 << 63).to_be_bytes());
    bytes[e + 8..e + 16].copy_from_slice(&0u64.to_be_bytes());
    let img = block_on(Image::open_with_data(
        MemDev::from_bytes(bytes),
        data,
        EngineOptions::default(),
    ))
    .unwrap();
    // A write to an unallocated subcluster of cluster 2.
    let w = block_on(img.write(2 * CS + 8192, &[0x33; 2048]));
    let mut c1 = vec![0u8; CS as usize];
    block_on(img.read(CS, &mut c1)).unwrap();
    assert!(
        c1.iter().all(|&b| b == 0x11),
        "a write to cluster 2 changed cluster 1's data"
    );
    assert!(
        matches!(w, Err(Error::Corrupt { .. })),
        "the entry is corrupt: {w:?}"
    );
}
