//! Guest requests flagged FUA (force unit access: Linux's REQ_FUA,
//! NBD_CMD_FLAG_FUA): a write, write_zeroes or discard that must be
//! durable when it completes, with every metadata change needed to read
//! it back (the data, the refcounts behind a new cluster, its L2 entry, a
//! new L2 table's L1 entry), and nothing more.
//!
//! Three costs, cheapest first:
//!
//! 1. A write in place over a mapping already durable (its L2 table and
//!    L1 entry clean, and every metadata write so far flushed:
//!    `MetaEpochs`) is its own device writes, each with FUA: no flush.
//! 2. Otherwise the allocations in flight over the range are committed,
//!    and only the range's own dirty L2 tables are written back: the
//!    refcount blocks (and the refcount table) first with their flush,
//!    which makes the data durable too, then each table with FUA. At most
//!    one flush, two with a new refcount table.
//! 3. A range whose L1 entry is dirty (a new or copied L2 table) or a
//!    dirty header takes the whole ordered writeback, its last writes
//!    with FUA instead of a flush after them: two flushes for a new table.
//!
//! A device without FUA of its own emulates it with a flush after the
//! write, as QEMU's block layer does (`FileDev` syncs the file's data).

use crate::alloc::allocs::CowFailure;
use crate::broken::{self, Broken};
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::guards::Guard;
use crate::image::{Image, MetaGuard};

impl<D: BlockDev> Image<D> {
    /// [`Image::write_fua`]: the implementation.
    pub(crate) async fn write_fua_impl(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.count(|c| c.guest_fua_requests += 1);
        let dropped = self.inflight.borrow().dropped.mark();
        let before = self.rules(|r| r.change_mark());
        if self.write_request(offset, buf, true).await? {
            self.count(|c| c.fua_in_place += 1);
            self.check_fua_durable(offset, buf.len() as u64, None, before);
            return Ok(());
        }
        self.make_range_durable(offset, buf.len() as u64, dropped)
            .await
    }

    /// [`Image::write_zeroes_fua`]: the implementation.
    pub(crate) async fn write_zeroes_fua_impl(
        &self,
        offset: u64,
        len: u64,
        unmap: bool,
    ) -> Result<()> {
        self.count(|c| c.guest_fua_requests += 1);
        let dropped = self.inflight.borrow().dropped.mark();
        self.write_zeroes_impl(offset, len, unmap).await?;
        self.make_range_durable(offset, len, dropped).await
    }

    /// [`Image::discard_fua`]: the implementation.
    pub(crate) async fn discard_fua_impl(&self, offset: u64, len: u64) -> Result<()> {
        self.count(|c| c.guest_fua_requests += 1);
        let dropped = self.inflight.borrow().dropped.mark();
        self.discard_impl(offset, len).await?;
        self.make_range_durable(offset, len, dropped).await
    }

    /// Whether guest offset `guest`'s mapping is durable as it stands:
    /// its L1 entry and L2 table clean, and every metadata write so far
    /// flushed (a clean table may have been written by an eviction or
    /// another request's writeback that no flush has followed yet).
    pub(crate) fn mapping_durable(&self, mg: &MetaGuard<'_>, guest: u64) -> bool {
        if !self.meta_epochs.get().all_durable() {
            return false;
        }
        let m = mg.borrow();
        let l1i = self.geo.offset_to_l1_index(guest);
        let l2 = m.tables.l1_entry(l1i).l2_offset();
        l2 != 0 && !m.tables.l1_is_dirty(l1i) && !m.tables.l2_is_dirty(l2)
    }

    /// The L1 indices of guest bytes `[start, end)` (not empty).
    fn l1_indices(&self, start: u64, end: u64) -> std::ops::RangeInclusive<usize> {
        self.geo.offset_to_l1_index(start)..=self.geo.offset_to_l1_index(end - 1)
    }

    /// Make the completed request over `len` guest bytes at `offset`
    /// durable (the module doc's second and third costs), counting its
    /// flushes, and (debug builds) check it. `dropped`: the count of
    /// allocations given up when the request began; if a failed flush
    /// gave one up since, the request's data may have been in it.
    async fn make_range_durable(&self, offset: u64, len: u64, dropped: u64) -> Result<()> {
        let marks = self.rules(|r| r.completed());
        let flushes = self.counters.borrow().device_flushes;
        let r = self.write_back_range(offset, offset + len, dropped).await;
        let n = self.counters.borrow().device_flushes - flushes;
        self.count(|c| c.fua_flushes += n);
        self.check_fua_durable(offset, len, marks, r?);
        Ok(())
    }

