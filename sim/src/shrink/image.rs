//! The image passes: a failing case's image and engine options as plain as
//! the failure allows (no backing or data file, default options) and its
//! virtual disk as small as its requests allow.
//!
//! The broken variant (`EngineOptions::broken`) is never
//! touched: each edit sets one named option, so the failure stays the one
//! being shrunk.

use engine::format::header::CompressionType;
use engine::{Compat, EngineOptions, Switches};
use oracle::data::SECTOR_SIZE;

use super::Shrinker;
use crate::case::{BackingSpec, Case, DataFileSpec};
use crate::shrink::Progress;

impl<F: FnMut(&Case) -> bool, P: FnMut(&Progress)> Shrinker<F, P> {
    /// Each image and engine option toward its plainest value, one at a
    /// time, in a fixed order.
    pub(super) fn simplify_image(&mut self) {
        let defaults = EngineOptions::default();
        self.try_edits(
            "simplify_image",
            &[
                &no_backing,
                &raw_backing,
                &|c| c.image = c.image.clone().without_data_file(),
                &|c| {
                    if c.image.data_file.is_some() {
                        c.image = c.image.clone().with_data_file(DataFileSpec { raw: false });
                    }
                },
                &|c| c.image.create.extended_l2 = false,
                &|c| c.image.create.lazy_refcounts = false,
                &|c| c.image.create.compat = Compat::V3,
                &|c| c.image.create.refcount_bits = 16,
                &|c| c.image.create.compression_type = CompressionType::Zlib,
                &|c| c.image.create.cluster_size = 64 << 10,
                &|c| c.engine.switches = Switches::ALL_ON,
                &|c| c.engine.l2_cache_tables = defaults.l2_cache_tables,
                &|c| c.engine.refcount_cache_tables = defaults.refcount_cache_tables,
                &|c| c.engine.metadata_memory_limit = defaults.metadata_memory_limit,
                &|c| c.engine.grow_ahead = defaults.grow_ahead,
            ],
        );
    }

    /// The virtual size down to the cluster that holds the last request's
    /// end, else halved while every request still fits.
    pub(super) fn shrink_disk(&mut self) {
        if let Some(c) = fitted(&self.best) {
            self.try_case("shrink_disk", c);
        }
        loop {
            let size = self.best.image.create.size;
            let half = (size / 2).next_multiple_of(SECTOR_SIZE as u64);
            if half >= size {
                break;
            }
            let mut c = self.best.clone();
            c.image.create.size = half;
            // An invalid candidate (a request past the new end) is refused
            // by `try_case` without a run.
            if !self.try_case("shrink_disk", c) {
                break;
            }
        }
    }
}

/// No backing file: the header names none.
pub(super) fn no_backing(c: &mut Case) {
    c.image.backing = None;
    c.image.create.backing_file = None;
    c.image.create.backing_format = None;
}

/// A qcow2 backing file as a raw one with the same data.
pub(super) fn raw_backing(c: &mut Case) {
    if let Some(BackingSpec::Qcow2 { data, .. }) = c.image.backing {
        let raw = BackingSpec::Raw { data };
        c.image.backing = Some(raw);
        c.image.create.backing_file = Some(raw.file_name().to_string());
        c.image.create.backing_format = Some(raw.format_name().to_string());
    }
}

/// `c` with the virtual size cut to whole clusters up to the end of its
/// last request (at least one cluster), or None if that is no smaller.
pub(super) fn fitted(c: &Case) -> Option<Case> {
    let cluster = c.image.create.cluster_size;
    let end = c
        .workload
        .iter()
        .flatten()
        .filter_map(|op| op.range())
        .map(|(s, n)| (s + n) * SECTOR_SIZE as u64)
        .max()
        .unwrap_or(0);
    let size = end.next_multiple_of(cluster).max(cluster);
    (size < c.image.create.size).then(|| {
        let mut c = c.clone();
        c.image.create.size = size;
        c
    })
}

#[cfg(test)]
mod tests {
    use super::super::testcase::{w, with_groups};
    use super::*;
    use crate::case::{ImageSpec, Op};
    use crate::shrink::{shrink_with, ShrinkOptions};
    use oracle::data::{BackingData, BackingPattern};

    fn fancy() -> Case {
        let data = BackingData {
            sectors: 64,
            pattern: BackingPattern::Full,
        };
        let mut c = with_groups(vec![vec![w(3, 1)], vec![Op::Flush]]);
        c.image = ImageSpec::new(
            8 << 20,
            32 << 10,
            4,
            Compat::V3,
            true,
            Some(BackingSpec::Qcow2 {
                cluster_size: 4096,
                data,
            }),
        )
        .with_data_file(DataFileSpec { raw: false });
        c.image.create.extended_l2 = true;
        c.engine.l2_cache_tables = 2;
        c.validate().unwrap();
        c
    }

    #[test]
    fn every_edit_keeps_the_case_valid() {
        let c = fancy();
        let edits: [&dyn Fn(&mut Case); 2] = [&no_backing, &raw_backing];
        for edit in edits {
            let mut e = c.clone();
            edit(&mut e);
            assert!(e.validate().is_ok(), "{:?}", e.image);
            assert_ne!(e, c);
        }
        let f = fitted(&c).unwrap();
        assert_eq!(f.image.create.size, 32 << 10);
        assert!(fitted(&f).is_none());
    }

    #[test]
    fn plain_image_but_what_the_failure_needs() {
        // Fails while the L2 cache holds two tables, a backing file is
        // there (of any format) and something is written.
        let needs = |c: &Case| {
            c.engine.l2_cache_tables == 2
                && c.image.backing.is_some()
                && c.workload.iter().flatten().any(|op| op.range().is_some())
        };
        let s = shrink_with(&fancy(), &ShrinkOptions::default(), needs, |_| {})
            .unwrap()
            .case;
        let i = &s.image;
        assert!(matches!(i.backing, Some(BackingSpec::Raw { .. })), "{i:?}");
        assert_eq!(i.data_file, None);
        assert!(!i.create.extended_l2 && !i.create.lazy_refcounts);
        assert_eq!(
            (i.create.cluster_size, i.create.refcount_bits),
            (64 << 10, 16)
        );
        assert_eq!(s.engine.l2_cache_tables, 2);
        // The one write moved to sector 0, and the disk holds just it.
        assert_eq!(s.workload, vec![vec![w(0, 1)]]);
        assert_eq!(i.create.size, 512);
    }
}
