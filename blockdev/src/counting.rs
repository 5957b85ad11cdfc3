//! A [`BlockDev`] wrapper that counts the requests and bytes that pass
//! through it, for devices that keep no counts of their own (a real file):
//! the real-file benchmark reports these next to the engine's counters, and
//! tests use them to prove that a job did not touch what it should skip.
//!
//! The counts live in `Cell`s: the engine is single-threaded, so a request
//! is counted on the thread that issues it, when it is issued (a request
//! that later fails is still counted).

use std::cell::Cell;

use crate::{BlockDev, DevError, WriteFlags, ZeroFlags};
use serde::Serialize;

/// What went through a [`CountingDev`] since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DevCounts {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    pub write_zeroes: u64,
    pub bytes_zeroed: u64,
    pub discards: u64,
    pub flushes: u64,
}

impl DevCounts {
    /// Every request of any kind (reads, writes, zeroing, discards, flushes).
    pub fn requests(&self) -> u64 {
        self.reads + self.writes + self.write_zeroes + self.discards + self.flushes
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &DevCounts) -> DevCounts {
        DevCounts {
            reads: self.reads - earlier.reads,
            bytes_read: self.bytes_read - earlier.bytes_read,
            writes: self.writes - earlier.writes,
            bytes_written: self.bytes_written - earlier.bytes_written,
            write_zeroes: self.write_zeroes - earlier.write_zeroes,
            bytes_zeroed: self.bytes_zeroed - earlier.bytes_zeroed,
            discards: self.discards - earlier.discards,
            flushes: self.flushes - earlier.flushes,
        }
    }
}

/// `inner`, with every request counted.
#[derive(Debug)]
pub struct CountingDev<D> {
    inner: D,
    counts: Cell<DevCounts>,
}

impl<D: BlockDev> CountingDev<D> {
    pub fn new(inner: D) -> Self {
        CountingDev {
            inner,
            counts: Cell::new(DevCounts::default()),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> DevCounts {
        self.counts.get()
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn into_inner(self) -> D {
        self.inner
    }

    fn count(&self, f: impl FnOnce(&mut DevCounts)) {
        let mut c = self.counts.get();
        f(&mut c);
        self.counts.set(c);
    }
}

impl<D: BlockDev> BlockDev for CountingDev<D> {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.count(|c| {
            c.reads += 1;
            c.bytes_read += buf.len() as u64;
        });
        self.inner.read(offset, buf).await
    }

    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        self.count(|c| {
            c.writes += 1;
            c.bytes_written += buf.len() as u64;
        });
        self.inner.write(offset, buf, flags).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.count(|c| {
            c.write_zeroes += 1;
            c.bytes_zeroed += len;
        });
        self.inner.write_zeroes(offset, len, flags).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        self.count(|c| c.discards += 1);
        self.inner.discard(offset, len).await
    }

    async fn flush(&self) -> Result<(), DevError> {
        self.count(|c| c.flushes += 1);
        self.inner.flush().await
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.inner.truncate(len).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDev;

    #[test]
    fn counts_each_kind_of_request() {
        let dev = CountingDev::new(MemDev::new());
        futures::executor::block_on(async {
            dev.write(0, &[1; 100], WriteFlags::default())
                .await
                .unwrap();
            dev.write(100, &[2; 50], WriteFlags::default())
                .await
                .unwrap();
            let mut buf = [0u8; 30];
            dev.read(90, &mut buf).await.unwrap();
            assert_eq!(&buf[..10], &[1; 10]);
            assert_eq!(&buf[10..], &[2; 20]);
            dev.write_zeroes(0, 10, ZeroFlags::default()).await.unwrap();
            dev.discard(0, 10).await.unwrap();
            dev.flush().await.unwrap();
        });
        let before = DevCounts::default();
        let c = dev.counts().since(&before);
        assert_eq!((c.writes, c.bytes_written), (2, 150));
        assert_eq!((c.reads, c.bytes_read), (1, 30));
        assert_eq!((c.write_zeroes, c.bytes_zeroed), (1, 10));
        assert_eq!((c.discards, c.flushes), (1, 1));
        assert_eq!(c.requests(), 6);
    }
}