    /// [`Image::make_range_durable`]'s writeback. Returns (debug builds)
    /// the rules ledger's change mark once the range's allocations were
    /// linked: every change to its tables up to it must be durable when
    /// this returns.
    async fn write_back_range(&self, start: u64, end: u64, dropped: u64) -> Result<Option<u64>> {
        if start >= end {
            return Ok(None);
        }
        // Allocations in flight over the range (delayed COW): committed,
        // so that the L2 entries point at the request's data.
        let cs = self.geo.cluster_size;
        let mut p = self.geo.cluster_start(start);
        while p < end {
            let at = {
                let inf = self.inflight.borrow();
                inf.allocs
                    .at(p)
                    .map(|id| inf.allocs.alloc(id).guest_start())
            };
            if let Some(s) = at {
                self.settle_alloc(s, CowFailure::Keep).await?;
            }
            p += cs;
        }
        let mg = self.meta.lock().await;
        let upto = self.rules(|r| r.change_mark());
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        if self
            .inflight
            .borrow()
            .dropped
            .overlaps_since(dropped, start, end)
        {
            return Err(Error::FuaDataGivenUp);
        }
        let (tables, whole) = {
            let m = mg.borrow();
            let l1 = self.l1_indices(start, end);
            let whole = m.header_dirty || l1.clone().any(|i| m.tables.l1_is_dirty(i));
            let tables: Vec<(u64, Vec<u8>)> = l1
                .map(|i| m.tables.l1_entry(i).l2_offset())
                .filter(|&t| t != 0)
                .filter_map(|t| m.tables.dirty_l2(t).map(|d| (t, d)))
                .collect();
            (tables, whole)
        };
        if !whole && tables.is_empty() {
            // The mapping is written (durable, or by a writeback no flush
            // has followed yet); the request's data may not be.
            self.device_flush(&mg).await?;
            return Ok(upto);
        }
        self.guard_arose(Guard::FuaMappingDurable);
        if broken::is(&self.opts, Broken::FuaBeforeL2) {
            self.device_flush(&mg).await?;
            return Ok(upto);
        }
        if whole {
            self.writeback_all_fua(&mg).await?;
            return Ok(upto);
        }
        self.guard_arose(Guard::FuaFlushBeforeL2);
        // The broken variant says the refcount phase flushed, so the
        // data's flush before the L2 tables is skipped too.
        let skip = broken::is(&self.opts, Broken::FuaWithoutPreflush);
        let flushed = skip || self.writeback_refcount_phase(&mg).await?;
        self.before_l2_writes(&mg, flushed).await?;
        self.write_l2_tables(&mg, &tables, true).await?;
        Ok(upto)
    }

    /// Debug builds: the crash rules' ledger agrees that the request over
    /// guest bytes `[offset, offset + len)` is durable: the writes that
    /// completed before its writeback, its own among them (`marks`; none
    /// for one that wrote in place with FUA) and every change to its L2
    /// tables and L1 entries up to `upto` (a change mark taken once its
    /// allocations were linked; later changes are other requests').
    fn check_fua_durable(
        &self,
        offset: u64,
        len: u64,
        marks: Option<(u64, u64)>,
        upto: Option<u64>,
    ) {
        let Some(upto) = upto.filter(|_| len > 0 && cfg!(debug_assertions)) else {
            return;
        };
        const RULE: &str = "a FUA request is durable when it completes";
        // Read without the lock: nothing here awaits, so a task holding
        // it is suspended mid-operation; what it changed since `upto` is
        // not checked.
        let (tables, l1) = {
            let m = self.meta.read_unlocked();
            let l1 = self.l1_indices(offset, offset + len);
            let tables: Vec<u64> = l1
                .clone()
                .map(|i| m.tables.l1_entry(i).l2_offset())
                .filter(|&t| t != 0)
                .collect();
            (tables, l1.collect::<Vec<usize>>())
        };
        self.rules(|r| {
            if let Some(m) = marks {
                r.check_durable(m, RULE);
            }
            r.check_mapping_durable(&tables, &l1, upto, RULE);
        });
    }
}
