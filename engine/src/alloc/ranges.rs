//! [`RangeSet`]: sorted, disjoint byte ranges, such as those an
//! allocation's writes have filled (and, in debug builds, what the crash
//! rules' ledger tracks by host byte).

/// Sorted, disjoint, non-adjacent half-open byte ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// Add [start, end) to the set.
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

    /// Take [start, end) out of the set.
    pub fn remove(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        for &(a, b) in &self.ranges {
            if b <= start || a >= end {
                out.push((a, b));
                continue;
            }
            if a < start {
                out.push((a, start));
            }
            if b > end {
                out.push((end, b));
            }
        }
        self.ranges = out;
    }

    /// The parts of [start, end) in the set.
    pub fn parts_in(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        self.ranges
            .iter()
            .map(|&(a, b)| (a.max(start), b.min(end)))
            .filter(|(a, b)| a < b)
            .collect()
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
