//! Counters the engine keeps so that each optimisation can be seen working:
//! guest requests, COW areas created, cancelled and performed, zeroing
//! requests, joins of in-flight allocations, metadata writeback, and how
//! often each rare path ran ([`RarePaths`]), so a campaign can show that
//! its cases reach the code a planted bug there would break.

use serde::{Deserialize, Serialize};

use crate::guards::GuardCounts;

/// Monotonic counters of one opened image. Device-level counts (requests,
/// bytes, flushes) belong to the device; these are the engine's view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub guest_reads: u64,
    pub guest_bytes_read: u64,
    pub guest_writes: u64,
    pub guest_bytes_written: u64,
    pub guest_flushes: u64,
    pub guest_zero_writes: u64,
    pub guest_discards: u64,
    /// Host clusters allocated for guest data.
    pub clusters_allocated: u64,
    /// COW areas (head or tail of a partially written new cluster) created.
    pub cow_created: u64,
    /// COW areas a later write covered completely, so never copied.
    pub cow_cancelled_whole: u64,
    /// COW areas a later write covered in part, so only the rest was copied.
    pub cow_cancelled_partial: u64,
    /// COW areas copied to the device (in whole or the uncancelled part).
    pub cow_performed: u64,
    /// Bytes written to the device for COW areas.
    pub cow_bytes_written: u64,
    /// Efficient (no-fallback) write_zeroes requests issued for zero_cow.
    pub zeroing_requests: u64,
    /// Zero-source COW ranges that needed no request at all: growing the
    /// file had zeroed the new clusters (zero_cow), and nothing used them.
    pub cow_already_zero: u64,
    /// zero_cow attempts the device refused, falling back to zero buffers.
    pub zeroing_fallbacks: u64,
    /// Efficient write_zeroes requests that grew the image file ahead of
    /// allocation (zero_cow, `EngineOptions::grow_ahead`).
    pub grow_requests: u64,
    /// Bytes those requests added to the file.
    pub grow_bytes: u64,
    /// Writes that joined a cluster allocation already in flight.
    pub alloc_joins: u64,
    /// Allocations given up before they were linked (the write into them
    /// failed, or a flush could not complete their deferred COW).
    pub allocs_dropped: u64,
    /// Writes that waited for an overlapping in-flight write.
    pub overlap_waits: u64,
    /// Bytes read from the backing file.
    pub backing_bytes_read: u64,
    /// L2 tables written to the device.
    pub l2_writebacks: u64,
    /// Refcount blocks written to the device.
    pub refcount_writebacks: u64,
    /// Device flushes the engine issued (for any reason).
    pub device_flushes: u64,
    /// Rare paths (see [`RarePaths`] for what each counts).
    pub reftable_growths: u64,
    pub refblocks_created: u64,
    pub l2_evictions: u64,
    pub l2_dirty_evictions: u64,
    pub refblock_evictions: u64,
    pub refblock_dirty_evictions: u64,
    pub cow_failures: u64,
    pub link_failures: u64,
    pub open_alloc_cap_commits: u64,
    pub growth_disabled: u64,
    pub dirty_rebuilds: u64,
    /// How often each guard's condition arose (`guards`). Absent from
    /// counters serialized before guards were counted.
    #[serde(default)]
    pub guards: GuardCounts,
}

