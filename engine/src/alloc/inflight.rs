//! Requests in flight: guest writes (for byte-granular overlap waits), the
//! allocations that are not yet linked into an L2 table (the table and
//! their lifecycle are `allocs`'), and data I/O sequence numbers (so a
//! freed cluster is not reused while an older read or write may still
//! touch it), and a short log of the allocations a failed flush gave up
//! (so a FUA request can ask whether its own data went with one).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

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
    pub dropped: DropLog,
}

/// The allocations a failed flush gave up lately (their COW failed; with
/// delayed COW, writes that joined them and completed lose their data),
/// as the guest bytes their clusters held, numbered in order. A FUA
/// request takes a mark when it begins and asks at the end whether one
/// over its own range went since: its data may have been in it. An
/// allocation its own writer gives up is not logged: that writer fails,
/// and no other request can have joined it.
#[derive(Default)]
pub struct DropLog {
    seq: u64,
    recent: VecDeque<(u64, u64, u64)>,
}

impl DropLog {
    /// How many drops are kept. A request that began before the oldest
    /// kept one is told "maybe" (see `overlaps_since`): rare (it takes this
    /// many failures during one request), and the safe answer.
    pub const KEEP: usize = 64;

    /// The number of the latest drop: what a request takes when it begins.
    pub fn mark(&self) -> u64 {
        self.seq
    }

    /// An allocation over guest bytes `[start, end)` was given up.
    pub fn record(&mut self, start: u64, end: u64) {
        self.seq += 1;
        self.recent.push_back((self.seq, start, end));
        if self.recent.len() > Self::KEEP {
            self.recent.pop_front();
        }
    }

    /// Whether an allocation over any of guest bytes `[start, end)` was
    /// given up since `mark`; true too when the log no longer reaches back
    /// to `mark`.
    pub fn overlaps_since(&self, mark: u64, start: u64, end: u64) -> bool {
        if self.seq == mark {
            return false;
        }
        match self.recent.front() {
            Some(&(oldest, ..)) if oldest <= mark + 1 => self
                .recent
                .iter()
                .any(|&(s, a, b)| s > mark && a < end && start < b),
            _ => true,
        }
    }
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
