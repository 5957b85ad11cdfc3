//! The unit tests of `engine::guest::block_status`.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image, Status};
use futures::executor::block_on;

const CS: u64 = 64 << 10;

fn image(size: u64, backing: Option<&str>) -> Image<MemDev> {
    let dev = MemDev::new();
    let o = CreateOptions {
        size,
        backing_file: backing.map(str::to_owned),
        backing_format: backing.map(|_| "raw".to_owned()),
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    block_on(Image::open(dev, EngineOptions::default())).unwrap()
}

/// Every piece of [0, size), as (status, start, len).
fn pieces(img: &Image<MemDev>, deep: bool) -> Vec<(Status, u64, u64)> {
    let size = img.virtual_size();
    let mut out: Vec<(Status, u64, u64)> = Vec::new();
    let mut pos = 0;
    while pos < size {
        let (s, n) = if deep {
            block_on(img.block_status_deep(pos, size - pos)).unwrap()
        } else {
            block_on(img.block_status(pos, size - pos)).unwrap()
        };
        assert!(n > 0 && n <= size - pos);
        match out.last_mut() {
            Some((ls, _, ln)) if *ls == s => *ln += n,
            _ => out.push((s, pos, n)),
        }
        pos += n;
    }
    out
}

#[test]
fn data_zero_and_holes() {
    let img = image(16 * CS, None);
    block_on(async {
        img.write(CS + 100, &[1; 10]).await.unwrap();
        img.write(2 * CS, &[1; 10]).await.unwrap();
        // Zeroing allocated clusters makes zero clusters.
        img.write(5 * CS, &vec![1; 2 * CS as usize]).await.unwrap();
        img.write_zeroes(5 * CS, 2 * CS, false).await.unwrap();
        img.write(9 * CS, &[1; 10]).await.unwrap();
    });
    use Status::*;
    assert_eq!(
        pieces(&img, false),
        vec![
            (Unallocated, 0, CS),
            (Data, CS, 2 * CS),
            (Unallocated, 3 * CS, 2 * CS),
            (Zero, 5 * CS, 2 * CS),
            (Unallocated, 7 * CS, 2 * CS),
            (Data, 9 * CS, CS),
            (Unallocated, 10 * CS, 6 * CS),
        ]
    );
    // A query inside a run counts from its offset, up to its length.
    assert_eq!(block_on(img.block_status(CS + 7, 10)).unwrap(), (Data, 10));
    assert_eq!(
        block_on(img.block_status(CS + 7, 4 * CS)).unwrap(),
        (Data, 2 * CS - 7)
    );
    assert_eq!(block_on(img.block_status(0, 0)).unwrap(), (Unallocated, 0));
    assert!(block_on(img.block_status(15 * CS, CS + 1)).is_err());
}

#[test]
fn backing_ends_where_the_backing_file_ends() {
    let mut img = image(8 * CS, Some("base"));
    img.attach_backing(engine::Backing::Raw(MemDev::from_bytes(vec![
        7;
        3 * CS
            as usize
    ])));
    block_on(img.write(CS, &[1; 10])).unwrap();
    use Status::*;
    assert_eq!(
        pieces(&img, false),
        vec![
            (Backing, 0, CS),
            (Data, CS, CS),
            (Backing, 2 * CS, CS),
            (Unallocated, 3 * CS, 5 * CS),
        ]
    );
    // A raw backing file is data throughout.
    assert_eq!(
        pieces(&img, true),
        vec![(Data, 0, 3 * CS), (Unallocated, 3 * CS, 5 * CS)]
    );
}

#[test]
fn a_qcow2_backing_file_is_asked_in_turn() {
    let base = image(8 * CS, None);
    block_on(async {
        base.write(0, &[1; 10]).await.unwrap();
        base.write(2 * CS, &[1; 10]).await.unwrap();
        base.write_zeroes(2 * CS, CS, false).await.unwrap();
    });
    let mut top = image(8 * CS, Some("base"));
    top.attach_backing(engine::Backing::Qcow2(Box::new(base)));
    block_on(top.write(4 * CS, &[1; 10])).unwrap();
    use Status::*;
    assert_eq!(
        pieces(&top, true),
        vec![
            (Data, 0, CS),
            (Unallocated, CS, CS),
            (Zero, 2 * CS, CS),
            (Unallocated, 3 * CS, CS),
            (Data, 4 * CS, CS),
            (Unallocated, 5 * CS, 3 * CS),
        ]
    );
}

/// A device whose data writes wait until the gate opens, so that a
/// guest write can be caught in flight.
struct GateDev {
    inner: MemDev,
    open: std::cell::Cell<bool>,
}

impl engine::dev::BlockDev for GateDev {
    async fn read(&self, o: u64, b: &mut [u8]) -> Result<(), engine::dev::DevError> {
        self.inner.read(o, b).await
    }
    async fn write(
        &self,
        o: u64,
        b: &[u8],
        f: engine::dev::WriteFlags,
    ) -> Result<(), engine::dev::DevError> {
        std::future::poll_fn(|_| {
            if self.open.get() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        self.inner.write(o, b, f).await
    }
    async fn write_zeroes(
        &self,
        o: u64,
        l: u64,
        f: engine::dev::ZeroFlags,
    ) -> Result<(), engine::dev::DevError> {
        self.inner.write_zeroes(o, l, f).await
    }
    async fn discard(&self, o: u64, l: u64) -> Result<(), engine::dev::DevError> {
        self.inner.discard(o, l).await
    }
    async fn flush(&self) -> Result<(), engine::dev::DevError> {
        self.inner.flush().await
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    async fn truncate(&self, l: u64) -> Result<(), engine::dev::DevError> {
        self.inner.truncate(l).await
    }
}

#[test]
fn an_allocation_in_flight_is_data() {
    use futures::FutureExt;
    let dev = GateDev {
        inner: MemDev::new(),
        open: std::cell::Cell::new(true),
    };
    let o = CreateOptions {
        size: 8 * CS,
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    img.device().open.set(false);
    let data = [5u8; 100];
    let mut write = Box::pin(img.write(2 * CS + 10, &data));
    assert!(write.as_mut().now_or_never().is_none(), "the write waits");
    let status = img
        .block_status(0, 8 * CS)
        .now_or_never()
        .expect("status does not wait for the write")
        .unwrap();
    assert_eq!(status, (Status::Unallocated, 2 * CS));
    let status = img
        .block_status(2 * CS, 6 * CS)
        .now_or_never()
        .unwrap()
        .unwrap();
    assert_eq!(status, (Status::Data, CS));
    img.device().open.set(true);
    block_on(write).unwrap();
    let status = block_on(img.block_status(2 * CS, 6 * CS)).unwrap();
    assert_eq!(status, (Status::Data, CS));
}
