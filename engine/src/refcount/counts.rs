//! Reference counts: reading and updating them through the refcount block
//! cache, allocating runs of free clusters, creating refcount blocks and
//! growing the refcount table, and freeing clusters only once the metadata
//! that stopped using them is durable.
//!
//! Every function here that reads or changes refcounts takes the
//! metadata lock's guard (`MetaGuard`); queueing a free does not (see
//! `allocator::FreeQueue`).

use crate::broken::{self, Broken};
use crate::dev::{BlockDev, WriteFlags};
use crate::error::{Error, Result};
use crate::format::be64_bytes;
use crate::format::refcount;
use crate::guards::Guard;
use crate::image::{Image, MetaGuard};
use crate::ops::create_options::MAX_REFTABLE_BYTES;
use crate::rules::Dev;
use crate::steps::{MetaOp, Step};

impl<D: BlockDev> Image<D> {
    /// Host clusters for the `n` guest clusters starting at `guest_start`:
    /// with a data file their own offset (nothing to count), otherwise a
    /// new run from the refcount allocator. Also whether the run is known
    /// to read as zeroes (`grow::is_fresh`; never for a data file).
    pub(crate) async fn alloc_data_clusters(
        &self,
        mg: &MetaGuard<'_>,
        guest_start: u64,
        n: u64,
    ) -> Result<(u64, bool)> {
        if self.data.is_some() {
            return Ok((guest_start, false));
        }
        self.alloc_clusters_fresh(mg, n).await
    }

    /// Make sure the refcount block at `off` is in the cache, evicting (and
    /// writing back) another one if the cache is full.
    pub(crate) async fn load_refblock(&self, mg: &MetaGuard<'_>, off: u64) -> Result<()> {
        if mg.borrow().refs.block_cached(off) {
            return Ok(());
        }
        self.make_room_rc(mg, off).await?;
        let mut buf = vec![0u8; self.geo.cluster_size as usize];
        self.dev.read(off, &mut buf).await?;
        mg.borrow_mut().refs.insert_block(off, buf);
        Ok(())
    }

    async fn make_room_rc(&self, mg: &MetaGuard<'_>, keep: u64) -> Result<()> {
        loop {
            // A poisoned image writes nothing back: it evicts only clean
            // blocks, and keeps dirty ones past the capacity.
            let victim = {
                let m = mg.borrow();
                m.refs.block_victim(keep, self.is_poisoned())
            };
            let Some((voff, dirty)) = victim else {
                return Ok(());
            };
            self.count(|c| c.refblock_evictions += 1);
            if dirty {
                self.count(|c| c.refblock_dirty_evictions += 1);
                // An early refcount write is always safe: increments only
                // leak on a crash, and decrements are applied to the cache
                // only after the references are durably gone.
                let data = mg.borrow().refs.dirty_block(voff);
                if let Some(data) = data {
                    self.write_meta(voff, &data).await?;
                    // Not flushed here: the writeback's refcount step
                    // flushes it before any table entry pointing at it.
                    mg.borrow_mut().refs.note_block_written();
                    self.count(|c| c.refcount_writebacks += 1);
                }
            }
            mg.borrow_mut().refs.remove_block(voff);
        }
    }

    /// A metadata write; an error poisons the image. A poisoned image
    /// writes no more metadata (fail-stop): after a failed write or flush
    /// the disk may have dropped what it held (Linux may drop dirty pages
    /// at a failed fsync), so a later write relying on it, in a task that
    /// was already past its poison check, could make the image
    /// inconsistent where stopping leaves it as a crash would.
    pub(crate) async fn write_meta(&self, off: u64, data: &[u8]) -> Result<()> {
        self.write_meta_flagged(off, data, false).await
    }

    /// [`Image::write_meta`], with FUA when `fua`: durable once it
    /// completes (the last write of a FUA request's writeback, which then
    /// needs no flush after it).
    pub(crate) async fn write_meta_flagged(&self, off: u64, data: &[u8], fua: bool) -> Result<()> {
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        // Every metadata write passes here, so the crash rules that order
        // one after others are checked here, whoever writes it.
        let t = self.rules(|r| r.issue_meta(off, data));
        if !fua {
            let mut e = self.meta_epochs.get();
            e.issued += 1;
            self.meta_epochs.set(e);
        }
        let res = self.dev.write(off, data, WriteFlags { fua }).await;
        if let Some(t) = t {
            self.rules(|r| {
                if fua {
                    r.complete_fua(t, res.is_ok());
                } else {
                    r.complete(t, res.is_ok());
                }
            });
        }
        if let Err(e) = res {
            self.poison();
            return Err(e.into());
        }
        Ok(())
    }

