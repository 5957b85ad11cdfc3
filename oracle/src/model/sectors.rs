//! A sparse map from sector to record, in sector order, kept in pages of
//! [`PAGE`] neighbouring sectors: the model's per-sector histories.
//!
//! Guest requests cover runs of sectors, so the model visits neighbours
//! together. A map with one node entry per sector made each of those
//! visits a search from the root, and a write to fresh sectors a search
//! and an insertion per sector (most of `Model::write_issued`'s time);
//! here a run costs one search per page and an index per sector. A page
//! holds [`PAGE`] slots whether or not they are used, so scattered single
//! sectors cost a page each: small pages keep that bounded.

use std::collections::BTreeMap;

/// Sectors per page.
const PAGE: u64 = 16;

struct Page<V> {
    /// Bit `i` set when sector `i` of the page has a record.
    present: u16,
    slots: [V; PAGE as usize],
}

impl<V: Default> Page<V> {
    fn new() -> Self {
        Page {
            present: 0,
            slots: std::array::from_fn(|_| V::default()),
        }
    }
}

/// The map (see the module documentation). `V::default()` fills the
/// slots of absent sectors and is never handed out as a record. (A slot
/// of `Option<V>` instead of a bit was 2% slower over a campaign.)
pub(super) struct SectorMap<V> {
    pages: BTreeMap<u64, Page<V>>,
    len: usize,
}

impl<V> Default for SectorMap<V> {
    fn default() -> Self {
        SectorMap {
            pages: BTreeMap::new(),
            len: 0,
        }
    }
}

fn split(sector: u64) -> (u64, usize) {
    (sector / PAGE, (sector % PAGE) as usize)
}

impl<V: Default> SectorMap<V> {
    /// Sectors with a record.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn clear(&mut self) {
        self.pages.clear();
        self.len = 0;
    }

    pub(super) fn get(&self, sector: u64) -> Option<&V> {
        let (p, i) = split(sector);
        let page = self.pages.get(&p)?;
        (page.present & (1 << i) != 0).then(|| &page.slots[i])
    }

    /// The record of `sector`, made (`V::default()`) if it has none.
    pub(super) fn entry(&mut self, sector: u64) -> &mut V {
        let (p, i) = split(sector);
        let page = self.pages.entry(p).or_insert_with(Page::new);
        if page.present & (1 << i) == 0 {
            page.present |= 1 << i;
            self.len += 1;
        }
        &mut page.slots[i]
    }

    /// Calls `f` on the record of every sector of `first..end`, in order,
    /// making the missing ones (`V::default()`) first: one page lookup per
    /// page the run touches.
    pub(super) fn fill_range(&mut self, first: u64, end: u64, mut f: impl FnMut(u64, &mut V)) {
        let mut s = first;
        while s < end {
            let (p, i) = split(s);
            let page = self.pages.entry(p).or_insert_with(Page::new);
            let stop = (p + 1).saturating_mul(PAGE).min(end);
            for (k, slot) in page.slots[i..i + (stop - s) as usize]
                .iter_mut()
                .enumerate()
            {
                let bit = 1 << (i + k);
                if page.present & bit == 0 {
                    page.present |= bit;
                    self.len += 1;
                }
                f(s + k as u64, slot);
            }
            s = stop;
        }
    }

    /// The records of `first..end`, in sector order.
    pub(super) fn range(&self, first: u64, end: u64) -> impl Iterator<Item = (u64, &V)> + '_ {
        let pages = if first < end {
            self.pages.range(first / PAGE..=(end - 1) / PAGE)
        } else {
            self.pages.range(1..1)
        };
        pages.flat_map(move |(&p, page)| {
            (0..PAGE as usize).filter_map(move |i| {
                let s = p * PAGE + i as u64;
                (page.present & (1 << i) != 0 && s >= first && s < end).then(|| (s, &page.slots[i]))
            })
        })
    }

    /// Every record, in sector order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &V)> + '_ {
        self.range(0, u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_kept_and_walked_in_order_across_pages() {
        let mut m: SectorMap<u32> = SectorMap::default();
        m.fill_range(14, 35, |s, v| *v = s as u32);
        *m.entry(3) = 7;
        *m.entry(1000) = 9;
        assert_eq!(m.len(), 21 + 2);
        assert_eq!(m.get(3), Some(&7));
        assert_eq!(m.get(4), None, "a default slot is not a record");
        assert_eq!(m.get(34), Some(&34));
        assert_eq!(m.get(35), None);
        let all: Vec<u64> = m.iter().map(|(s, _)| s).collect();
        let mut want = vec![3];
        want.extend(14..35);
        want.push(1000);
        assert_eq!(all, want);
        let part: Vec<(u64, u32)> = m.range(30, 1000).map(|(s, &v)| (s, v)).collect();
        assert_eq!(part, (30..35).map(|s| (s, s as u32)).collect::<Vec<_>>());
        assert_eq!(m.range(35, 35).count(), 0);
        // Filling over records already there visits them without a new count.
        let mut seen = Vec::new();
        m.fill_range(33, 37, |s, v| {
            seen.push((s, *v));
            *v += 100;
        });
        assert_eq!(seen, vec![(33, 33), (34, 34), (35, 0), (36, 0)]);
        assert_eq!(m.len(), 25);
        assert_eq!(m.get(36), Some(&100));
        m.clear();
        assert_eq!((m.len(), m.iter().count()), (0, 0));
    }
}
