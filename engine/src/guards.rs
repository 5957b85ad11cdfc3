//! The engine's guards: every rule of ARCHITECTURE.md's crash rules and
//! concurrency section that the code enforces at one place (an ordering
//! flush, a wait, a deferral of a free, a cut or join of a request at an
//! in-flight allocation, a table's self-counting), each with the broken
//! variant that breaks it and a counter of how often its guarded condition
//! arose ([`GuardCounts`]).
//!
//! A guard whose condition never arises in a campaign is untested however
//! many seeds pass: a bug there could not show. So the counter counts the
//! condition, not the code: a flush that orders something before something
//! else, a wait that had something to wait for, a free that was held back.
//! Campaigns sum the counts and print them; a test checks that the default
//! campaign makes every one of them arise.

use serde::{Deserialize, Serialize};

use crate::options::Broken;

/// One guard of the engine (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Guard {
    /// An allocation is linked only after its data writes completed.
    DataBeforeLink,
    /// Writeback flushes before the L2 tables when the refcount step did
    /// not (the data of completed writes before the entries pointing at it).
    DataFlushBeforeL2,
    /// Writeback flushes after the refcount blocks, before the L2 tables.
    RefcountFlushBeforeL2,
    /// Writeback flushes after a changed refcount table, before the L2
    /// tables.
    ReftableFlushBeforeL2,
    /// Writeback flushes after the L2 tables, before the L1 entries that
    /// point at them.
    L2FlushBeforeL1,
    /// A guest flush with no metadata to write still flushes the device, so
    /// completed writes in place become durable.
    FlushWhenClean,
    /// A free is applied only after the writeback that removed the last
    /// reference completed.
    FreeAfterDurable,
    /// A free is applied only once no data I/O started before it is in
    /// flight (a read or write still touching the cluster).
    FreeAfterInflightIo,
    /// Under lazy refcounts the dirty bit is durable before the first L2
    /// write relying on it.
    DirtyBitBeforeL2,
    /// A dirty L2 table is evicted only after the refcount step and a
    /// flush.
    EvictAfterRefcounts,
    /// Every device flush flushes the external data file first.
    DataFileFlushFirst,
    /// A grown refcount table is durable before the header points at it.
    ReftableBeforeHeader,
    /// A grown refcount table counts its own clusters and its new blocks'.
    GrowthCountsItself,
    /// A new refcount block is counted (by itself, or by the block that
    /// counts its cluster).
    RefblockCountsItself,
    /// A run counts as fresh (its zero COW skipped) only if nothing used it
    /// since growing zeroed it.
    FreshOnlyUnused,
    /// A write into a cluster whose allocation is in flight joins it or
    /// waits for it; it never allocates the cluster again.
    JoinInflightAlloc,
    /// A write is cut where the next in-flight allocation starts, so the
    /// rest goes through the dependency check.
    CutAtAlloc,
    /// A commit waits for the writes that joined the allocation before it
    /// copies what they did not cover and links it.
    CommitWaitsWriters,
    /// Reads of a cluster allocated but not linked read what its writes
    /// wrote from the new cluster.
    ReadsSeeUnlinked,
    /// A partial write into a new cluster copies the rest of the cluster
    /// (COW), or cancels it where later writes cover it.
    PartialCow,
    /// A FUA request that changed the mapping returns only once the tables
    /// its range lives in are written back durably.
    FuaMappingDurable,
    /// A FUA request's L2 table, written with FUA, follows the flush that
    /// made its data and refcounts durable.
    FuaFlushBeforeL2,
    /// A snapshot create makes the refcount increments that share the
    /// active clusters durable before the snapshot table that adds the
    /// second reference.
    SnapshotRefcountsBeforeTable,
    /// A snapshot create clears the COPIED flags of the clusters it is
    /// about to share, durably, before the refcount increments.
    CopiedClearedBeforeShared,
    /// A snapshot apply drops the old active table's references only once
    /// the new active table is durable.
    ApplyDropsOldAfterSwitch,
    /// A snapshot delete drops the snapshot's references only once the
    /// snapshot table without it is durable.
    DeleteTableBeforeDecrements,
    /// A compressed write whose bytes spill from the packing cluster into
    /// a new one takes a reference on both.
    SpillReferencesBoth,
    /// A freed cluster that held the packing tail is packed into no more.
    FreeForgetsPackingTail,
    /// The dirty-bit rebuild counts an L2 table, and what it maps, once
    /// for each L1 table that names it.
    RebuildCountsEachNaming,
    /// The dirty-bit rebuild clears the dirty bit only once the rebuilt
    /// refcounts and COPIED flags are durable.
    RebuildDurableBeforeClean,
}