    /// The refcount of host cluster `cluster` (0 where no block covers it).
    pub(crate) async fn refcount(&self, mg: &MetaGuard<'_>, cluster: u64) -> Result<u64> {
        let (rti, idx) = self.geo.refcount_position(cluster);
        let off = mg.borrow().refs.block_offset(rti);
        if off == 0 {
            return Ok(0);
        }
        self.load_refblock(mg, off).await?;
        Ok(mg.borrow_mut().refs.get(off, idx))
    }

    /// Set the refcount of `cluster`; its refcount block must exist.
    pub(crate) async fn set_refcount(
        &self,
        mg: &MetaGuard<'_>,
        cluster: u64,
        value: u64,
    ) -> Result<()> {
        let (rti, idx) = self.geo.refcount_position(cluster);
        let off = mg.borrow().refs.block_offset(rti);
        assert_ne!(
            off, 0,
            "set_refcount on cluster {cluster} without a refcount block"
        );
        if value > refcount::max(self.geo.refcount_bits) {
            return Err(Error::corrupt(
                format!("refcount of cluster {cluster} overflows"),
                cluster * self.geo.cluster_size,
            ));
        }
        self.load_refblock(mg, off).await?;
        mg.borrow_mut().refs.set(off, idx, value);
        self.rules(|r| r.refcount_changed(off));
        Ok(())
    }

    /// Allocate `n` contiguous free clusters, setting their refcounts to 1.
    /// Returns the host offset of the first.
    pub(crate) async fn alloc_clusters(&self, mg: &MetaGuard<'_>, n: u64) -> Result<u64> {
        Ok(self.alloc_clusters_fresh(mg, n).await?.0)
    }