impl Counters {
    /// What happened between `earlier` and `self`, field by field (both
    /// taken from one image, so no field can go backwards).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            guest_reads: self.guest_reads - earlier.guest_reads,
            guest_bytes_read: self.guest_bytes_read - earlier.guest_bytes_read,
            guest_writes: self.guest_writes - earlier.guest_writes,
            guest_bytes_written: self.guest_bytes_written - earlier.guest_bytes_written,
            guest_flushes: self.guest_flushes - earlier.guest_flushes,
            guest_zero_writes: self.guest_zero_writes - earlier.guest_zero_writes,
            guest_discards: self.guest_discards - earlier.guest_discards,
            clusters_allocated: self.clusters_allocated - earlier.clusters_allocated,
            cow_created: self.cow_created - earlier.cow_created,
            cow_cancelled_whole: self.cow_cancelled_whole - earlier.cow_cancelled_whole,
            cow_cancelled_partial: self.cow_cancelled_partial - earlier.cow_cancelled_partial,
            cow_performed: self.cow_performed - earlier.cow_performed,
            cow_bytes_written: self.cow_bytes_written - earlier.cow_bytes_written,
            zeroing_requests: self.zeroing_requests - earlier.zeroing_requests,
            zeroing_fallbacks: self.zeroing_fallbacks - earlier.zeroing_fallbacks,
            cow_already_zero: self.cow_already_zero - earlier.cow_already_zero,
            grow_requests: self.grow_requests - earlier.grow_requests,
            grow_bytes: self.grow_bytes - earlier.grow_bytes,
            alloc_joins: self.alloc_joins - earlier.alloc_joins,
            allocs_dropped: self.allocs_dropped - earlier.allocs_dropped,
            overlap_waits: self.overlap_waits - earlier.overlap_waits,
            backing_bytes_read: self.backing_bytes_read - earlier.backing_bytes_read,
            l2_writebacks: self.l2_writebacks - earlier.l2_writebacks,
            refcount_writebacks: self.refcount_writebacks - earlier.refcount_writebacks,
            device_flushes: self.device_flushes - earlier.device_flushes,
            reftable_growths: self.reftable_growths - earlier.reftable_growths,
            refblocks_created: self.refblocks_created - earlier.refblocks_created,
            l2_evictions: self.l2_evictions - earlier.l2_evictions,
            l2_dirty_evictions: self.l2_dirty_evictions - earlier.l2_dirty_evictions,
            refblock_evictions: self.refblock_evictions - earlier.refblock_evictions,
            refblock_dirty_evictions: self.refblock_dirty_evictions
                - earlier.refblock_dirty_evictions,
            cow_failures: self.cow_failures - earlier.cow_failures,
            link_failures: self.link_failures - earlier.link_failures,
            open_alloc_cap_commits: self.open_alloc_cap_commits - earlier.open_alloc_cap_commits,
            growth_disabled: self.growth_disabled - earlier.growth_disabled,
            dirty_rebuilds: self.dirty_rebuilds - earlier.dirty_rebuilds,
            guards: self.guards.since(&earlier.guards),
        }
    }

    /// The rare-path counts among these counters.
    pub fn rare_paths(&self) -> RarePaths {
        RarePaths {
            reftable_growths: self.reftable_growths,
            refblocks_created: self.refblocks_created,
            l2_evictions: self.l2_evictions,
            l2_dirty_evictions: self.l2_dirty_evictions,
            refblock_evictions: self.refblock_evictions,
            refblock_dirty_evictions: self.refblock_dirty_evictions,
            cow_failures: self.cow_failures,
            link_failures: self.link_failures,
            allocs_dropped: self.allocs_dropped,
            open_alloc_cap_commits: self.open_alloc_cap_commits,
            growth_disabled: self.growth_disabled,
            dirty_rebuilds: self.dirty_rebuilds,
        }
    }
}

/// How often each rare path of the engine ran: code that most guest
/// requests never reach, where a bug hides from all but the cases that
/// reach it. Summed over a run's epochs and a campaign's cases, it shows
/// how well generation reaches each path. The field names are the stable
/// names reports carry.
///
/// The L1 table has no entry here: it never grows. Its size is fixed when
/// the image is created (from the virtual size) and the engine does not
/// resize images.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RarePaths {
    /// The refcount table replaced by a larger one (`grow_reftable`): the
    /// image outgrew what its refcount table's blocks can count.
    pub reftable_growths: u64,
    /// Refcount blocks created, for a table entry that had none or by a
    /// table growth.
    pub refblocks_created: u64,
    /// L2 tables evicted from a full cache.
    pub l2_evictions: u64,
    /// Of those, dirty ones: written back after the refcount step and a
    /// flush, as writeback orders it.
    pub l2_dirty_evictions: u64,
    /// Refcount blocks evicted from a full cache.
    pub refblock_evictions: u64,
    /// Of those, dirty ones, written back on eviction.
    pub refblock_dirty_evictions: u64,
    /// Commits whose remaining COW failed (a read of the COW source or the
    /// copy's write): the allocation doomed (by a flush) or reopened.
    pub cow_failures: u64,
    /// Commits whose linking failed, reopening the allocation (partly
    /// linked if some clusters were linked before the error).
    pub link_failures: u64,
    /// Allocations given up before they were linked.
    pub allocs_dropped: u64,
    /// Allocations committed early because too many were open at once.
    pub open_alloc_cap_commits: u64,
    /// Growing the file ahead turned off for the session by an error (or
    /// a device that refused the zeroing).
    pub growth_disabled: u64,
    /// Images opened with the dirty bit set whose refcounts were rebuilt.
    pub dirty_rebuilds: u64,
}

