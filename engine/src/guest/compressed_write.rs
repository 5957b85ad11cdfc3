//! Compressed cluster writes: [`Image::write_compressed`], what `qemu-io
//! write -c` and `qemu-img convert -c` ask for. This module owns the
//! request's rules (whole clusters only, the last partial cluster padded
//! with zeroes; no external data file; never over a cluster that has a
//! host cluster), packing compressed clusters back to back in host
//! clusters, and linking them.
//!
//! Placement follows QEMU's byte allocator (`qcow2_alloc_bytes`), so that
//! `qemu-img check` and `map` see the same image for the same requests
//! when the compressed sizes agree: compressed data goes right after the
//! previous compressed cluster's, in the host cluster that one ended in
//! (the allocator's [`CompressedTail`]), while it fits; otherwise in a
//! new cluster, which continues the data across the boundary when it
//! happens to follow the tail cluster. Every host cluster the bytes
//! touch gains one reference, so a host cluster holding parts of three
//! compressed clusters has refcount 3, and freeing each (through
//! `release_entry`, as for any L2 entry) drops one.
//!
//! A cluster that does not compress to less than a cluster (QEMU's rule:
//! the compressor gets a cluster less one byte of room) is written through
//! the ordinary write path instead.
//!
//! Ordering. The request holds its guest cluster against every other
//! write, discard and zeroing (`begin_write`, as they do), settles any
//! allocation still in flight there (delayed COW), then under the metadata lock
//! checks the entry, gets the L2 table (allocating it first, as QEMU does)
//! and the bytes. The lock is dropped for the data write, which no other
//! request can meet: the bytes are new, and reads of neighbours packed in
//! the same host cluster touch other bytes. Only once the data write has
//! completed is the L2 entry set, under the lock again; the writeback
//! flushes before any L2 table reaches the disk, so the data is durable
//! before the entry pointing at it (the engine's data-before-link rule),
//! and the refcount increments precede both (a crash leaks, never
//! dangles). If the data write fails, the references are given back.
//!
//! An already allocated cluster is refused (`CompressedWriteError::
//! Allocated`), as QEMU's driver refuses it with EIO: replacing it would
//! mean freeing a cluster that reads may still be using under a write the
//! caller meant for fresh images; unallocated and zero clusters (with no
//! host cluster) are what a compressed write fills. The entry it replaces
//! still goes through `release_entry`, which frees nothing for those.
//!
//! Nothing here runs unless a compressed write is asked for: the ordinary
//! write path and the simulation never reach it.

use crate::alloc::allocator::CompressedTail;
use crate::broken::{self, Broken};
use crate::dev::{BlockDev, WriteFlags};
use crate::error::{CompressedWriteError, Error, Result};
use crate::format::compress;
use crate::format::entry::OFFSET_MASK;
use crate::format::{refcount, L2Entry};
use crate::guards::Guard;
use crate::image::{Image, MetaGuard};
use crate::steps::{MetaOp, OpScope, Step};

impl<D: BlockDev> Image<D> {
    /// [`Image::write_compressed`]: the implementation.
    pub(crate) async fn write_compressed_impl(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        if self.has_data_file() {
            return Err(CompressedWriteError::DataFile.into());
        }
        let len = data.len() as u64;
        self.check_request(offset, len)?;
        let cs = self.geo.cluster_size;
        let end = offset + len;
        if !offset.is_multiple_of(cs) || (!len.is_multiple_of(cs) && end != self.geo.virtual_size) {
            return Err(CompressedWriteError::Misaligned { offset, len }.into());
        }
        for (i, chunk) in data.chunks(cs as usize).enumerate() {
            self.write_compressed_cluster(offset + i as u64 * cs, chunk)
                .await?;
        }
        Ok(())
    }

    /// One cluster (or the disk's partial last one) at `off`.
    async fn write_compressed_cluster(&self, off: u64, chunk: &[u8]) -> Result<()> {
        let cs = self.geo.cluster_size;
        let mut cluster = chunk.to_vec();
        cluster.resize(cs as usize, 0);
        let kind = self.meta.read_unlocked().header.compression();
        let Some(raw) = compress::compress_cluster(kind, &cluster)? else {
            // As QEMU: what does not shrink is written as it is.
            return self.write(off, chunk).await;
        };
        let id = self.begin_write(off, off + cs).await;
        let r = self.link_compressed(off, &raw).await;
        self.end_write(id);
        r
    }