/// How many guards there are.
pub const GUARDS: usize = 30;

impl Guard {
    /// Every guard, in declaration order.
    pub const ALL: [Guard; GUARDS] = [
        Guard::DataBeforeLink,
        Guard::DataFlushBeforeL2,
        Guard::RefcountFlushBeforeL2,
        Guard::ReftableFlushBeforeL2,
        Guard::L2FlushBeforeL1,
        Guard::FlushWhenClean,
        Guard::FreeAfterDurable,
        Guard::FreeAfterInflightIo,
        Guard::DirtyBitBeforeL2,
        Guard::EvictAfterRefcounts,
        Guard::DataFileFlushFirst,
        Guard::ReftableBeforeHeader,
        Guard::GrowthCountsItself,
        Guard::RefblockCountsItself,
        Guard::FreshOnlyUnused,
        Guard::JoinInflightAlloc,
        Guard::CutAtAlloc,
        Guard::CommitWaitsWriters,
        Guard::ReadsSeeUnlinked,
        Guard::PartialCow,
        Guard::FuaMappingDurable,
        Guard::FuaFlushBeforeL2,
        Guard::SnapshotRefcountsBeforeTable,
        Guard::CopiedClearedBeforeShared,
        Guard::ApplyDropsOldAfterSwitch,
        Guard::DeleteTableBeforeDecrements,
        Guard::SpillReferencesBoth,
        Guard::FreeForgetsPackingTail,
        Guard::RebuildCountsEachNaming,
        Guard::RebuildDurableBeforeClean,
    ];

    /// The guard's stable snake_case name, as reports carry it.
    pub fn name(self) -> &'static str {
        match self {
            Guard::DataBeforeLink => "data_before_link",
            Guard::DataFlushBeforeL2 => "data_flush_before_l2",
            Guard::RefcountFlushBeforeL2 => "refcount_flush_before_l2",
            Guard::ReftableFlushBeforeL2 => "reftable_flush_before_l2",
            Guard::L2FlushBeforeL1 => "l2_flush_before_l1",
            Guard::FlushWhenClean => "flush_when_clean",
            Guard::FreeAfterDurable => "free_after_durable",
            Guard::FreeAfterInflightIo => "free_after_inflight_io",
            Guard::DirtyBitBeforeL2 => "dirty_bit_before_l2",
            Guard::EvictAfterRefcounts => "evict_after_refcounts",
            Guard::DataFileFlushFirst => "data_file_flush_first",
            Guard::ReftableBeforeHeader => "reftable_before_header",
            Guard::GrowthCountsItself => "growth_counts_itself",
            Guard::RefblockCountsItself => "refblock_counts_itself",
            Guard::FreshOnlyUnused => "fresh_only_unused",
            Guard::JoinInflightAlloc => "join_inflight_alloc",
            Guard::CutAtAlloc => "cut_at_alloc",
            Guard::CommitWaitsWriters => "commit_waits_writers",
            Guard::ReadsSeeUnlinked => "reads_see_unlinked",
            Guard::PartialCow => "partial_cow",
            Guard::FuaMappingDurable => "fua_mapping_durable",
            Guard::FuaFlushBeforeL2 => "fua_flush_before_l2",
            Guard::SnapshotRefcountsBeforeTable => "snapshot_refcounts_before_table",
            Guard::CopiedClearedBeforeShared => "copied_cleared_before_shared",
            Guard::ApplyDropsOldAfterSwitch => "apply_drops_old_after_switch",
            Guard::DeleteTableBeforeDecrements => "delete_table_before_decrements",
            Guard::SpillReferencesBoth => "spill_references_both",
            Guard::FreeForgetsPackingTail => "free_forgets_packing_tail",
            Guard::RebuildCountsEachNaming => "rebuild_counts_each_naming",
            Guard::RebuildDurableBeforeClean => "rebuild_durable_before_clean",
        }
    }

    /// The deliberately broken variant that breaks this guard.
    pub fn broken(self) -> Broken {
        match self {
            Guard::DataBeforeLink => Broken::LinkBeforeData,
            Guard::DataFlushBeforeL2 => Broken::SkipDataFlushBeforeL2,
            Guard::RefcountFlushBeforeL2 => Broken::SkipRefcountFlush,
            Guard::ReftableFlushBeforeL2 => Broken::SkipReftableFlush,
            Guard::L2FlushBeforeL1 => Broken::SkipL2Flush,
            Guard::FlushWhenClean => Broken::FlushSkipsWhenClean,
            Guard::FreeAfterDurable => Broken::ReuseBeforeDurable,
            Guard::FreeAfterInflightIo => Broken::FreeIgnoresInflightIo,
            Guard::DirtyBitBeforeL2 => Broken::NoDirtyBit,
            Guard::EvictAfterRefcounts => Broken::EvictWithoutFlush,
            Guard::DataFileFlushFirst => Broken::SkipDataFileFlush,
            Guard::ReftableBeforeHeader => Broken::HeaderBeforeReftable,
            Guard::GrowthCountsItself => Broken::GrowthForgetsNewBlocks,
            Guard::RefblockCountsItself => Broken::RefblockForgetsItself,
            Guard::FreshOnlyUnused => Broken::FreshIgnoresReuse,
            Guard::JoinInflightAlloc => Broken::DoubleAlloc,
            Guard::CutAtAlloc => Broken::NoCutAtAlloc,
            Guard::CommitWaitsWriters => Broken::CommitIgnoresWriters,
            Guard::ReadsSeeUnlinked => Broken::ReadIgnoresAllocs,
            Guard::PartialCow => Broken::DropPartialCow,
            Guard::FuaMappingDurable => Broken::FuaBeforeL2,
            Guard::FuaFlushBeforeL2 => Broken::FuaWithoutPreflush,
            Guard::SnapshotRefcountsBeforeTable => Broken::SnapshotTableBeforeRefcounts,
            Guard::CopiedClearedBeforeShared => Broken::CopiedAfterRefcounts,
            Guard::ApplyDropsOldAfterSwitch => Broken::ApplyDropsOldFirst,
            Guard::DeleteTableBeforeDecrements => Broken::DeleteDropsBeforeTable,
            Guard::SpillReferencesBoth => Broken::SpillForgetsFirstReference,
            Guard::FreeForgetsPackingTail => Broken::FreeKeepsPackingTail,
            Guard::RebuildCountsEachNaming => Broken::RebuildCountsSharedOnce,
            Guard::RebuildDurableBeforeClean => Broken::RebuildCleansFirst,
        }
    }

    /// The guard named `name` (as [`Guard::name`] spells it).
    pub fn from_name(name: &str) -> Option<Guard> {
        Guard::ALL.into_iter().find(|g| g.name() == name)
    }

    /// Its place in [`Guard::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl Serialize for Guard {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Guard {
    /// A guard's name; an unknown one is an error naming it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Guard::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown guard {name:?}")))
    }
}

