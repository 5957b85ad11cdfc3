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
pub fn no_backing(c: &mut Case) {
    c.image.backing = None;
    c.image.create.backing_file = None;
    c.image.create.backing_format = None;
}

/// A qcow2 backing file as a raw one with the same data.
pub fn raw_backing(c: &mut Case) {
    if let Some(BackingSpec::Qcow2 { data, .. }) = c.image.backing {
        let raw = BackingSpec::Raw { data };
        c.image.backing = Some(raw);
        c.image.create.backing_file = Some(raw.file_name().to_string());
        c.image.create.backing_format = Some(raw.format_name().to_string());
    }
}

/// `c` with the virtual size cut to whole clusters up to the end of its
/// last request (at least one cluster), or None if that is no smaller.
pub fn fitted(c: &Case) -> Option<Case> {
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
