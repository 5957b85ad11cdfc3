//! Changing the virtual size (`Image::resize`, what `qemu-img resize`
//! does to a qcow2 image).
//!
//! Growing may need a larger L1 table. It is never extended in place: a
//! new table is allocated, written with the old entries and zeroes after
//! them, and made durable together with the refcounts that count it; only
//! then does the header point at it (and carry the new size), and only
//! once that header is durable is the old table freed. A crash at any
//! point leaves either the old header, table and size (the new table a
//! leak) or the new ones (the old table a leak), never a header naming a
//! table that is not on disk. This is the order `refcount::grow_reftable`
//! keeps for the refcount table.
//!
//! Shrinking drops every cluster past the new end (their L2 entries become
//! unallocated and the clusters are freed once that is durable), then the
//! L2 tables no longer needed (L1 entries cleared and durable first), then
//! writes the new size. The L1 table keeps its length, as QEMU's does:
//! a table longer than the size needs is valid.
//!
//! Growing an image whose backing file is longer than the old size makes
//! the new range read as zeroes rather than the backing file's data (the
//! partial cluster at the old end written with zeroes, whole clusters made
//! zero clusters), as QEMU does; without a backing file the new range
//! already reads as zeroes, except what a partial last cluster kept, which
//! QEMU leaves too.
//!
//! Internal snapshots keep their own size (each entry records it) and
//! their own L1 tables, so resizing the active disk leaves them alone, as
//! QEMU's resize does: shrinking releases the active table's references
//! only (a cluster or L2 table shared with a snapshot is copied before an
//! entry in it changes, and its refcount drops by one).
//!
//! Resizing takes `&mut self`: no guest request can be in flight, and
//! the geometry changes with the size.

use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::format::{be64_bytes, L1Entry};
use crate::image::{Backing, Image, MAX_L1_BYTES};
use crate::steps::{MetaOp, Step};

impl<D: BlockDev> Image<D> {
    /// [`Image::resize`]: the implementation.
    pub(crate) async fn resize_impl(&mut self, new_size: u64) -> Result<()> {
        self.check_writable()?;
        if !new_size.is_multiple_of(512) {
            return Err(Error::InvalidOption {
                name: "size".into(),
                reason: "the new size must be a multiple of 512".into(),
            });
        }
        if self.has_data_file() {
            return Err(Error::Unsupported(
                "resizing an image with an external data file".into(),
            ));
        }
        // A version 2 snapshot entry has no field for its disk size: it
        // takes the header's, which a resize would change under it.
        if self.geo.version < 3 && self.meta.get_mut().header.nb_snapshots > 0 {
            return Err(Error::ResizeV2WithSnapshots);
        }
        let old_size = self.geo.virtual_size;
        // Everything pending first: the tables below are then the disk's.
        self.flush_internal(false).await?;
        // A shrink runs until its header is durable (`set_size`).
        let _shrink = (new_size < old_size).then(|| self.steps.enter(MetaOp::Shrink));
        if new_size < old_size {
            self.shrink_tables(new_size).await?;
        }
        self.set_size(new_size).await?;
        if new_size > old_size {
            self.zero_grown_range(old_size, new_size).await?;
        }
        Ok(())
    }

    /// Drop the clusters and L2 tables past `new_size`.
    async fn shrink_tables(&self, new_size: u64) -> Result<()> {
        let cs = self.geo.cluster_size;
        let old_end = self.geo.virtual_size.next_multiple_of(cs);
        let start = new_size.next_multiple_of(cs);
        let keep = self.geo.l1_entries_for(new_size) as usize;
        if start < old_end && self.geo.offset_to_l1_index(start) < keep {
            // QEMU's driver drops the range through the L2 table that maps
            // its start, made writable first (allocated if missing, copied
            // if a snapshot shares it) even when no entry in it changes:
            // the same cluster is taken here, so that the file after a
            // shrink is laid out as QEMU's is.
            let mg = self.meta.lock().await;
            self.l2_table_for_write(&mg, start).await?;
        }
        if start < old_end {
            self.unmap_clusters(start, old_end, crate::guest::discard::Unmap::Unallocated)
                .await?;
        }
        let mg = self.meta.lock().await;
        // The L2 entries just cleared are durable (and their clusters
        // freed) before an L1 entry stops pointing at their table.
        self.steps.step(Step::L2);
        self.writeback_all(&mg).await?;
        let l1_len = mg.borrow().tables.l1().len();
        for i in keep..l1_len {
            let l2 = mg.borrow().tables.l1_entry(i).l2_offset();
            if l2 == 0 {
                continue;
            }
            self.rules(|r| r.l1_changed(i));
            let mut m = mg.borrow_mut();
            m.tables.set_l1_entry(i, L1Entry(0));
            // Nothing references the table once the entry is written: its
            // cached copy must never be written back over a reused cluster.
            m.tables.remove_l2(l2);
            drop(m);
            self.queue_free(l2 / cs);
        }
        // The cleared L1 entries durable, then the tables freed.
        self.steps.step(Step::L1);
        self.writeback_all(&mg).await
    }

