//! The engine's options: the five optimisation switches from the seeds, the
//! metadata cache sizes and limits, and the deliberately broken variants the
//! harness must catch (`crate::broken`).

use serde::{Deserialize, Serialize};

/// The write-path optimisations, each a switch, all on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switches {
    /// Seed 002: one device request per run of contiguous host clusters, and
    /// contiguous allocation of a run of clusters for a multi-cluster write.
    pub multi_cluster: bool,
    /// Seed 003: L2 and refcount tables written back lazily (at flush or
    /// eviction), in dependency order, instead of synchronously per write.
    pub delayed_metadata: bool,
    /// Seed 001: zero a new cluster with one efficient write_zeroes when its
    /// COW areas would be zeroes, then write only the guest data.
    pub zero_cow: bool,
    /// Neighbouring COW and guest data as one device write: head COW,
    /// guest data and tail COW where the data goes with the COW, and each
    /// contiguous range a commit still has to copy (delayed COW).
    pub merge_cow: bool,
    /// Seed 000: defer the COW of an unaligned allocating write so that later
    /// writes covering the COW areas can cancel it.
    pub delayed_cow: bool,
}

impl Switches {
    /// The names, in the order used by reports and `--switches` masks.
    pub const NAMES: [&'static str; 5] = [
        "multi_cluster",
        "delayed_metadata",
        "zero_cow",
        "merge_cow",
        "delayed_cow",
    ];

    pub const ALL_ON: Switches = Switches {
        multi_cluster: true,
        delayed_metadata: true,
        zero_cow: true,
        merge_cow: true,
        delayed_cow: true,
    };

    pub const ALL_OFF: Switches = Switches {
        multi_cluster: false,
        delayed_metadata: false,
        zero_cow: false,
        merge_cow: false,
        delayed_cow: false,
    };

    /// Switches from a 5-bit mask; bit i is `NAMES[i]`.
    pub fn from_mask(mask: u8) -> Switches {
        Switches {
            multi_cluster: mask & 1 != 0,
            delayed_metadata: mask & 2 != 0,
            zero_cow: mask & 4 != 0,
            merge_cow: mask & 8 != 0,
            delayed_cow: mask & 16 != 0,
        }
    }

    pub fn mask(&self) -> u8 {
        self.multi_cluster as u8
            | (self.delayed_metadata as u8) << 1
            | (self.zero_cow as u8) << 2
            | (self.merge_cow as u8) << 3
            | (self.delayed_cow as u8) << 4
    }

    /// (name, value) pairs in `NAMES` order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, bool)> {
        let m = self.mask();
        Self::NAMES
            .into_iter()
            .enumerate()
            .map(move |(i, n)| (n, m & (1 << i) != 0))
    }

    /// These switches with the one called `name` set to `value`.
    pub fn with(&self, name: &str, value: bool) -> Option<Switches> {
        let i = Self::NAMES.iter().position(|n| *n == name)?;
        let m = if value {
            self.mask() | 1 << i
        } else {
            self.mask() & !(1 << i)
        };
        Some(Switches::from_mask(m))
    }
}

impl Default for Switches {
    fn default() -> Self {
        Switches::ALL_ON
    }
}

