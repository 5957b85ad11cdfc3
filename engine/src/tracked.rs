//! Writes and flushes of guest data, COW and growth that the crash rules'
//! ledger (`rules`) sees: each wraps one device request, telling the ledger
//! when it is issued and when it completed. Metadata writes and device
//! flushes reach the ledger the same way from `refcount` (`write_meta`,
//! `device_flush`). In a release build each is the bare request.

use crate::dev::{BlockDev, DevError, WriteFlags, ZeroFlags};
use crate::image::Image;
use crate::rules::{Dev, Kind};

impl<D: BlockDev> Image<D> {
    /// The device `dev` names.
    fn device_of(&self, dev: Dev) -> &D {
        match dev {
            Dev::Image => &self.dev,
            Dev::Data => self.data_dev(),
        }
    }

    /// Write guest data (or COW) at `off` on the data device.
    pub(crate) async fn data_write(
        &self,
        off: u64,
        buf: &[u8],
        flags: WriteFlags,
    ) -> Result<(), DevError> {
        let t = self.rules(|r| r.issue(Dev::Data, off, buf.len() as u64, Kind::Data));
        let res = self.data_dev().write(off, buf, flags).await;
        if let Some(t) = t {
            self.rules(|r| r.complete(t, res.is_ok()));
        }
        res
    }

    /// Zero `len` bytes at `off` on `dev`, for guest data (`Kind::Data`)
    /// or growing the file (`Kind::Growth`).
    pub(crate) async fn zeroes_write(
        &self,
        dev: Dev,
        kind: Kind,
        off: u64,
        len: u64,
        flags: ZeroFlags,
    ) -> Result<(), DevError> {
        let t = self.rules(|r| r.issue(dev, off, len, kind));
        let res = self.device_of(dev).write_zeroes(off, len, flags).await;
        if let Some(t) = t {
            self.rules(|r| r.complete(t, res.is_ok()));
        }
        res
    }

    /// Flush `dev`, noting what the flush made durable.
    pub(crate) async fn flush_dev(&self, dev: Dev) -> Result<(), DevError> {
        let mark = self.rules(|r| r.flush_mark(dev));
        let res = self.device_of(dev).flush().await;
        if let (Some(m), Ok(())) = (mark, &res) {
            self.rules(|r| r.flushed(dev, m));
        }
        res
    }
}
