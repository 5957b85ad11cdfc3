//! The unit tests of `engine::guest::discard`.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image, Status};
use futures::executor::block_on;

const CS: u64 = 64 << 10;

fn image(size: u64) -> Image<MemDev> {
    let dev = MemDev::new();
    let o = CreateOptions {
        size,
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    block_on(Image::open(dev, EngineOptions::default())).unwrap()
}

#[test]
fn zeroes_keep_the_host_cluster_unless_they_may_unmap() {
    let img = image(8 * CS);
    block_on(async {
        img.write(0, &vec![1; 4 * CS as usize]).await.unwrap();
        let host = img.host_offset(CS).await.unwrap().unwrap();
        img.write_zeroes(CS, CS, false).await.unwrap();
        assert_eq!(img.zero_host_offset(CS).await.unwrap(), Some(host));
        assert_eq!(img.block_status(CS, CS).await.unwrap(), (Status::Zero, CS));
        img.write_zeroes(2 * CS, CS, true).await.unwrap();
        assert_eq!(img.zero_host_offset(2 * CS).await.unwrap(), None);
        assert_eq!(
            img.block_status(2 * CS, CS).await.unwrap(),
            (Status::Zero, CS)
        );
        // A partial write fills the kept cluster in place, the rest of
        // it zeroes.
        img.write(CS + 10, &[2; 10]).await.unwrap();
        // (With delayed COW the allocation is linked at the flush.)
        img.flush().await.unwrap();
        assert_eq!(img.host_offset(CS).await.unwrap(), Some(host));
        let mut buf = vec![9; CS as usize];
        img.read(CS, &mut buf).await.unwrap();
        assert!(buf[..10].iter().all(|&b| b == 0));
        assert!(buf[10..20].iter().all(|&b| b == 2));
        assert!(buf[20..].iter().all(|&b| b == 0));
    });
}

#[test]
fn an_unaligned_zeroing_of_a_hole_makes_a_zero_cluster() {
    let img = image(8 * CS);
    block_on(async {
        img.write_zeroes(CS + 512, 1024, false).await.unwrap();
        assert_eq!(img.block_status(CS, CS).await.unwrap(), (Status::Zero, CS));
        assert_eq!(img.host_offset(CS).await.unwrap(), None);
        // Where the cluster holds data, the bytes are written instead.
        img.write(3 * CS, &[1; 10]).await.unwrap();
        img.write_zeroes(3 * CS + 512, 1024, false).await.unwrap();
        assert_eq!(
            img.block_status(3 * CS, CS).await.unwrap(),
            (Status::Data, CS)
        );
        let mut buf = vec![9; 2048];
        img.read(3 * CS, &mut buf).await.unwrap();
        assert!(buf[..10].iter().all(|&b| b == 1));
        assert!(buf[10..].iter().all(|&b| b == 0));
    });
}