    /// [`Image::alloc_clusters`], and whether the run is fresh: zeroed by
    /// growing the file and never used since, so it reads as zeroes.
    pub(crate) async fn alloc_clusters_fresh(
        &self,
        mg: &MetaGuard<'_>,
        n: u64,
    ) -> Result<(u64, bool)> {
        assert!(n > 0);
        if broken::is(&self.opts, Broken::ReuseBeforeDurable) {
            // Frees queued by the broken `queue_free` land before this
            // allocation looks for free clusters, so it may reuse them.
            self.apply_ready_frees(mg).await?;
        }
        'search: loop {
            let mut start = mg.borrow().alloc.search_start();
            let mut len = 0;
            let mut c = start;
            while len < n {
                if self.refcount(mg, c).await? == 0 {
                    self.check_not_metadata(mg, c)?;
                    len += 1;
                } else {
                    start = c + 1;
                    len = 0;
                }
                c += 1;
            }
            let first_rt = self.geo.refcount_position(start).0;
            let last_rt = self.geo.refcount_position(start + n - 1).0;
            for rti in first_rt..=last_rt {
                // QEMU's driver takes the run first and the block it needs
                // after it: the first free cluster past the run, where that
                // one lies in the range the block counts (so `qemu-img map`
                // and check's end offset agree with QEMU's).
                if self
                    .ensure_refblock_at(mg, rti, Some(start + n), &|_| false)
                    .await?
                {
                    // The new structure may sit inside the run: search again.
                    continue 'search;
                }
            }
            // The high-water mark covers the run before any refcount is
            // set: should setting one fail, the clusters already counted
            // are still below it, so growing never zeroes them and closing
            // never trims them off (they are a leak, not a reference past
            // the end of the file).
            let others_end = mg.borrow_mut().alloc.note_allocated(start + n);
            for c in start..start + n {
                self.set_refcount(mg, c, 1).await?;
            }
            mg.borrow_mut().alloc.set_search_start(start + n);
            let cs = self.geo.cluster_size;
            let (run_start, run_end) = (start * cs, (start + n) * cs);
            self.grow_for_run(mg, run_start, run_end, others_end * cs)
                .await;
            return Ok((
                run_start,
                self.is_fresh(mg, run_start, run_end, others_end * cs),
            ));
        }
    }

    /// A cluster with refcount 0 about to be handed out must not hold the
    /// header, the L1 table, the refcount table, a refcount block or an L2
    /// table: if it does, the refcounts are corrupt, and allocating it would
    /// overwrite metadata (QEMU's overlap check). The image stops taking
    /// writes.
    fn check_not_metadata(&self, mg: &MetaGuard<'_>, c: u64) -> Result<()> {
        let off = c * self.geo.cluster_size;
        if self.is_metadata_cluster(mg, off) {
            self.poison();
            return Err(Error::corrupt(
                format!("metadata cluster {c} has refcount 0 and would be allocated"),
                off,
            ));
        }
        Ok(())
    }

    /// Whether the cluster at host offset `off` holds metadata the engine
    /// knows of: the header, the L1 or refcount table, a refcount block or
    /// an L2 table of the active L1 table.
    pub(crate) fn is_metadata_cluster(&self, mg: &MetaGuard<'_>, off: u64) -> bool {
        let cs = self.geo.cluster_size;
        let m = mg.borrow();
        let h = &m.header;
        off < cs
            || crate::image::overlaps(off, cs, h.l1_table_offset, h.l1_size as u64 * 8)
            || crate::image::overlaps(
                off,
                cs,
                h.refcount_table_offset,
                h.refcount_table_clusters as u64 * cs,
            )
            || m.meta_clusters.contains(off)
    }

    /// Refuse a guest write in place into host clusters `[host, host +
    /// len)` that hold metadata: an L2 entry pointing there is corrupt, and
    /// writing would destroy what is durable.
    pub(crate) fn check_data_clusters(
        &self,
        mg: &MetaGuard<'_>,
        host: u64,
        len: u64,
    ) -> Result<()> {
        if self.has_data_file() {
            // Guest data lives in another file: nothing to overlap.
            return Ok(());
        }
        let cs = self.geo.cluster_size;
        let first = host - host % cs;
        let mut c = first;
        while c < host + len {
            if self.is_metadata_cluster(mg, c) {
                return Err(Error::corrupt(
                    format!("a data cluster of the L2 table is metadata (host offset {c:#x})"),
                    c,
                ));
            }
            c += cs;
        }
        Ok(())
    }

    /// Make sure refcount table entry `rti` points at a refcount block,
    /// creating one (and growing the table) if needed. Returns whether it
    /// allocated anything. A new block goes at `after` if that cluster
    /// lies in the range the block counts, else at the first cluster from
    /// where the search for free clusters starts that is free: one with
    /// refcount 0 under an existing block, or one in the new block's own
    /// range. `in_use` names clusters in use that no block counts yet
    /// (the dirty rebuild's, whose counts are still being set); in normal
    /// operation there are none, since every cluster in use is counted.
    pub(crate) async fn ensure_refblock_at(
        &self,
        mg: &MetaGuard<'_>,
        rti: usize,
        after: Option<u64>,
        in_use: &dyn Fn(u64) -> bool,
    ) -> Result<bool> {
        let len = mg.borrow().refs.len();
        if rti < len && mg.borrow().refs.has_block(rti) {
            return Ok(false);
        }
        if rti >= len {
            self.grow_reftable(mg, rti + 1).await?;
            return Ok(true);
        }
        let epb = self.geo.rc_entries;
        // A place for the block: a free cluster counted by an existing
        // block, or one inside the range the new block will count itself.
        let mut c = match after {
            Some(a) if self.geo.refcount_position(a).0 == rti && !in_use(a) => a,
            _ => mg.borrow().alloc.search_start(),
        };
        let loc = loop {
            let r = self.geo.refcount_position(c).0;
            if r == rti && !in_use(c) {
                self.check_not_metadata(mg, c)?;
                break c;
            }
            let has_block = mg.borrow().refs.has_block(r);
            if has_block && self.refcount(mg, c).await? == 0 {
                self.check_not_metadata(mg, c)?;
                break c;
            }
            c += 1;
            if c >= (rti as u64 + 1) * epb {
                return Err(Error::corrupt(
                    "no place for a refcount block",
                    c * self.geo.cluster_size,
                ));
            }
        };
        let cs = self.geo.cluster_size;
        let mut block = vec![0u8; cs as usize];
        let (loc_rt, loc_idx) = self.geo.refcount_position(loc);
        self.guard_arose(Guard::RefblockCountsItself);
        if broken::is(&self.opts, Broken::RefblockForgetsItself) {
            // Deliberately wrong: the block's own cluster stays at 0.
        } else if loc_rt == rti {
            refcount::set(&mut block, self.geo.refcount_bits, loc_idx, 1);
        } else {
            self.set_refcount(mg, loc, 1).await?;
        }
        self.make_room_rc(mg, loc * cs).await?;
        let mut m = mg.borrow_mut();
        m.refs.add_block(rti, loc * cs, block);
        m.meta_clusters.insert(loc * cs);
        m.alloc.note_allocated(loc + 1);
        drop(m);
        self.rules(|r| r.refblock_added(loc * cs));
        self.count(|c| c.refblocks_created += 1);
        Ok(true)
    }

    /// Replace the refcount table with a larger one of at least
    /// `min_entries`, placed at the end of the image together with the
    /// refcount blocks needed to count it. Written and made durable before
    /// it returns: the header switch must never point at a table whose
    /// blocks are not on disk.
    async fn grow_reftable(&self, mg: &MetaGuard<'_>, min_entries: usize) -> Result<()> {
        let _op = self.steps.enter(MetaOp::ReftableGrowth);
        let cs = self.geo.cluster_size;
        let per_cluster = (cs / 8) as usize;
        let (old, start) = {
            let m = mg.borrow();
            (m.refs.table().to_vec(), m.alloc.end_cluster())
        };
        let mut new_len = min_entries.max(old.len() * 2).next_multiple_of(per_cluster);
        let (t, blocks) = loop {
            let t = (new_len / per_cluster) as u64;
            let mut b = 0u64;
            let mut blocks;
            loop {
                let end = start + t + b;
                let (r0, r1) = (
                    self.geo.refcount_position(start).0,
                    self.geo.refcount_position(end - 1).0,
                );
                blocks = (r0..=r1)
                    .filter(|&r| old.get(r).is_none_or(|&o| o == 0))
                    .collect::<Vec<_>>();
                if blocks.len() as u64 == b {
                    break;
                }
                b = blocks.len() as u64;
            }
            let max_r = self.geo.refcount_position(start + t + b - 1).0;
            if max_r < new_len && new_len >= min_entries {
                break (t, blocks);
            }
            new_len = (max_r + 1).max(min_entries).next_multiple_of(per_cluster);
        };
        if t * cs > MAX_REFTABLE_BYTES {
            return Err(Error::Unsupported(
                "the refcount table would exceed 8 MiB".into(),
            ));
        }
        let b = blocks.len() as u64;
        // Covered by the high-water mark before anything is written there
        // (see alloc_clusters_fresh).
        mg.borrow_mut().alloc.note_allocated(start + t + b);
        let table_off = start * cs;
        let mut table = old.clone();
        table.resize(new_len, 0);
        for (i, &r) in blocks.iter().enumerate() {
            table[r] = (start + t + i as u64) * cs;
        }
        // Count the new table and blocks, in the new blocks or old ones.
        self.guard_arose(Guard::GrowthCountsItself);
        let mut new_blocks: Vec<(u64, Vec<u8>)> = blocks
            .iter()
            .map(|&r| (table[r], vec![0u8; cs as usize]))
            .collect();
        for c in start..start + t + b {
            if broken::is(&self.opts, Broken::GrowthForgetsNewBlocks) {
                // Deliberately wrong: the new table and blocks are left at
                // refcount 0.
                continue;
            }
            let (r, idx) = self.geo.refcount_position(c);
            if let Some(pos) = blocks.iter().position(|&x| x == r) {
                refcount::set(&mut new_blocks[pos].1, self.geo.refcount_bits, idx, 1);
            } else {
                self.set_refcount(mg, c, 1).await?;
            }
        }
        for (off, data) in &new_blocks {
            self.write_meta(*off, data).await?;
        }
        self.write_dirty_refblocks(mg).await?;
        self.write_meta(table_off, &be64_bytes(&table)).await?;
        self.steps.step(Step::Table);
        self.guard_arose(Guard::ReftableBeforeHeader);
        if !broken::is(&self.opts, Broken::HeaderBeforeReftable) {
            self.device_flush(mg).await?;
        }
        let (old_off, old_clusters) = {
            let mut m = mg.borrow_mut();
            let old = (
                m.header.refcount_table_offset,
                m.header.refcount_table_clusters as u64,
            );
            m.header.refcount_table_offset = table_off;
            m.header.refcount_table_clusters = t as u32;
            m.meta_clusters
                .insert_all(table.iter().copied().filter(|&o| o != 0));
            m.refs.replace_table(table);
            old
        };
        self.steps.step(Step::Header);
        self.write_header(mg).await?;
        self.device_flush(mg).await?;
        self.count(|c| {
            c.reftable_growths += 1;
            c.refblocks_created += b;
        });
        // Nothing on disk references the old table any more.
        for c in old_off / cs..old_off / cs + old_clusters {
            self.set_refcount(mg, c, 0).await?;
        }
        // Never the packing tail: the old table held no compressed data.
        mg.borrow_mut().alloc.note_free(old_off / cs);
        Ok(())
    }

    /// Write every dirty refcount block (no flush).
    pub(crate) async fn write_dirty_refblocks(&self, mg: &MetaGuard<'_>) -> Result<bool> {
        let dirty = mg.borrow().refs.dirty_blocks();
        for (off, data) in &dirty {
            self.write_meta(*off, data).await?;
            let mut m = mg.borrow_mut();
            m.refs.mark_block_clean(*off, data);
            m.refs.note_block_written();
            drop(m);
            self.count(|c| c.refcount_writebacks += 1);
        }
        Ok(!dirty.is_empty())
    }

    /// A device flush the engine needed, counted.
    pub(crate) async fn device_flush(&self, mg: &MetaGuard<'_>) -> Result<()> {
        self.count(|c| c.device_flushes += 1);
        let mark = mg.borrow().refs.flush_mark();
        let meta_mark = self.meta_epochs.get().issued;
        // Guest data in a data file must be durable before the metadata
        // written after this flush can point at it.
        if self.data.is_some() {
            self.guard_arose(Guard::DataFileFlushFirst);
            let skip = broken::is(&self.opts, Broken::SkipDataFileFlush);
            let r = if skip {
                Ok(())
            } else {
                self.flush_dev(Dev::Data).await
            };
            if let Err(e) = r {
                self.poison();
                return Err(e.into());
            }
        }
        if let Err(e) = self.flush_dev(Dev::Image).await {
            self.poison();
            return Err(e.into());
        }
        mg.borrow_mut().refs.note_flushed(mark);
        let mut e = self.meta_epochs.get();
        e.durable = e.durable.max(meta_mark);
        self.meta_epochs.set(e);
        Ok(())
    }

    /// Drop a reference to `cluster` once the metadata change that removed
    /// it is durable and no data I/O started before now can touch it.
    pub(crate) fn queue_free(&self, cluster: u64) {
        let io_seq = self.inflight.borrow().next_io_seq;
        self.rules(|r| r.free_queued(cluster, io_seq, false));
        self.guard_arose(Guard::FreeAfterDurable);
        if broken::is(&self.opts, Broken::ReuseBeforeDurable) {
            return self.broken_free_at_once(cluster);
        }
        self.frees.borrow_mut().queue_free(cluster, io_seq);
    }

    /// [`Image::queue_free`] each cluster of the table of `len` bytes at
    /// `off` (none at offset 0) that nothing on disk names any more.
    pub(crate) fn free_table_clusters(&self, off: u64, len: u64) {
        if off == 0 || len == 0 {
            return;
        }
        for c in self.geo.clusters_in(off, len) {
            self.queue_free(c);
        }
    }

    /// Apply the frees whose metadata is durable and whose cluster no
    /// in-flight I/O can still touch.
    pub(crate) async fn apply_ready_frees(&self, mg: &MetaGuard<'_>) -> Result<()> {
        let oldest_io = if broken::is(&self.opts, Broken::FreeIgnoresInflightIo) {
            // Deliberately wrong: as if no data I/O were in flight.
            None
        } else {
            self.inflight.borrow().oldest_io()
        };
        let (ready, held) = self.frees.borrow_mut().take_ready_frees(oldest_io);
        self.guard_arose_times(Guard::FreeAfterInflightIo, held);
        for cluster in ready {
            // Judged against the I/O really in flight, whatever the
            // decision above was told.
            self.rules(|r| r.free_applied(cluster, self.inflight.borrow().oldest_io()));
            let rc = self.refcount(mg, cluster).await?;
            if rc == 0 {
                return Err(Error::corrupt(
                    format!("freeing cluster {cluster} whose refcount is already 0"),
                    cluster * self.geo.cluster_size,
                ));
            }
            self.set_refcount(mg, cluster, rc - 1).await?;
            if rc == 1 {
                self.rules(|r| r.cluster_freed(cluster * self.geo.cluster_size));
                let mut m = mg.borrow_mut();
                if let Some(tail) = m.alloc.note_free(cluster) {
                    self.guard_arose(Guard::FreeForgetsPackingTail);
                    if broken::is(&self.opts, Broken::FreeKeepsPackingTail) {
                        // Deliberately wrong: packing goes on in a free
                        // cluster.
                        m.alloc.set_compressed_tail(Some(tail));
                    }
                }
                m.meta_clusters.remove(cluster * self.geo.cluster_size);
            }
        }
        Ok(())
    }
}