/// Deliberately broken engine variants. Each reintroduces one classic
/// crash-consistency bug so a test can prove the harness catches it. The
/// type exists in every build, so the hooks (`broken::is`) read as ordinary
/// code; a simulated case selects one (`EngineOptions::broken`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Broken {
    /// Link the L2 entry without waiting for the data write to complete.
    LinkBeforeData,
    /// Skip the device flush between refcount and L2 writeback.
    SkipRefcountFlush,
    /// Drop the COW of a partial cluster.
    DropPartialCow,
    /// Reuse a freed cluster before the L2 update that freed it is durable.
    ReuseBeforeDurable,
    /// Allocate a second cluster for a write into a cluster whose
    /// allocation is still in flight.
    DoubleAlloc,
    /// Refcount table growth that leaves the clusters it takes uncounted
    /// (refcount 0): the new table's and those of the refcount blocks it
    /// creates to count them. (The new blocks alone would rarely show: a
    /// growth usually lands inside what the old blocks count, and creates
    /// none.)
    GrowthForgetsNewBlocks,
    /// Evict a dirty L2 table without first writing the refcounts and
    /// flushing: the table may reach the disk before the data and the
    /// refcounts its entries rely on.
    EvictWithoutFlush,
    /// Writeback skips the flush before the L2 tables when the refcount
    /// step did not flush: an L2 entry may reach the disk before the data
    /// it points at (seen where allocations change no refcount: lazy
    /// refcounts, external data files, write_zeroes and discards).
    SkipDataFlushBeforeL2,
    /// Writeback skips the flush after writing a changed refcount table.
    SkipReftableFlush,
    /// Writeback skips the flush between the L2 tables and the L1 entries
    /// pointing at them.
    SkipL2Flush,
    /// A guest flush with no metadata to write issues no device flush.
    FlushSkipsWhenClean,
    /// Frees wait for the writeback that makes them durable but not for
    /// data I/O still in flight, so a cluster may be reused while a read
    /// or write started before the free still touches it.
    FreeIgnoresInflightIo,
    /// Under lazy refcounts the dirty bit is never set: L2 tables reach
    /// the disk while the refcounts on disk are stale and the image says
    /// it is clean.
    NoDirtyBit,
    /// A device flush does not flush the external data file first.
    SkipDataFileFlush,
    /// Refcount table growth writes the header pointing at the new table
    /// without flushing the table first.
    HeaderBeforeReftable,
    /// A new refcount block leaves its own cluster at refcount 0.
    RefblockForgetsItself,
    /// A run inside the range growing zeroed counts as fresh even if it
    /// was used (and freed) since, so its zero COW is skipped over old
    /// data.
    FreshIgnoresReuse,
    /// A write is not cut where the next in-flight allocation starts: the
    /// rest of it maps the allocation's clusters as if it were not there.
    NoCutAtAlloc,
    /// A commit does not wait for the writes that joined the allocation:
    /// it copies and links while their data is still on its way.
    CommitIgnoresWriters,
    /// Reads ignore allocations not yet linked and read the cluster's old
    /// mapping.
    ReadIgnoresAllocs,
    /// A FUA request that changed the mapping returns once its data is
    /// durable, its L2 entry still only in the cache.
    FuaBeforeL2,
    /// A FUA request writes its L2 tables with FUA but without the flush
    /// before them: FUA makes only its own write durable, not the data
    /// and refcounts the table points at.
    FuaWithoutPreflush,
    /// A snapshot create switches in the snapshot table naming the new
    /// snapshot before the refcount increments that share its clusters
    /// are written: a crash between the two leaves clusters with two
    /// references and a refcount of 1.
    SnapshotTableBeforeRefcounts,
    /// A snapshot create writes the refcount increments that share the
    /// active clusters before it clears their COPIED flags: a crash
    /// between the two leaves flags saying "refcount 1, write in place"
    /// on clusters counted twice.
    CopiedAfterRefcounts,
    /// A snapshot apply drops the old active table's references before
    /// the new active table is durable: a crash between leaves the old
    /// table naming clusters counted too low, or freed and reused.
    ApplyDropsOldFirst,
    /// A snapshot delete drops the snapshot's references before the
    /// snapshot table without it is durable: a crash between leaves the
    /// snapshot naming clusters counted too low, or freed and reused.
    DeleteDropsBeforeTable,
    /// A compressed write whose bytes spill from the packing cluster into
    /// the next one takes no reference on the first: it is counted once
    /// too few.
    SpillForgetsFirstReference,
    /// A freed host cluster stays the packing tail: the next compressed
    /// write packs into a cluster that is free, or already handed out
    /// whole to something else.
    FreeKeepsPackingTail,
    /// The dirty-bit rebuild counts an L2 table (and what it maps) once
    /// however many L1 tables name it: a table a snapshot shares ends up
    /// counted once for two references.
    RebuildCountsSharedOnce,
    /// The dirty-bit rebuild clears the dirty bit (and makes the header
    /// durable) before it writes the rebuilt refcounts and flags: a crash
    /// between leaves a clean image whose refcounts are the stale ones
    /// the bit was there to excuse.
    RebuildCleansFirst,
}

