//! A cache of cluster-sized metadata tables (L2 tables or refcount blocks)
//! keyed by host offset, with dirty tracking and LRU eviction order.
//!
//! The cache itself does no I/O: the image decides when to write a dirty
//! table back, because only it knows the ordering a crash requires
//! (refcounts before the L2 entries that use them, data before both).

use std::collections::BTreeMap;

pub(crate) struct Table {
    pub data: Vec<u8>,
    pub dirty: bool,
    last_use: u64,
}

pub(crate) struct TableCache {
    tables: BTreeMap<u64, Table>,
    capacity: usize,
    tick: u64,
}

impl TableCache {
    pub fn new(capacity: usize) -> Self {
        assert!(
            capacity >= 2,
            "a table cache needs room for at least two tables"
        );
        TableCache {
            tables: BTreeMap::new(),
            capacity,
            tick: 0,
        }
    }

    pub fn contains(&self, offset: u64) -> bool {
        self.tables.contains_key(&offset)
    }

    pub fn get(&mut self, offset: u64) -> Option<&[u8]> {
        self.tick += 1;
        let t = self.tables.get_mut(&offset)?;
        t.last_use = self.tick;
        Some(&t.data)
    }

    /// Mutable access; marks the table dirty.
    pub fn get_mut(&mut self, offset: u64) -> Option<&mut Vec<u8>> {
        self.tick += 1;
        let t = self.tables.get_mut(&offset)?;
        t.last_use = self.tick;
        t.dirty = true;
        Some(&mut t.data)
    }

    pub fn insert(&mut self, offset: u64, data: Vec<u8>, dirty: bool) {
        self.tick += 1;
        self.tables.insert(
            offset,
            Table {
                data,
                dirty,
                last_use: self.tick,
            },
        );
    }

    pub fn remove(&mut self, offset: u64) -> Option<Table> {
        self.tables.remove(&offset)
    }

    pub fn is_full(&self) -> bool {
        self.tables.len() >= self.capacity
    }

    /// With the cache full, the least recently used table other than
    /// `keep`: (offset, dirty). None while there is room. With
    /// `clean_only` (a poisoned image, which writes nothing back; see
    /// `Image::write_meta`) only a clean table, or none when every other
    /// one is dirty: the cache then holds more than its capacity.
    pub fn victim_if_full(&self, keep: u64, clean_only: bool) -> Option<(u64, bool)> {
        if !self.is_full() {
            return None;
        }
        self.tables
            .iter()
            .filter(|(o, t)| **o != keep && !(clean_only && t.dirty))
            .min_by_key(|(_, t)| t.last_use)
            .map(|(o, t)| (*o, t.dirty))
    }

    /// A copy of the table at `offset`, if it is cached and dirty.
    pub fn dirty_table(&self, offset: u64) -> Option<Vec<u8>> {
        self.tables
            .get(&offset)
            .filter(|t| t.dirty)
            .map(|t| t.data.clone())
    }

    /// Whether the table at `offset` is cached and dirty.
    pub fn is_dirty(&self, offset: u64) -> bool {
        self.tables.get(&offset).is_some_and(|t| t.dirty)
    }

    /// Offsets and copies of every dirty table, in offset order.
    pub fn dirty_tables(&self) -> Vec<(u64, Vec<u8>)> {
        self.tables
            .iter()
            .filter(|(_, t)| t.dirty)
            .map(|(o, t)| (*o, t.data.clone()))
            .collect()
    }

    pub fn has_dirty(&self) -> bool {
        self.tables.values().any(|t| t.dirty)
    }

    /// Mark clean, if the content is still what was written.
    pub fn mark_clean(&mut self, offset: u64, written: &[u8]) {
        if let Some(t) = self.tables.get_mut(&offset) {
            if t.data == written {
                t.dirty = false;
            }
        }
    }
}
