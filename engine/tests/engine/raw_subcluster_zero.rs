//! Review: with raw external data (autoclear bit 1) the data file must
//! read as the guest disk on its own, also after zeroing whole subclusters
//! of an extended-L2 image.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

/// With raw external data the data file must read as the guest disk on
/// its own. Zeroing whole subclusters inside a cluster (extended L2
/// entries) marks them zero in the bitmap; the data file must be zeroed
/// there too, as whole-cluster zeroing and discard do.
#[test]
fn raw_data_file_follows_subcluster_zeroing() {
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: 65536,
        extended_l2: true,
        data_file: Some("disk.data".into()),
        data_file_raw: true,
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
    block_on(img.write(0, &[0xab; 65536])).unwrap();
    // Subclusters are 2 KiB: [8 KiB, 16 KiB) is four whole subclusters.
    block_on(img.write_zeroes(8192, 8192, true)).unwrap();
    let mut guest = vec![0u8; 65536];
    block_on(img.read(0, &mut guest)).unwrap();
    assert!(
        guest[8192..16384].iter().all(|&b| b == 0),
        "guest reads zeroes"
    );
    block_on(img.flush()).unwrap();
    let (_, data) = block_on(img.close_with_data()).unwrap();
    let raw = data.unwrap().into_bytes();
    assert!(
        raw[..65536] == guest[..],
        "the raw data file differs from the guest disk at byte {}",
        raw.iter().zip(&guest).position(|(a, b)| a != b).unwrap()
    );
}
