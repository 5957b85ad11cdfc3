//! The guest-to-host tables in memory (`L1L2`): the active L1 table with
//! the indices of its entries changed since the last writeback, and the
//! cache of L2 tables (`cache::TableCache`, keyed by host offset, with
//! dirty bits and LRU order). Reading the tables from the device,
//! evicting, lookups of runs and allocating tables live in `mapping`;
//! writing them back in crash-safe order in `writeback`. This module does
//! no I/O.
//!
//! Invariants:
//! - the L1 table in memory is the one the image uses; an entry that
//!   differs from the disk's is in the dirty set until a writeback has
//!   written its sector (`mark_l1_clean`);
//! - a cached L2 table whose bytes differ from the disk's is dirty; every
//!   change to an entry goes through `update_l2_entry`, which marks it;
//! - every access that reads or changes a cached table counts as a use
//!   for the LRU order, as it did in the cache itself: the order of calls
//!   here decides which table is evicted next.
//!
//! Part of `Meta`, reached only through the metadata lock's guard.

use std::collections::BTreeSet;

use crate::cluster::cache::TableCache;
use crate::format::{L1Entry, L2Entry};

pub(crate) struct L1L2 {
    l1: Vec<u64>,
    /// Indices of L1 entries changed since the last writeback.
    l1_dirty: BTreeSet<usize>,
    l2: TableCache,
    /// L2 entries are 16 bytes (word and subcluster bitmap), not 8.
    extended: bool,
}

impl L1L2 {
    /// The tables of an image just opened: its L1 table, and an empty
    /// cache of `cache_tables` L2 tables with `extended` entries or not.
    pub(crate) fn new(l1: Vec<u64>, cache_tables: usize, extended: bool) -> Self {
        L1L2 {
            l1,
            l1_dirty: BTreeSet::new(),
            l2: TableCache::new(cache_tables),
            extended,
        }
    }

    /// The active L1 table.
    pub(crate) fn l1(&self) -> &[u64] {
        &self.l1
    }

    pub(crate) fn l1_entry(&self, i: usize) -> L1Entry {
        L1Entry(self.l1[i])
    }

    /// Point L1 entry `i` at `e`, to be written at the next writeback.
    pub(crate) fn set_l1_entry(&mut self, i: usize, e: L1Entry) {
        self.l1[i] = e.0;
        self.l1_dirty.insert(i);
    }

    /// The image now uses `l1`, a longer table already on disk as it is
    /// (resize): nothing of it is dirty.
    pub(crate) fn replace_l1(&mut self, l1: Vec<u64>) {
        debug_assert!(
            self.l1_dirty.is_empty(),
            "L1 replaced with entries unwritten"
        );
        self.l1 = l1;
        self.l1_dirty.clear();
    }

    /// Whether L1 entry `i` changed since the last writeback.
    pub(crate) fn l1_is_dirty(&self, i: usize) -> bool {
        self.l1_dirty.contains(&i)
    }

    /// Whether the L2 table at `off` is cached and dirty.
    pub(crate) fn l2_is_dirty(&self, off: u64) -> bool {
        self.l2.is_dirty(off)
    }

    pub(crate) fn l1_has_dirty(&self) -> bool {
        !self.l1_dirty.is_empty()
    }

    /// The indices of the L1 entries changed since the last writeback, in
    /// ascending order.
    pub(crate) fn dirty_l1(&self) -> Vec<usize> {
        self.l1_dirty.iter().copied().collect()
    }

    /// The big-endian bytes of the L1 entries from `start`, at most `n`
    /// of them (fewer at the end of the table).
    pub(crate) fn l1_bytes(&self, start: usize, n: usize) -> Vec<u8> {
        let end = (start + n).min(self.l1.len());
        crate::format::be64_bytes(&self.l1[start..end])
    }

    /// The entries `idxs` are written back.
    pub(crate) fn mark_l1_clean(&mut self, idxs: &[usize]) {
        for i in idxs {
            self.l1_dirty.remove(i);
        }
    }

    pub(crate) fn l2_cached(&self, off: u64) -> bool {
        self.l2.contains(off)
    }

    /// Cache the L2 table at `off` (`dirty`: not on disk as it is).
    pub(crate) fn insert_l2(&mut self, off: u64, table: Vec<u8>, dirty: bool) {
        self.l2.insert(off, table, dirty);
    }

    /// With the cache full, the table to evict before loading `keep`:
    /// (offset, dirty).
    pub(crate) fn l2_victim(&self, keep: u64, clean_only: bool) -> Option<(u64, bool)> {
        self.l2.victim_if_full(keep, clean_only)
    }

    pub(crate) fn remove_l2(&mut self, off: u64) {
        self.l2.remove(off);
    }

    /// A copy of the cached L2 table at `off`, if it is dirty.
    pub(crate) fn dirty_l2(&self, off: u64) -> Option<Vec<u8>> {
        self.l2.dirty_table(off)
    }

    pub(crate) fn l2_has_dirty(&self) -> bool {
        self.l2.has_dirty()
    }

    /// Offsets and copies of every dirty L2 table, in offset order.
    pub(crate) fn dirty_l2_tables(&self) -> Vec<(u64, Vec<u8>)> {
        self.l2.dirty_tables()
    }

    /// The L2 table at `off` was written as `written`: clean, unless it
    /// has changed since.
    pub(crate) fn mark_l2_clean(&mut self, off: u64, written: &[u8]) {
        self.l2.mark_clean(off, written);
    }

    /// A copy of the (loaded) L2 table at `off`.
    pub(crate) fn l2_table(&mut self, off: u64) -> Vec<u8> {
        self.l2.get(off).expect("loaded").to_vec()
    }

    /// Entry `idx` of the (loaded) L2 table at `off`.
    pub(crate) fn l2_entry(&mut self, off: u64, idx: usize) -> L2Entry {
        let t = self.l2.get(off).expect("L2 table loaded");
        decode_slot(t, idx, self.extended)
    }

    /// Replace entry `idx` of the (loaded) L2 table at `off` by `f` of
    /// it, marking the table dirty; returns the previous entry.
    pub(crate) fn update_l2_entry(
        &mut self,
        off: u64,
        idx: usize,
        f: impl FnOnce(L2Entry) -> L2Entry,
    ) -> L2Entry {
        let ext = self.extended;
        let t = self.l2.get_mut(off).expect("L2 table loaded");
        let old = decode_slot(t, idx, ext);
        let e = f(old);
        debug_assert!(ext || e.bitmap == 0, "a bitmap in a standard L2 entry");
        let size = if ext { 16 } else { 8 };
        let slot = &mut t[idx * size..(idx + 1) * size];
        slot[..8].copy_from_slice(&e.word.to_be_bytes());
        if ext {
            slot[8..].copy_from_slice(&e.bitmap.to_be_bytes());
        }
        old
    }
}

/// Entry `idx` of an L2 table's bytes: 8-byte words, or word and bitmap
/// (16 bytes) with extended L2 entries.
pub(crate) fn decode_slot(table: &[u8], idx: usize, extended: bool) -> L2Entry {
    let be64 = |at: usize| u64::from_be_bytes(table[at..at + 8].try_into().expect("8 bytes"));
    if extended {
        L2Entry {
            word: be64(idx * 16),
            bitmap: be64(idx * 16 + 8),
        }
    } else {
        L2Entry::from_word(be64(idx * 8))
    }
}
