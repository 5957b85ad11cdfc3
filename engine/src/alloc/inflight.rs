//! Requests in flight: guest writes (for byte-granular overlap waits), the
//! allocations that are not yet linked into an L2 table (the table and
//! their lifecycle are `allocs`'), and data I/O sequence numbers (so a
//! freed cluster is not reused while an older read or write may still
//! touch it).

use std::collections::{BTreeMap, BTreeSet};

use crate::alloc::allocs::AllocTable;

#[derive(Default)]
pub(crate) struct InFlight {
    next_write_id: u64,
    /// Guest byte ranges of writes (and discards) in flight.
    pub writes: BTreeMap<u64, (u64, u64)>,
    /// Unlinked allocations.
    pub allocs: AllocTable,
    pub next_io_seq: u64,
    pub io_active: BTreeSet<u64>,
}

impl InFlight {
    pub fn overlaps_write(&self, start: u64, end: u64) -> bool {
        self.writes.values().any(|&(a, b)| a < end && start < b)
    }

    pub fn add_write(&mut self, start: u64, end: u64) -> u64 {
        let id = self.next_write_id;
        self.next_write_id += 1;
        self.writes.insert(id, (start, end));
        id
    }

    pub fn begin_io(&mut self) -> u64 {
        let s = self.next_io_seq;
        self.next_io_seq += 1;
        self.io_active.insert(s);
        s
    }

    pub fn end_io(&mut self, seq: u64) {
        self.io_active.remove(&seq);
    }

    pub fn oldest_io(&self) -> Option<u64> {
        self.io_active.first().copied()
    }
}
