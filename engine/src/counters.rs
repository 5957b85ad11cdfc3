//! Counters the engine keeps so that each optimisation can be seen working:
//! guest requests, COW areas created, cancelled and performed, zeroing
//! requests, joins of in-flight allocations, metadata writeback, and how
//! often each rare path ran ([`RarePaths`]), so a campaign can show that
//! its cases reach the code a planted bug there would break.

use serde::{Deserialize, Serialize};

use crate::guards::GuardCounts;

/// Declare a set of counters once: each field's doc and name (its JSON
/// name too) stand in one list, and the struct, `NAMES`, `named` and the
/// field-by-field `zip_with` (so `add`, `since`, `reached`) are made from
/// it. Every set of plain counts the engine and the harness keep is one.
#[macro_export]
macro_rules! counter_set {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $( $(#[$fm:meta])* $f:ident ),* $(,)? }) => {
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ::serde::Serialize, ::serde::Deserialize)]
        $(#[$meta])*
        $vis struct $name { $( $(#[$fm])* pub $f: u64, )* }

        impl $name {
            /// Every field's stable name, in order.
            pub const NAMES: &'static [&'static str] = &[$(stringify!($f)),*];

            /// Every count with its stable name, in a fixed order.
            pub fn named(&self) -> [(&'static str, u64); $name::NAMES.len()] {
                [$((stringify!($f), self.$f)),*]
            }

            /// `f` of each field of `self` and the same field of `o`.
            pub fn zip_with(&self, o: &$name, f: impl Fn(u64, u64) -> u64) -> $name {
                $name { $($f: f(self.$f, o.$f)),* }
            }

            /// Add `o`'s counts to these.
            pub fn add(&mut self, o: &$name) {
                *self = self.zip_with(o, |a, b| a + b);
            }

            /// What happened between `earlier` and `self` (both of one
            /// source, so no count goes backwards).
            pub fn since(&self, earlier: &$name) -> $name {
                self.zip_with(earlier, |a, b| a - b)
            }

            /// One for each count that is not 0 in `o`: summed over cases,
            /// how many cases reached each.
            pub fn reached(o: &$name) -> $name {
                $name::default().zip_with(o, |_, n| u64::from(n > 0))
            }
        }
    };
}

/// Declare the engine's counters once, each tagged `plain`, `opt` (also a
/// field of [`Optimisations`], the counts that show the seeds'
/// optimisations working) or `rare` (also a field of [`RarePaths`]):
/// [`Counters`] holds them all and the guard counts, and its projections
/// onto the two sets are made from the same list.
macro_rules! engine_counters {
    (@munch [$($all:tt)*] [$($opt:tt)*] [$($rare:tt)*]) => {
        /// Monotonic counters of one opened image. Device-level counts
        /// (requests, bytes, flushes) belong to the device; these are the
        /// engine's view.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub struct Counters {
            $($all)*
            /// How often each guard's condition arose (`guards`). Absent
            /// from counters serialized before guards were counted.
            #[serde(default)]
            pub guards: GuardCounts,
        }

        engine_counters!(@sets [$($all)*] [$($opt)*] [$($rare)*]);
    };
    (@sets [$($(#[$am:meta])* pub $a:ident: u64,)*] [$($(#[$om:meta])* $o:ident,)*] [$($(#[$rm:meta])* $r:ident,)*]) => {
        counter_set! {
            /// The engine counters that show each optimisation working
            /// (multi-cluster allocation, delayed metadata writeback,
            /// zeroed, merged and delayed COW, joins); campaigns sum them
            /// over cases.
            pub struct Optimisations { $($(#[$om])* $o,)* }
        }

        counter_set! {
            /// How often each rare path of the engine ran: code that most
            /// guest requests never reach, where a bug hides from all but
            /// the cases that reach it. Summed over a run's epochs and a
            /// campaign's cases, it shows how well generation reaches each
            /// path. The field names are the stable names reports carry.
            pub struct RarePaths { $($(#[$rm])* $r,)* }
        }

        impl Counters {
            /// What happened between `earlier` and `self`, field by field
            /// (both taken from one image, so no field can go backwards).
            pub fn since(&self, earlier: &Counters) -> Counters {
                Counters {
                    $($a: self.$a - earlier.$a,)*
                    guards: self.guards.since(&earlier.guards),
                }
            }

            /// The rare-path counts among these counters.
            pub fn rare_paths(&self) -> RarePaths {
                RarePaths { $($r: self.$r),* }
            }

            /// The optimisations' counts among these counters.
            pub fn optimisations(&self) -> Optimisations {
                Optimisations { $($o: self.$o),* }
            }
        }
    };
    (@munch [$($all:tt)*] [$($opt:tt)*] [$($rare:tt)*] $(#[$m:meta])* $f:ident: plain, $($rest:tt)*) => {
        engine_counters!(@munch [$($all)* $(#[$m])* pub $f: u64,] [$($opt)*] [$($rare)*] $($rest)*);
    };
    (@munch [$($all:tt)*] [$($opt:tt)*] [$($rare:tt)*] $(#[$m:meta])* $f:ident: opt, $($rest:tt)*) => {
        engine_counters!(@munch [$($all)* $(#[$m])* pub $f: u64,] [$($opt)* $(#[$m])* $f,] [$($rare)*] $($rest)*);
    };
    (@munch [$($all:tt)*] [$($opt:tt)*] [$($rare:tt)*] $(#[$m:meta])* $f:ident: rare, $($rest:tt)*) => {
        engine_counters!(@munch [$($all)* $(#[$m])* pub $f: u64,] [$($opt)*] [$($rare)* $(#[$m])* $f,] $($rest)*);
    };
    ($($list:tt)*) => {
        engine_counters!(@munch [] [] [] $($list)*);
    };
}

engine_counters! {
    /// Guest reads.
    guest_reads: plain,
    /// Bytes the guest read.
    guest_bytes_read: plain,
    /// Guest writes.
    guest_writes: plain,
    /// Bytes the guest wrote.
    guest_bytes_written: plain,
    /// Guest flushes.
    guest_flushes: plain,
    /// Guest write_zeroes requests.
    guest_zero_writes: plain,
    /// Guest discards.
    guest_discards: plain,
    /// Guest requests flagged FUA (writes, write_zeroes and discards that
    /// must be durable when they complete); each is counted as its kind
    /// too.
    #[serde(default)]
    guest_fua_requests: plain,
    /// Of those, the ones answered with device writes flagged FUA and no
    /// metadata writeback or flush: in-place overwrites of clusters whose
    /// mapping was already durable.
    #[serde(default)]
    fua_in_place: plain,
    /// Device flushes issued to make FUA requests durable (also counted in
    /// `device_flushes`).
    #[serde(default)]
    fua_flushes: plain,
    /// Host clusters allocated for guest data.
    clusters_allocated: opt,
    /// COW areas (head or tail of a partially written new cluster) created.
    cow_created: opt,
    /// COW areas a later write covered completely, so never copied.
    cow_cancelled_whole: opt,
    /// COW areas a later write covered in part, so only the rest was copied.
    cow_cancelled_partial: opt,
    /// COW areas copied to the device (in whole or the uncancelled part).
    cow_performed: opt,
    /// Zero-source COW ranges that needed no request at all: growing the
    /// file had zeroed the new clusters (zero_cow), and nothing used them.
    cow_already_zero: opt,
    /// Bytes written to the device for COW areas.
    cow_bytes_written: opt,
    /// Efficient (no-fallback) write_zeroes requests issued for zero_cow.
    zeroing_requests: opt,
    /// zero_cow attempts the device refused, falling back to zero buffers.
    zeroing_fallbacks: opt,
    /// Writes that joined a cluster allocation already in flight.
    alloc_joins: opt,
    /// L2 tables written to the device.
    l2_writebacks: opt,
    /// Refcount blocks written to the device.
    refcount_writebacks: opt,
    /// Device flushes the engine issued (for any reason).
    device_flushes: opt,
    /// Efficient write_zeroes requests that grew the image file ahead of
    /// allocation (zero_cow, `EngineOptions::grow_ahead`).
    grow_requests: plain,
    /// Bytes those requests added to the file.
    grow_bytes: plain,
    /// Writes that waited for an overlapping in-flight write.
    overlap_waits: plain,
    /// Bytes read from the backing file.
    backing_bytes_read: plain,
    /// The refcount table replaced by a larger one (`grow_reftable`): the
    /// image outgrew what its refcount table's blocks can count.
    reftable_growths: rare,
    /// Refcount blocks created, for a table entry that had none or by a
    /// table growth.
    refblocks_created: rare,
    /// L2 tables evicted from a full cache.
    l2_evictions: rare,
    /// Of those, dirty ones: written back after the refcount step and a
    /// flush, as writeback orders it.
    l2_dirty_evictions: rare,
    /// Refcount blocks evicted from a full cache.
    refblock_evictions: rare,
    /// Of those, dirty ones, written back on eviction.
    refblock_dirty_evictions: rare,
    /// Commits whose remaining COW failed (a read of the COW source or the
    /// copy's write): the allocation doomed (by a flush) or reopened.
    cow_failures: rare,
    /// Commits whose linking failed, reopening the allocation (partly
    /// linked if some clusters were linked before the error).
    link_failures: rare,
    /// Allocations given up before they were linked.
    allocs_dropped: rare,
    /// Allocations committed early because too many were open at once.
    open_alloc_cap_commits: rare,
    /// Growing the file ahead turned off for the session by an error (or
    /// a device that refused the zeroing).
    growth_disabled: rare,
    /// Images opened with the dirty bit set whose refcounts were rebuilt.
    dirty_rebuilds: rare,
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