    /// Place `raw` for the guest cluster at `off` (held by the caller
    /// against other writes), write it and link it.
    async fn link_compressed(&self, off: u64, raw: &[u8]) -> Result<()> {
        let cs = self.geo.cluster_size;
        // An allocation of this cluster still in flight (delayed COW) is
        // linked first, so the entry read below is final; none can begin
        // while the caller holds the cluster.
        let mg = self.lock_with_allocs_settled(off, off + cs).await?;
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        self.refuse_allocated(&mg, off).await?;
        // The L2 table first, then the bytes: QEMU's order, which decides
        // where each lands.
        self.l2_table_for_write(&mg, off).await?;
        let len = raw.len() as u64;
        let (host, packing) = self.alloc_compressed_bytes(&mg, len).await?;
        let opened = packing.is_some();
        let bytes = (host, host + len);
        self.rules(|r| r.reserve(bytes, bytes));
        let io = self.inflight.borrow_mut().begin_io();
        // Out of the probe with the lock: other requests run meanwhile.
        drop(packing);
        drop(mg);
        // Without a data file (refused above) the image holds guest data.
        let r = self.data_write(host, raw, WriteFlags::default()).await;
        self.inflight.borrow_mut().end_io(io);
        let mg = self.meta.lock().await;
        if let Err(e) = r {
            self.rules(|r| r.release(bytes));
            self.give_back_compressed(host, len);
            return Err(e.into());
        }
        if self.is_poisoned() {
            self.rules(|r| r.release(bytes));
            self.give_back_compressed(host, len);
            return Err(Error::Poisoned);
        }
        // The data is written: the entry may now point at it.
        let _packing = opened.then(|| {
            let op = self.steps.enter(MetaOp::CompressedPacking);
            self.steps.step(Step::L2);
            op
        });
        let l2 = self.l2_table_for_write(&mg, off).await?;
        let entry = L2Entry::compressed(host, len, self.geo.cluster_bits);
        self.rules(|r| {
            r.check_link(bytes, &[]);
            r.release(bytes);
        });
        let old = self.set_l2_entry(&mg, l2, off, entry);
        debug_assert_eq!(
            old.word & OFFSET_MASK,
            0,
            "entry changed under a held cluster"
        );
        self.release_entry(old);
        if !self.opts.switches.delayed_metadata {
            self.writeback_all(&mg).await?;
        }
        Ok(())
    }

    /// QEMU's rule: a compressed write never replaces a cluster that has
    /// a host cluster (its L2 entry has offset bits set).
    async fn refuse_allocated(&self, mg: &MetaGuard<'_>, off: u64) -> Result<()> {
        let cur = self.l2_entry(mg, off).await?;
        if cur.word & OFFSET_MASK != 0 {
            return Err(CompressedWriteError::Allocated { offset: off }.into());
        }
        Ok(())
    }

    /// `len` bytes for compressed data, as QEMU's byte allocator places
    /// them (see the module comment); one reference more on each host
    /// cluster they touch. Under the metadata lock. When they open a new
    /// packing cluster, the scope of that operation
    /// (`MetaOp::CompressedPacking`) comes with them.
    async fn alloc_compressed_bytes(
        &self,
        mg: &MetaGuard<'_>,
        len: u64,
    ) -> Result<(u64, Option<OpScope>)> {
        let cs = self.geo.cluster_size;
        debug_assert!(len > 0 && len < cs);
        let mut tail = mg.borrow().alloc.compressed_tail();
        if let Some(t) = tail {
            // A cluster at the largest refcount takes no more references.
            if self.refcount(mg, t.cluster).await? >= refcount::max(self.geo.refcount_bits) {
                tail = None;
            }
        }
        let mut packing = None;
        let start = match tail {
            Some(t) if cs - t.offset % cs >= len => {
                self.add_reference(mg, t.cluster).await?;
                t.offset
            }
            _ => {
                packing = Some(self.steps.enter(MetaOp::CompressedPacking));
                // A new cluster, counted once by the allocation itself.
                let new = self.alloc_clusters(mg, 1).await?;
                match tail {
                    // Right after the tail cluster: the data starts in
                    // the tail and runs on into the new cluster.
                    Some(t) if (t.cluster + 1) * cs == new => {
                        self.guard_arose(Guard::SpillReferencesBoth);
                        if !broken::is(&self.opts, Broken::SpillForgetsFirstReference) {
                            self.add_reference(mg, t.cluster).await?;
                        }
                        t.offset
                    }
                    _ => new,
                }
            }
        };
        let end = start + len;
        let next = (!end.is_multiple_of(cs)).then_some(CompressedTail {
            cluster: end / cs,
            offset: end,
        });
        mg.borrow_mut().alloc.set_compressed_tail(next);
        Ok((start, packing))
    }

    async fn add_reference(&self, mg: &MetaGuard<'_>, cluster: u64) -> Result<()> {
        let rc = self.refcount(mg, cluster).await?;
        self.set_refcount(mg, cluster, rc + 1).await
    }

    /// Drop the references [`Image::alloc_compressed_bytes`] took for
    /// `len` bytes at `host`, which nothing links: nothing on disk points
    /// at them, so only data I/O started before now must end first.
    fn give_back_compressed(&self, host: u64, len: u64) {
        let io_seq = self.inflight.borrow().next_io_seq;
        let mut frees = self.frees.borrow_mut();
        for c in self.geo.clusters_in(host, len) {
            frees.queue_durable_free(c, io_seq);
        }
    }
}