/// How often each guard's condition arose, by [`Guard`]. Serialized as an
/// object of the guards' names in declaration order, every guard present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuardCounts([u64; GUARDS]);

impl GuardCounts {
    /// The count of `g`.
    pub fn get(&self, g: Guard) -> u64 {
        self.0[g.index()]
    }

    /// Count `n` more times `g`'s condition arose.
    pub fn bump(&mut self, g: Guard, n: u64) {
        self.0[g.index()] += n;
    }

    /// Every count with its guard, in declaration order.
    pub fn named(&self) -> [(Guard, u64); GUARDS] {
        Guard::ALL.map(|g| (g, self.get(g)))
    }

    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &GuardCounts) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }

    /// What happened between `earlier` and `self` (no count goes
    /// backwards between two readings of one image).
    pub fn since(&self, earlier: &GuardCounts) -> GuardCounts {
        GuardCounts(std::array::from_fn(|i| self.0[i] - earlier.0[i]))
    }

    /// One for each guard whose condition arose at least once in `o`:
    /// summed over cases, how many cases exercised each guard.
    pub fn reached(o: &GuardCounts) -> GuardCounts {
        GuardCounts(o.0.map(|n| u64::from(n > 0)))
    }

    /// The guards whose condition never arose.
    pub fn never(&self) -> Vec<Guard> {
        Guard::ALL
            .into_iter()
            .filter(|&g| self.get(g) == 0)
            .collect()
    }
}

impl std::fmt::Display for GuardCounts {
    /// `data_before_link 12, data_flush_before_l2 3, ...`: every guard,
    /// zeroes too, so one whose condition never arose is seen.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .named()
            .iter()
            .map(|(g, n)| format!("{} {n}", g.name()))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

impl Serialize for GuardCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(GUARDS))?;
        for (g, n) in self.named() {
            m.serialize_entry(g.name(), &n)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for GuardCounts {
    /// An object of guard names; a name missing counts 0 (a report written
    /// before that guard existed), an unknown name is an error.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, u64>::deserialize(d)?;
        let mut out = GuardCounts::default();
        for (k, v) in map {
            let g = Guard::from_name(&k)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown guard {k:?}")))?;
            out.0[g.index()] = v;
        }
        Ok(out)
    }
}
