//! Guest requests flagged FUA (force unit access): a write, write_zeroes
//! or discard that must be durable when it completes, with every metadata
//! change needed to read it back (its data, the refcounts behind a new
//! cluster, its L2 entry, a new L2 table's L1 entry).
//!
//! The request runs as its unflagged kind, then what it left volatile is
//! made durable before it returns: the allocations it made are committed
//! and the metadata written back in the crash rules' order.

use crate::dev::BlockDev;
use crate::error::Result;
use crate::image::Image;

impl<D: BlockDev> Image<D> {
    /// [`Image::write_fua`]: the implementation.
    pub(crate) async fn write_fua_impl(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.count(|c| c.guest_fua_requests += 1);
        self.write_impl(offset, buf).await?;
        self.sync_for_fua().await
    }

    /// [`Image::write_zeroes_fua`]: the implementation.
    pub(crate) async fn write_zeroes_fua_impl(
        &self,
        offset: u64,
        len: u64,
        unmap: bool,
    ) -> Result<()> {
        self.count(|c| c.guest_fua_requests += 1);
        self.write_zeroes_impl(offset, len, unmap).await?;
        self.sync_for_fua().await
    }

    /// [`Image::discard_fua`]: the implementation.
    pub(crate) async fn discard_fua_impl(&self, offset: u64, len: u64) -> Result<()> {
        self.count(|c| c.guest_fua_requests += 1);
        self.discard_impl(offset, len).await?;
        self.sync_for_fua().await
    }

    /// Make a completed FUA request durable: as QEMU's block layer
    /// emulates FUA for a driver that does not offer it, a flush after
    /// the request (which commits every pending allocation and writes the
    /// metadata back in order).
    async fn sync_for_fua(&self) -> Result<()> {
        let before = self.counters.borrow().device_flushes;
        let r = self.flush_internal(false).await;
        let flushes = self.counters.borrow().device_flushes - before;
        self.count(|c| c.fua_flushes += flushes);
        r
    }
}
