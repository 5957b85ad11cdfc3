//! The refcounts in memory (`RefTable`): the refcount table, whether it
//! changed since it was last written, the cache of refcount blocks
//! (`cache::TableCache`, keyed by host offset, with dirty bits and LRU
//! order), and whether refcounts are lazy (written only at close or
//! eviction, under the dirty bit). Loading and evicting blocks, the
//! allocator's search, creating blocks and growing the table live in
//! `refcount`; writing back in crash-safe order in `writeback`. This
//! module does no I/O.
//!
//! Invariants:
//! - a table entry of 0 means no block: those clusters have refcount 0
//!   and no refcount may be set there until a block is added;
//! - the table is dirty from a block being added until a writeback has
//!   written it; a table replaced whole (`replace_table`) was written and
//!   flushed before, so it is clean;
//! - a cached block whose bytes differ from the disk's is dirty; every
//!   change to a refcount goes through `set`, which marks it;
//! - every access that reads or changes a cached block counts as a use
//!   for the LRU order: the order of calls here decides which block is
//!   evicted next;
//! - `written` counts completed refcount block writes and `durable` the
//!   first that many of them a completed device flush covers, so
//!   `written > durable` exactly when a block write (a writeback, or an
//!   eviction, which writes without a flush) may still be volatile.
//!
//! Part of `Meta`, reached only through the metadata lock's guard.

use crate::cluster::cache::TableCache;
use crate::format::refcount;

pub(crate) struct RefTable {
    table: Vec<u64>,
    /// The table changed since it was last written.
    table_dirty: bool,
    blocks: TableCache,
    /// Width of one refcount in a block.
    bits: u32,
    /// Lazy refcounts: refcount blocks are written only at close or
    /// eviction, under the dirty bit.
    lazy: bool,
    /// Refcount block writes completed this session.
    written: u64,
    /// How many of those a completed device flush made durable.
    durable: u64,
}

impl RefTable {
    /// The refcounts of an image just opened: its refcount table, an empty
    /// cache of `cache_blocks` blocks of `bits`-wide refcounts, and whether
    /// refcounts are lazy.
    pub(crate) fn new(table: Vec<u64>, cache_blocks: usize, bits: u32, lazy: bool) -> Self {
        RefTable {
            table,
            table_dirty: false,
            blocks: TableCache::new(cache_blocks),
            bits,
            lazy,
            written: 0,
            durable: 0,
        }
    }

    /// A refcount block write completed.
    pub(crate) fn note_block_written(&mut self) {
        self.written += 1;
    }

    /// What a device flush issued now will cover: pass it to
    /// [`RefTable::note_flushed`] when the flush completes. Writes
    /// completing while it is in flight are not covered.
    pub(crate) fn flush_mark(&self) -> u64 {
        self.written
    }

    /// A device flush issued at `mark` completed.
    pub(crate) fn note_flushed(&mut self, mark: u64) {
        self.durable = self.durable.max(mark);
    }

    /// Some completed refcount block write may not be durable yet.
    pub(crate) fn blocks_volatile(&self) -> bool {
        self.written > self.durable
    }

    /// The refcount table.
    pub(crate) fn table(&self) -> &[u64] {
        &self.table
    }

    pub(crate) fn len(&self) -> usize {
        self.table.len()
    }

    /// The host offset of the block for table entry `rti` (0: none, or
    /// past the table).
    pub(crate) fn block_offset(&self, rti: usize) -> u64 {
        self.table.get(rti).copied().unwrap_or(0)
    }

    /// Table entry `rti` exists and points at a block.
    pub(crate) fn has_block(&self, rti: usize) -> bool {
        self.table.get(rti).is_some_and(|&b| b != 0)
    }

    /// A new block at `off`, counting the clusters of table entry `rti`
    /// as `block` says, not yet on disk: cached dirty, and the table dirty.
    pub(crate) fn add_block(&mut self, rti: usize, off: u64, block: Vec<u8>) {
        self.blocks.insert(off, block, true);
        self.table[rti] = off;
        self.table_dirty = true;
    }

    /// A larger table, written and flushed already, replaces this one.
    pub(crate) fn replace_table(&mut self, table: Vec<u64>) {
        self.table = table;
        self.table_dirty = false;
    }

    pub(crate) fn table_dirty(&self) -> bool {
        self.table_dirty
    }

    /// The big-endian bytes of the table, as written to disk.
    pub(crate) fn table_bytes(&self) -> Vec<u8> {
        crate::format::be64_bytes(&self.table)
    }

    /// The table was written back.
    pub(crate) fn mark_table_clean(&mut self) {
        self.table_dirty = false;
    }

    pub(crate) fn lazy(&self) -> bool {
        self.lazy
    }

    pub(crate) fn set_lazy(&mut self, lazy: bool) {
        self.lazy = lazy;
    }

    pub(crate) fn block_cached(&self, off: u64) -> bool {
        self.blocks.contains(off)
    }

    /// Cache the block at `off` as read from disk.
    pub(crate) fn insert_block(&mut self, off: u64, block: Vec<u8>) {
        self.blocks.insert(off, block, false);
    }

    /// With the cache full, the block to evict before loading `keep`:
    /// (offset, dirty).
    pub(crate) fn block_victim(&self, keep: u64, clean_only: bool) -> Option<(u64, bool)> {
        self.blocks.victim_if_full(keep, clean_only)
    }

    pub(crate) fn remove_block(&mut self, off: u64) {
        self.blocks.remove(off);
    }

    /// A copy of the cached block at `off`, if it is dirty.
    pub(crate) fn dirty_block(&self, off: u64) -> Option<Vec<u8>> {
        self.blocks.dirty_table(off)
    }

    /// Offsets and copies of every dirty block, in offset order.
    pub(crate) fn dirty_blocks(&self) -> Vec<(u64, Vec<u8>)> {
        self.blocks.dirty_tables()
    }

    /// The block at `off` was written as `written`: clean, unless it has
    /// changed since.
    pub(crate) fn mark_block_clean(&mut self, off: u64, written: &[u8]) {
        self.blocks.mark_clean(off, written);
    }

    /// Refcount `idx` of the (loaded) block at `off`.
    pub(crate) fn get(&mut self, off: u64, idx: usize) -> u64 {
        let block = self.blocks.get(off).expect("just loaded");
        refcount::get(block, self.bits, idx)
    }

    /// Set refcount `idx` of the (loaded) block at `off`, marking the
    /// block dirty.
    pub(crate) fn set(&mut self, off: u64, idx: usize, value: u64) {
        let block = self.blocks.get_mut(off).expect("just loaded");
        refcount::set(block, self.bits, idx, value);
    }
}
