//! Block status: what a guest byte range is made of (data in this image,
//! zero clusters, nothing, or the backing file's data), so that a copy can
//! read only what holds data, as QEMU's `bdrv_block_status` lets
//! `qemu-img convert` and `qemu-img map` do.
//!
//! Built on `map_run` under the metadata lock, so the answer is one consistent
//! view of the metadata. A cluster whose allocation is still in flight (not
//! yet linked into its L2 table) is reported as data: a write is putting
//! data there, and what is not written yet is pending COW that a reader
//! would have to copy anyway.

use crate::cluster::mapping::Run;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::guest::status::Status;
use crate::image::{Backing, Image, MetaGuard};

impl<D: BlockDev> Image<D> {
    /// [`Image::block_status`]: the implementation.
    pub(crate) async fn block_status_impl(&self, offset: u64, len: u64) -> Result<(Status, u64)> {
        self.check_request(offset, len)?;
        if len == 0 {
            return Ok((Status::Unallocated, 0));
        }
        let mg = self.meta.lock().await;
        let end = offset + len;
        let (status, mut pos) = {
            let (s, n) = self.status_piece(&mg, offset, len).await?;
            (s, offset + n)
        };
        while pos < end {
            let (s, n) = self.status_piece(&mg, pos, end - pos).await?;
            if s != status {
                break;
            }
            pos += n;
        }
        Ok((status, pos - offset))
    }

    /// [`Image::block_status_deep`]: the implementation.
    pub(crate) async fn block_status_deep_impl(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<(Status, u64)> {
        let (status, n) = self.block_status(offset, len).await?;
        if status != Status::Backing {
            return Ok((status, n));
        }
        match self
            .backing
            .as_ref()
            .expect("Backing status implies a backing file")
        {
            Backing::Raw(_) => Ok((Status::Data, n)),
            // `block_status` clipped `n` to the backing image's size.
            Backing::Qcow2(img) => Box::pin(img.block_status_deep(offset, n)).await,
        }
    }

    /// One piece of the range at `off`, at most `max` bytes: a run from
    /// `map_run`, or the part of an in-flight allocation.
    async fn status_piece(&self, mg: &MetaGuard<'_>, off: u64, max: u64) -> Result<(Status, u64)> {
        let limit = {
            let inf = self.inflight.borrow();
            if let Some(id) = inf.allocs.at(off) {
                let a = inf.allocs.alloc(id);
                return Ok((Status::Data, (a.end() - off).min(max)));
            }
            inf.allocs
                .next_start_after(off)
                .map_or(max, |next| (next - off).min(max))
        };
        let (run, n) = self.map_run(mg, off, limit).await?;
        Ok(match run {
            Run::Data { .. } | Run::Compressed { .. } => (Status::Data, n),
            Run::Zero => (Status::Zero, n),
            Run::Unallocated => self.unallocated_status(off, n),
        })
    }

    /// Unallocated clusters read from the backing file as far as it goes.
    fn unallocated_status(&self, off: u64, n: u64) -> (Status, u64) {
        let backing_size = match &self.backing {
            None => return (Status::Unallocated, n),
            Some(Backing::Raw(dev)) => dev.len(),
            Some(Backing::Qcow2(img)) => img.virtual_size(),
        };
        if off >= backing_size {
            (Status::Unallocated, n)
        } else {
            (Status::Backing, n.min(backing_size - off))
        }
    }
}