impl RarePaths {
    /// Every count with its stable name, in a fixed order.
    pub fn named(&self) -> [(&'static str, u64); 12] {
        [
            ("reftable_growths", self.reftable_growths),
            ("refblocks_created", self.refblocks_created),
            ("l2_evictions", self.l2_evictions),
            ("l2_dirty_evictions", self.l2_dirty_evictions),
            ("refblock_evictions", self.refblock_evictions),
            ("refblock_dirty_evictions", self.refblock_dirty_evictions),
            ("cow_failures", self.cow_failures),
            ("link_failures", self.link_failures),
            ("allocs_dropped", self.allocs_dropped),
            ("open_alloc_cap_commits", self.open_alloc_cap_commits),
            ("growth_disabled", self.growth_disabled),
            ("dirty_rebuilds", self.dirty_rebuilds),
        ]
    }

    /// One for each path that ran at least once in `o`, none for the
    /// rest: summed over cases, how many cases reached each path.
    pub fn reached(o: &RarePaths) -> RarePaths {
        RarePaths::default().zip_with(o, |_, n| u64::from(n > 0))
    }

    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &RarePaths) {
        *self = self.zip_with(o, |a, b| a + b);
    }

    /// `f` of each field of `self` and the same field of `o`: the one
    /// place besides the struct and `named` that lists the fields.
    fn zip_with(&self, o: &RarePaths, f: impl Fn(u64, u64) -> u64) -> RarePaths {
        RarePaths {
            reftable_growths: f(self.reftable_growths, o.reftable_growths),
            refblocks_created: f(self.refblocks_created, o.refblocks_created),
            l2_evictions: f(self.l2_evictions, o.l2_evictions),
            l2_dirty_evictions: f(self.l2_dirty_evictions, o.l2_dirty_evictions),
            refblock_evictions: f(self.refblock_evictions, o.refblock_evictions),
            refblock_dirty_evictions: f(self.refblock_dirty_evictions, o.refblock_dirty_evictions),
            cow_failures: f(self.cow_failures, o.cow_failures),
            link_failures: f(self.link_failures, o.link_failures),
            allocs_dropped: f(self.allocs_dropped, o.allocs_dropped),
            open_alloc_cap_commits: f(self.open_alloc_cap_commits, o.open_alloc_cap_commits),
            growth_disabled: f(self.growth_disabled, o.growth_disabled),
            dirty_rebuilds: f(self.dirty_rebuilds, o.dirty_rebuilds),
        }
    }
}

impl std::fmt::Display for RarePaths {
    /// `reftable_growths 3, refblocks_created 40, ...`: every count, zeroes
    /// too, so a path no case reached is seen.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .named()
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rare_path_is_named_added_and_shown() {
        // Distinct values per field, so a field left out of `rare_paths`,
        // `named` or `add` (or two swapped) shows.
        let c = Counters {
            reftable_growths: 1,
            refblocks_created: 2,
            l2_evictions: 3,
            l2_dirty_evictions: 4,
            refblock_evictions: 5,
            refblock_dirty_evictions: 6,
            cow_failures: 7,
            link_failures: 8,
            allocs_dropped: 9,
            open_alloc_cap_commits: 10,
            growth_disabled: 11,
            dirty_rebuilds: 12,
            ..Counters::default()
        };
        let r = c.rare_paths();
        let values: Vec<u64> = r.named().iter().map(|(_, n)| *n).collect();
        assert_eq!(values, (1..=12).collect::<Vec<u64>>());
        let mut sum = r;
        sum.add(&r);
        let doubled: Vec<u64> = sum.named().iter().map(|(_, n)| *n).collect();
        assert_eq!(doubled, (1..=12).map(|n| 2 * n).collect::<Vec<u64>>());
        assert!(r
            .to_string()
            .starts_with("reftable_growths 1, refblocks_created 2,"));
        assert_eq!(c.since(&c), Counters::default());
        let some = RarePaths {
            cow_failures: 5,
            ..RarePaths::default()
        };
        let reached = RarePaths::reached(&some);
        assert_eq!(reached.cow_failures, 1);
        assert_eq!(reached.named().iter().map(|(_, n)| n).sum::<u64>(), 1);
    }
}
