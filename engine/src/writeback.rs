//! Metadata writeback in crash-safe order (seed 003's delayed metadata):
//!
//! 1. refcount blocks, then a device flush (this also makes the data of
//!    completed writes durable), then the refcount table if it changed,
//!    and a flush;
//! 2. L2 tables, then a flush; the L1 entries that changed, then a flush;
//! 3. the header, if it changed;
//! 4. only now are the frees recorded before step 2 durable: their
//!    refcounts drop, and the clusters may be reused.
//!
//! With `delayed_metadata` off this runs after every allocation, before the
//! guest write completes (the naive engine the seeds started from); with it
//! on, at guest flush, close, and (in part) cache eviction. With lazy
//! refcounts the refcount step is skipped: the dirty bit is made durable
//! before the first L2 write instead, and refcounts are rebuilt after a
//! crash.
//!
//! Every function here but `flush` and `flush_internal` (which take the
//! lock) takes the metadata lock's guard (`MetaGuard`).

use crate::broken::{self, Broken};
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::format::header::incompat;
use crate::guards::Guard;
use crate::image::{Image, MetaGuard};

impl<D: BlockDev> Image<D> {
    /// [`Image::flush`]: the implementation.
    pub(crate) async fn flush_impl(&self) -> Result<()> {
        self.count(|c| c.guest_flushes += 1);
        if self.opts.read_only {
            return Ok(());
        }
        self.check_writable()?;
        let completed = self.rules(|r| r.completed());
        self.flush_internal(false).await?;
        if let Some(marks) = completed {
            self.rules(|r| {
                r.check_durable(marks, "guest flush makes the writes before it durable")
            });
        }
        Ok(())
    }

    /// Step 1 alone: make refcount changes durable. Returns whether it
    /// flushed. Skipped under lazy refcounts.
    pub(crate) async fn writeback_refcount_phase(&self, mg: &MetaGuard<'_>) -> Result<bool> {
        if mg.borrow().refs.lazy() {
            return Ok(false);
        }
        let mut flushed = false;
        self.write_dirty_refblocks(mg).await?;
        // Blocks written here, and blocks an eviction wrote since the last
        // flush (`make_room_rc` writes without one): durable before the
        // table entries and L2 entries that rely on them.
        if mg.borrow().refs.blocks_volatile() {
            self.guard_arose(Guard::RefcountFlushBeforeL2);
            // The broken variant skips the flush but reports it done, so
            // that the caller's own ordering flush is skipped too.
            if !broken::is(&self.opts, Broken::SkipRefcountFlush) {
                self.device_flush(mg).await?;
            }
            flushed = true;
        }
        if mg.borrow().refs.table_dirty() {
            let (off, table) = {
                let m = mg.borrow();
                (m.header.refcount_table_offset, m.refs.table_bytes())
            };
            self.write_meta(off, &table).await?;
            mg.borrow_mut().refs.mark_table_clean();
            self.guard_arose(Guard::ReftableFlushBeforeL2);
            if !broken::is(&self.opts, Broken::SkipReftableFlush) {
                self.device_flush(mg).await?;
            }
            flushed = true;
        }
        Ok(flushed)
    }

    /// Under lazy refcounts, set the dirty bit durably before anything that
    /// relies on it reaches the disk.
    pub(crate) async fn ensure_dirty_bit(&self, mg: &MetaGuard<'_>) -> Result<()> {
        let need = {
            let m = mg.borrow();
            m.refs.lazy() && !m.dirty_on_disk
        };
        if need {
            self.guard_arose(Guard::DirtyBitBeforeL2);
            if broken::is(&self.opts, Broken::NoDirtyBit) {
                return Ok(());
            }
            mg.borrow_mut().header.incompatible_features |= incompat::DIRTY;
            self.write_header(mg).await?;
            self.device_flush(mg).await?;
            mg.borrow_mut().dirty_on_disk = true;
        }
        Ok(())
    }

    /// The whole ordered writeback. Always ends with every completed guest
    /// write and every metadata change durable.
    pub(crate) async fn writeback_all(&self, mg: &MetaGuard<'_>) -> Result<()> {
        self.writeback_ordered(mg, false).await
    }

    /// [`Image::writeback_all`] for a FUA request: the writes that end it
    /// (the L2 tables when no L1 entry follows them, the L1 sectors, the
    /// header) go with FUA instead of a flush after them.
    pub(crate) async fn writeback_all_fua(&self, mg: &MetaGuard<'_>) -> Result<()> {
        self.writeback_ordered(mg, true).await
    }