impl Broken {
    /// Every variant, in declaration order.
    pub const ALL: [Broken; 30] = [
        Broken::LinkBeforeData,
        Broken::SkipRefcountFlush,
        Broken::DropPartialCow,
        Broken::ReuseBeforeDurable,
        Broken::DoubleAlloc,
        Broken::GrowthForgetsNewBlocks,
        Broken::EvictWithoutFlush,
        Broken::SkipDataFlushBeforeL2,
        Broken::SkipReftableFlush,
        Broken::SkipL2Flush,
        Broken::FlushSkipsWhenClean,
        Broken::FreeIgnoresInflightIo,
        Broken::NoDirtyBit,
        Broken::SkipDataFileFlush,
        Broken::HeaderBeforeReftable,
        Broken::RefblockForgetsItself,
        Broken::FreshIgnoresReuse,
        Broken::NoCutAtAlloc,
        Broken::CommitIgnoresWriters,
        Broken::ReadIgnoresAllocs,
        Broken::FuaBeforeL2,
        Broken::FuaWithoutPreflush,
        Broken::SnapshotTableBeforeRefcounts,
        Broken::CopiedAfterRefcounts,
        Broken::ApplyDropsOldFirst,
        Broken::DeleteDropsBeforeTable,
        Broken::SpillForgetsFirstReference,
        Broken::FreeKeepsPackingTail,
        Broken::RebuildCountsSharedOnce,
        Broken::RebuildCleansFirst,
    ];

    /// The variant's name on the command line: kebab-case
    /// (`growth-forgets-new-blocks`).
    pub fn name(self) -> &'static str {
        match self {
            Broken::LinkBeforeData => "link-before-data",
            Broken::SkipRefcountFlush => "skip-refcount-flush",
            Broken::DropPartialCow => "drop-partial-cow",
            Broken::ReuseBeforeDurable => "reuse-before-durable",
            Broken::DoubleAlloc => "double-alloc",
            Broken::GrowthForgetsNewBlocks => "growth-forgets-new-blocks",
            Broken::EvictWithoutFlush => "evict-without-flush",
            Broken::SkipDataFlushBeforeL2 => "skip-data-flush-before-l2",
            Broken::SkipReftableFlush => "skip-reftable-flush",
            Broken::SkipL2Flush => "skip-l2-flush",
            Broken::FlushSkipsWhenClean => "flush-skips-when-clean",
            Broken::FreeIgnoresInflightIo => "free-ignores-inflight-io",
            Broken::NoDirtyBit => "no-dirty-bit",
            Broken::SkipDataFileFlush => "skip-data-file-flush",
            Broken::HeaderBeforeReftable => "header-before-reftable",
            Broken::RefblockForgetsItself => "refblock-forgets-itself",
            Broken::FreshIgnoresReuse => "fresh-ignores-reuse",
            Broken::NoCutAtAlloc => "no-cut-at-alloc",
            Broken::CommitIgnoresWriters => "commit-ignores-writers",
            Broken::ReadIgnoresAllocs => "read-ignores-allocs",
            Broken::FuaBeforeL2 => "fua-before-l2",
            Broken::FuaWithoutPreflush => "fua-without-preflush",
            Broken::SnapshotTableBeforeRefcounts => "snapshot-table-before-refcounts",
            Broken::CopiedAfterRefcounts => "copied-after-refcounts",
            Broken::ApplyDropsOldFirst => "apply-drops-old-first",
            Broken::DeleteDropsBeforeTable => "delete-drops-before-table",
            Broken::SpillForgetsFirstReference => "spill-forgets-first-reference",
            Broken::FreeKeepsPackingTail => "free-keeps-packing-tail",
            Broken::RebuildCountsSharedOnce => "rebuild-counts-shared-once",
            Broken::RebuildCleansFirst => "rebuild-cleans-first",
        }
    }
}