    /// Point the header at an L1 table long enough for `new_size` (a new
    /// one if the current one is too short) and record the size.
    async fn set_size(&mut self, new_size: u64) -> Result<()> {
        let needed = self.geo.l1_entries_for(new_size);
        if needed * 8 > MAX_L1_BYTES {
            return Err(Error::MetadataLimit {
                what: format!("an L1 table for {new_size} bytes"),
                needed: needed * 8,
                limit: MAX_L1_BYTES,
            });
        }
        self.switch_l1(needed, new_size).await?;
        self.geo.virtual_size = new_size;
        Ok(())
    }

    /// Point the header at an L1 table of at least `needed` entries (a
    /// new one, with the old entries, if the current one is shorter) and
    /// at the size `new_size`, in one header write; the old table freed
    /// once that is durable. Does not change `geo`: the caller does.
    pub(crate) async fn switch_l1(&self, needed: u64, new_size: u64) -> Result<()> {
        let cs = self.geo.cluster_size;
        let mg = self.meta.lock().await;
        // Every table written back first, in order: the new table copies
        // the L1 entries, and one naming an L2 table not yet durable must
        // not reach the disk in it (a caller without `&mut self` may have
        // writes linking until the lock is taken).
        self.writeback_all(&mg).await?;
        let (old_off, old_len) = {
            let h = &mg.borrow().header;
            (h.l1_table_offset, h.l1_size as u64)
        };
        let _growth = (needed > old_len).then(|| self.steps.enter(MetaOp::L1Growth));
        if needed > old_len {
            let clusters = (needed * 8).div_ceil(cs);
            let new_off = self.alloc_clusters(&mg, clusters).await?;
            let mut table = mg.borrow().tables.l1().to_vec();
            table.resize((clusters * cs / 8) as usize, 0);
            self.write_meta(new_off, &be64_bytes(&table)).await?;
            // The new table and the refcounts that count it (with any
            // refcount block, and table entry, the allocation created) are
            // durable before the header names it; under lazy refcounts the
            // dirty bit stands in for them.
            self.ensure_dirty_bit(&mg).await?;
            self.writeback_refcount_phase(&mg).await?;
            self.steps.step(Step::Table);
            self.device_flush(&mg).await?;
            table.truncate(needed as usize);
            let mut m = mg.borrow_mut();
            m.header.l1_table_offset = new_off;
            m.header.l1_size = needed as u32;
            m.header.size = new_size;
            m.tables.replace_l1(table);
        } else {
            mg.borrow_mut().header.size = new_size;
        }
        self.steps.step(Step::Header);
        self.write_header(&mg).await?;
        self.device_flush(&mg).await?;
        if needed > old_len && old_off != 0 {
            // No header on disk names the old table any more.
            self.free_table_clusters(old_off, old_len * 8);
            self.steps.step(Step::OldFreed);
            self.writeback_all(&mg).await?;
        }
        Ok(())
    }

    /// After growing from `old_size`: where a backing file longer than the
    /// old size would show through, make the new range read as zeroes.
    async fn zero_grown_range(&self, old_size: u64, new_size: u64) -> Result<()> {
        let backing_len = match &self.backing {
            None => return Ok(()),
            Some(Backing::Raw(d)) => d.len(),
            Some(Backing::Qcow2(i)) => i.virtual_size(),
        };
        if backing_len <= old_size {
            return Ok(());
        }
        self.write_zeroes(old_size, new_size - old_size, false)
            .await?;
        self.flush_internal(false).await
    }
}
