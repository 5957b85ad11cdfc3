//! A wrapper that makes each request pending a seeded number of times
//! before passing it on, so that a plain `block_on` executor interleaves
//! concurrent engine requests differently per seed: enough to shake out
//! ordering bugs in tests that do not need the simulated disk's clock.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{BlockDev, DevError, WriteFlags, ZeroFlags};

/// A future that is pending `.0` times (waking itself each time) before it
/// is ready.
pub struct YieldN(pub u32);

impl Future for YieldN {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// `inner`, with reads, writes, zeroing and flushes delayed by 0 to 5
/// yields drawn from a ChaCha stream of `seed`.
#[derive(Debug)]
pub struct YieldDev<D> {
    pub inner: D,
    rng: RefCell<ChaCha8Rng>,
}

impl<D: BlockDev> YieldDev<D> {
    pub fn new(inner: D, seed: u64) -> Self {
        YieldDev {
            inner,
            rng: RefCell::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }

    fn delay(&self) -> YieldN {
        YieldN(self.rng.borrow_mut().gen_range(0..6))
    }
}

impl<D: BlockDev> BlockDev for YieldDev<D> {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.delay().await;
        self.inner.read(offset, buf).await
    }
    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        self.delay().await;
        self.inner.write(offset, buf, flags).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.delay().await;
        self.inner.write_zeroes(offset, len, flags).await
    }
    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        self.inner.discard(offset, len).await
    }
    async fn flush(&self) -> Result<(), DevError> {
        self.delay().await;
        self.inner.flush().await
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.inner.truncate(len).await
    }
}