    async fn writeback_ordered(&self, mg: &MetaGuard<'_>, fua: bool) -> Result<()> {
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        let frees_before = self.frees.borrow().queued_frees();
        let mut flushed_last = self.writeback_refcount_phase(mg).await?;
        let (l2_dirty, l1_dirty) = {
            let m = mg.borrow();
            (m.tables.l2_has_dirty(), m.tables.l1_has_dirty())
        };
        if l2_dirty || l1_dirty {
            self.before_l2_writes(mg, flushed_last).await?;
            let tables = mg.borrow().tables.dirty_l2_tables();
            // Nothing changes the L1 table while the lock is held.
            let dirty_l1 = mg.borrow().tables.dirty_l1();
            let l1_follows = !dirty_l1.is_empty();
            // Written last (no L1 entry after them) by a FUA request:
            // each durable as it completes, no flush after.
            let tables_fua = fua && !l1_follows;
            self.write_l2_tables(mg, &tables, tables_fua).await?;
            if !tables.is_empty() && !tables_fua {
                // The L2 tables before the L1 entries that point at them.
                if l1_follows {
                    self.guard_arose(Guard::L2FlushBeforeL1);
                }
                if !(l1_follows && broken::is(&self.opts, Broken::SkipL2Flush)) {
                    self.device_flush(mg).await?;
                }
            }
            if !dirty_l1.is_empty() {
                self.write_l1_entries(mg, &dirty_l1, fua).await?;
                if !fua {
                    self.device_flush(mg).await?;
                }
            }
            flushed_last = true;
        }
        if mg.borrow().header_dirty {
            self.write_header_flagged(mg, fua).await?;
            if !fua {
                self.device_flush(mg).await?;
            }
            flushed_last = true;
        }
        if !flushed_last {
            // No metadata to write, but completed guest writes (in place,
            // or into clusters linked earlier) must still become durable.
            self.guard_arose(Guard::FlushWhenClean);
            if !broken::is(&self.opts, Broken::FlushSkipsWhenClean) {
                self.device_flush(mg).await?;
            }
        }
        self.frees.borrow_mut().mark_durable(frees_before);
        self.apply_ready_frees(mg).await
    }

    /// What must be durable before an L2 table is written: the dirty bit
    /// under lazy refcounts, and (unless the refcount step just
    /// `flushed`) the data of completed writes.
    pub(crate) async fn before_l2_writes(&self, mg: &MetaGuard<'_>, flushed: bool) -> Result<()> {
        self.ensure_dirty_bit(mg).await?;
        if !flushed {
            // Data before the L2 entries that point at it.
            self.guard_arose(Guard::DataFlushBeforeL2);
            if !broken::is(&self.opts, Broken::SkipDataFlushBeforeL2) {
                self.device_flush(mg).await?;
            }
        }
        Ok(())
    }

    /// Write `tables` (offset, content), with FUA when `fua`, each marked
    /// clean unless it changed meanwhile.
    pub(crate) async fn write_l2_tables(
        &self,
        mg: &MetaGuard<'_>,
        tables: &[(u64, Vec<u8>)],
        fua: bool,
    ) -> Result<()> {
        for (off, data) in tables {
            self.write_meta_flagged(*off, data, fua).await?;
            mg.borrow_mut().tables.mark_l2_clean(*off, data);
            self.count(|c| c.l2_writebacks += 1);
        }
        Ok(())
    }

    /// Write the L1 sectors holding the given entries.
    async fn write_l1_entries(&self, mg: &MetaGuard<'_>, idxs: &[usize], fua: bool) -> Result<()> {
        // Whole 512-byte sectors, so that a torn write cannot split an entry.
        let per_sector = 64usize;
        let mut sectors: Vec<usize> = idxs.iter().map(|i| i / per_sector).collect();
        sectors.dedup();
        for s in sectors {
            let (off, bytes) = {
                let m = mg.borrow();
                let start = s * per_sector;
                (
                    m.header.l1_table_offset + start as u64 * 8,
                    m.tables.l1_bytes(start, per_sector),
                )
            };
            self.write_meta_flagged(off, &bytes, fua).await?;
        }
        mg.borrow_mut().tables.mark_l1_clean(idxs);
        Ok(())
    }

    /// Guest flush or close: commit every pending allocation, write all
    /// metadata back; on close also clear the dirty bit.
    pub(crate) async fn flush_internal(&self, closing: bool) -> Result<()> {
        self.commit_all_allocs().await?;
        let mg = self.meta.lock().await;
        self.writeback_all(&mg).await?;
        if closing {
            // Frees applied above dirtied refcount blocks; under lazy
            // refcounts nothing has been written yet.
            mg.borrow_mut().refs.set_lazy(false);
            self.writeback_all(&mg).await?;
            let clear = mg.borrow().header.incompatible_features & incompat::DIRTY != 0;
            if clear {
                mg.borrow_mut().header.incompatible_features &= !incompat::DIRTY;
                self.write_header(&mg).await?;
                self.device_flush(&mg).await?;
                mg.borrow_mut().dirty_on_disk = false;
            }
            self.trim_growth(&mg).await;
        }
        Ok(())
    }
}
