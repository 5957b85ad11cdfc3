//! Requests in flight: guest writes (for byte-granular overlap waits), the
//! allocations that are not yet linked into an L2 table (QEMU's
//! `QCowL2Meta`), and data I/O sequence numbers (so a freed cluster is not
//! reused while an older read or write may still touch it).

use std::collections::{BTreeMap, BTreeSet};

use crate::format::L2Entry;

/// Sorted, disjoint, non-adjacent half-open byte ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for &(a, b) in &self.ranges {
            if b < s || a > e {
                out.push((a, b));
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        out.push((s, e));
        out.sort_unstable();
        self.ranges = out;
    }

    /// The parts of [start, end) not in the set.
    pub fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut pos = start;
        for &(a, b) in &self.ranges {
            if b <= pos {
                continue;
            }
            if a >= end {
                break;
            }
            if a > pos {
                out.push((pos, a.min(end)));
            }
            pos = pos.max(b);
            if pos >= end {
                break;
            }
        }
        if pos < end {
            out.push((pos, end));
        }
        out
    }

    /// If `off` is inside a range: its end. Otherwise None.
    pub fn covering_end(&self, off: u64) -> Option<u64> {
        self.ranges
            .iter()
            .find(|&&(a, b)| a <= off && off < b)
            .map(|&(_, b)| b)
    }

    /// The start of the first range beginning after `off`.
    pub fn next_start_after(&self, off: u64) -> Option<u64> {
        self.ranges.iter().map(|&(a, _)| a).find(|&a| a > off)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AllocState {
    /// Data may still be written into it; COW areas may still be cancelled.
    Open,
    /// COW of what is left and the L2 link are under way.
    Committing,
}

/// One allocation of a run of new host clusters for guest clusters that
/// are not linked into the L2 table yet.
#[derive(Debug, Clone)]
pub(crate) struct Alloc {
    /// Unique among the image's allocations (keys are reused).
    pub id: u64,
    /// Guest offset of the first cluster (cluster aligned).
    pub guest_start: u64,
    /// Length in bytes (whole clusters).
    pub len: u64,
    /// Host offset of the first new cluster.
    pub host: u64,
    /// What each guest cluster mapped to before: the COW source.
    pub old: Vec<L2Entry>,
    /// Guest bytes whose new data has been written to the new clusters.
    pub written: RangeSet,
    /// Writes into the new clusters still in flight.
    pub writers: u32,
    pub state: AllocState,
    /// The COW areas as created (head of the first cluster, tail of the
    /// last), for counting what was cancelled.
    pub cow_areas: Vec<(u64, u64)>,
    /// Clusters (a prefix) already linked by an earlier, failed commit.
    pub linked: u64,
    /// The guest bytes this allocation fills and links: all of its clusters,
    /// or (extended L2 entries) only the subclusters the write touched;
    /// the other subclusters keep their state.
    pub cover_start: u64,
    pub cover_end: u64,
    /// The host cluster is the guest cluster's own (a COPIED cluster whose
    /// unallocated or zero subclusters are filled in place): there is
    /// nothing to free when it is linked or given up.
    pub in_place: bool,
    /// The new clusters read as zeroes (grown, never used: see
    /// `grow::is_fresh`), so COW areas whose source is zero need no I/O.
    pub fresh: bool,
    /// A write into the new clusters failed: its bytes may hold anything,
    /// so the COW of the unwritten bytes must be written after all.
    pub failed_write: bool,
    /// A guest flush could not complete its deferred COW and will give it
    /// up before reporting the failure (it stays Committing until then).
    pub doomed: bool,
}

impl Alloc {
    pub fn end(&self) -> u64 {
        self.guest_start + self.len
    }

    /// Guest bytes of the cover that no write has filled yet.
    pub fn unwritten(&self) -> Vec<(u64, u64)> {
        self.written.gaps(self.cover_start, self.cover_end)
    }
}

#[derive(Default)]
pub(crate) struct InFlight {
    next_write_id: u64,
    next_alloc_id: u64,
    /// Guest byte ranges of writes (and discards) in flight.
    pub writes: BTreeMap<u64, (u64, u64)>,
    /// Unlinked allocations, keyed by guest start.
    pub allocs: BTreeMap<u64, Alloc>,
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

    pub fn new_alloc_id(&mut self) -> u64 {
        self.next_alloc_id += 1;
        self.next_alloc_id
    }

    /// The allocation covering guest offset `off`, by its key.
    pub fn alloc_at(&self, off: u64) -> Option<u64> {
        self.allocs
            .range(..=off)
            .next_back()
            .filter(|(_, a)| off < a.end())
            .map(|(&k, _)| k)
    }

    /// The first allocation starting after `off`.
    pub fn next_alloc_after(&self, off: u64) -> Option<u64> {
        self.allocs.range(off + 1..).next().map(|(&k, _)| k)
    }

    /// Keys of allocations overlapping [start, end).
    pub fn allocs_overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        self.allocs
            .values()
            .filter(|a| a.guest_start < end && start < a.end())
            .map(|a| a.guest_start)
            .collect()
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

#[cfg(test)]
mod tests {
    use super::RangeSet;

    #[test]
    fn gaps_and_merging() {
        let mut r = RangeSet::default();
        r.insert(10, 20);
        r.insert(30, 40);
        assert_eq!(r.gaps(0, 50), vec![(0, 10), (20, 30), (40, 50)]);
        r.insert(20, 30);
        assert_eq!(r.gaps(0, 50), vec![(0, 10), (40, 50)]);
        assert_eq!(r.gaps(10, 40), vec![]);
        assert_eq!(r.covering_end(15), Some(40));
        assert_eq!(r.covering_end(40), None);
        assert_eq!(r.next_start_after(0), Some(10));
        r.insert(5, 12);
        assert_eq!(r.gaps(0, 50), vec![(0, 5), (40, 50)]);
    }
}