/// A name that is not one of the [`Broken`] variants'.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown broken variant {name:?} (known: {known})", name = self.0, known = known_broken_names())]
pub struct UnknownBroken(pub String);

/// Every variant's name, comma-separated.
fn known_broken_names() -> String {
    Broken::ALL.map(Broken::name).join(", ")
}

impl std::str::FromStr for Broken {
    type Err = UnknownBroken;

    /// The kebab-case name [`Broken::name`] gives.
    fn from_str(s: &str) -> Result<Broken, UnknownBroken> {
        Broken::ALL
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| UnknownBroken(s.to_string()))
    }
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How far ahead the image file grows by default: 8 MiB, one zeroing
/// request per 128 new 64 KiB clusters, or per 32 guest writes of 256 KiB
/// (QEMU's preallocate filter grows 128 MiB at a time).
pub const DEFAULT_GROW_AHEAD: u64 = 8 << 20;

/// Options of an opened image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineOptions {
    pub switches: Switches,
    /// L2 tables kept in the cache; at least 2.
    pub l2_cache_tables: usize,
    /// Refcount blocks kept in the cache; at least 2.
    pub refcount_cache_tables: usize,
    /// Upper bound on bytes of metadata (L1, refcount table, cached tables)
    /// the engine will hold in memory for one image; an image that needs more
    /// is refused with an error that names the table.
    pub metadata_memory_limit: u64,
    /// Open read-only: no header update, no writes.
    pub read_only: bool,
    /// Seed 001's second point, under `zero_cow`: when the allocator hands
    /// out clusters past the end of the image file, the engine grows the
    /// file up to the next multiple of this many bytes (rounded to whole
    /// clusters) with one efficient write_zeroes, so that the data writes
    /// that follow land inside the file instead of extending it one request
    /// at a time. 0 turns growing off. A case file written before this
    /// option existed reads it as 0, so that it replays as it ran.
    #[serde(default)]
    pub grow_ahead: u64,
    /// A write that needs a new L2 table allocates it before its data
    /// clusters, as QEMU does, so that clusters land where QEMU puts them
    /// (the real-file tools turn it on, for outputs that show host
    /// offsets). Off, the table is allocated when the data is linked,
    /// after the data clusters: the order the simulation's campaigns and
    /// pinned seeds were measured with. Left out of the JSON when off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub l2_before_data: bool,
    /// Internal snapshot entries of a version 2 image are written without
    /// extra data, as writers older than the extra data fields did (the
    /// specification makes them optional on version 2): no snapshot disk
    /// size, so an upgrade to version 3, which requires it, must rewrite
    /// the snapshot table first. Only the simulation sets it, so that its
    /// crashes reach that rewrite on images such writers left. Left out
    /// of the JSON when off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub legacy_snapshot_entries: bool,
    /// A broken variant to run instead of the correct engine (only the
    /// simulation sets one). Left out of the JSON when unset.
    #[serde(default)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken: Option<Broken>,
    /// Debug builds assert the crash rules where they are kept (`rules`):
    /// a broken variant then panics naming the rule it broke. Off, only
    /// the harness's own judges see it, as in a release build, which
    /// checks nothing whatever this says; the tests that measure the
    /// harness turn it off. Left out of the JSON when on.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub rule_checks: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            switches: Switches::ALL_ON,
            l2_cache_tables: 32,
            refcount_cache_tables: 8,
            metadata_memory_limit: 256 << 20,
            read_only: false,
            grow_ahead: DEFAULT_GROW_AHEAD,
            l2_before_data: false,
            legacy_snapshot_entries: false,
            broken: None,
            rule_checks: true,
        }
    }
}
