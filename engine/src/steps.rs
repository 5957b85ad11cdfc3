//! Where a multi-step metadata operation is: the operations whose crash
//! safety rests on the order of their steps (snapshot create, apply and
//! delete, refcount table growth, L1 growth, shrink, amend, the dirty-bit
//! rebuild), each step of each ([`MetaOp::steps`]), and a probe the engine
//! keeps current as an operation moves from step to step ([`StepProbe`]),
//! so whoever drives the engine can tell, at the moment the power goes,
//! which operation it cut and in which step ([`CrashPoints`] counts them).
//!
//! A step begins where the operation turns to making it durable: for a
//! table or header write, once it is issued and before the flush after
//! it; for a change made in the caches (COPIED cleared, refcounts, frees,
//! flags), before the writeback that writes and flushes it. It lasts until
//! the next step begins. So a crash counted against step S came once the
//! operation was on its way to make S durable and before it turned to
//! S+1: the boundary between them (a drawn crash lands at S's first flush
//! after that). `start` is the window before the first step (the
//! operation's own reads, quiescing, the first writes).
//!
//! The probe is an atomic behind an `Arc` only so that `Image` stays
//! `Send`; the engine is single-threaded and nothing else writes it. It
//! holds no I/O and draws nothing: marking steps changes no run.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// A multi-step metadata operation (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MetaOp {
    SnapshotCreate,
    SnapshotApply,
    SnapshotDelete,
    /// A new, larger refcount table (`grow_reftable`).
    ReftableGrowth,
    /// A new, larger active L1 table on resize.
    L1Growth,
    /// A resize to fewer bytes: the clusters past the end unmapped, then
    /// the size.
    Shrink,
    /// Amend of the version (up to 3 or down to 2).
    AmendVersion,
    /// Amend of lazy refcounts (on or off).
    AmendLazyRefcounts,
    /// Amend of the refcount width: a new table and blocks.
    AmendRefcountBits,
    /// The rebuild of refcounts and COPIED flags at the open of an image
    /// left dirty.
    DirtyRebuild,
    /// A compressed write that opens a new packing cluster (its bytes
    /// there, or spilling into it from the last one): references taken on
    /// each host cluster the bytes touch, the bytes written, the entry
    /// linked. Its steps are the engine's two turns under the metadata
    /// lock (the data write between them runs without it, beside other
    /// requests, so the probe shows the operation only in those turns).
    CompressedPacking,
    /// `qemu-img check -r all` (the checker's repair, `oracle::check::
    /// repair`), which the harness runs on a version 2 image cut inside a
    /// snapshot operation, and on a clean version 3 image a crash left
    /// with leaked clusters: its corrections written, then one flush, so
    /// one window (no probe: the harness places the crash itself).
    CheckRepair,
}

/// How many operations there are.
pub const META_OPS: usize = 12;

/// A step of a [`MetaOp`] (see the module doc for when one begins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Step {
    /// Before the first step.
    Start,
    /// The dirty bit set in the header (a version 3 snapshot operation).
    DirtyBit,
    /// COPIED cleared in the tables about to be shared.
    CopiedCleared,
    /// Refcounts changed and written back.
    Refcounts,
    /// A new table (snapshot table, L1, refcount table) written.
    Table,
    /// The header switched to the new table or value.
    Header,
    /// The old table's clusters freed and written back.
    OldFreed,
    /// COPIED flags recomputed and written back.
    Flags,
    /// L2 entries changed and written back.
    L2,
    /// L1 entries changed and written back.
    L1,
    /// Zero clusters expanded to allocated zeroes (down to version 2).
    ZeroClusters,
    /// The dirty bit cleared again.
    DirtyCleared,
}

/// How many steps there are.
pub const STEPS: usize = 12;

impl Step {
    /// Every step, in declaration order.
    pub const ALL: [Step; STEPS] = [
        Step::Start,
        Step::DirtyBit,
        Step::CopiedCleared,
        Step::Refcounts,
        Step::Table,
        Step::Header,
        Step::OldFreed,
        Step::Flags,
        Step::L2,
        Step::L1,
        Step::ZeroClusters,
        Step::DirtyCleared,
    ];

    /// The step's stable snake_case name, as reports carry it.
    pub fn name(self) -> &'static str {
        match self {
            Step::Start => "start",
            Step::DirtyBit => "dirty_bit",
            Step::CopiedCleared => "copied_cleared",
            Step::Refcounts => "refcounts",
            Step::Table => "table",
            Step::Header => "header",
            Step::OldFreed => "old_freed",
            Step::Flags => "flags",
            Step::L2 => "l2",
            Step::L1 => "l1",
            Step::ZeroClusters => "zero_clusters",
            Step::DirtyCleared => "dirty_cleared",
        }
    }
}

impl MetaOp {
    /// Every operation, in declaration order.
    pub const ALL: [MetaOp; META_OPS] = [
        MetaOp::SnapshotCreate,
        MetaOp::SnapshotApply,
        MetaOp::SnapshotDelete,
        MetaOp::ReftableGrowth,
        MetaOp::L1Growth,
        MetaOp::Shrink,
        MetaOp::AmendVersion,
        MetaOp::AmendLazyRefcounts,
        MetaOp::AmendRefcountBits,
        MetaOp::DirtyRebuild,
        MetaOp::CompressedPacking,
        MetaOp::CheckRepair,
    ];

    /// The operation's stable snake_case name, as reports carry it.
    pub fn name(self) -> &'static str {
        match self {
            MetaOp::SnapshotCreate => "snapshot_create",
            MetaOp::SnapshotApply => "snapshot_apply",
            MetaOp::SnapshotDelete => "snapshot_delete",
            MetaOp::ReftableGrowth => "reftable_growth",
            MetaOp::L1Growth => "l1_growth",
            MetaOp::Shrink => "shrink",
            MetaOp::AmendVersion => "amend_version",
            MetaOp::AmendLazyRefcounts => "amend_lazy_refcounts",
            MetaOp::AmendRefcountBits => "amend_refcount_bits",
            MetaOp::DirtyRebuild => "dirty_rebuild",
            MetaOp::CompressedPacking => "compressed_packing",
            MetaOp::CheckRepair => "check_repair",
        }
    }

    /// The steps the operation can be in, in the order it takes them (a
    /// run may skip some: a version 2 image has no dirty bit, an apply
    /// in place writes no new table).
    pub fn steps(self) -> &'static [Step] {
        use Step::*;
        match self {
            MetaOp::SnapshotCreate => &[
                Start,
                DirtyBit,
                CopiedCleared,
                Refcounts,
                Table,
                Header,
                OldFreed,
                DirtyCleared,
            ],
            MetaOp::SnapshotApply => &[
                Start,
                DirtyBit,
                Refcounts,
                L1,
                Table,
                Header,
                OldFreed,
                Flags,
                DirtyCleared,
            ],
            MetaOp::SnapshotDelete => &[
                Start,
                DirtyBit,
                Table,
                Header,
                OldFreed,
                Flags,
                DirtyCleared,
            ],
            MetaOp::ReftableGrowth => &[Start, Table, Header],
            MetaOp::L1Growth => &[Start, Table, Header, OldFreed],
            MetaOp::Shrink => &[Start, L2, L1, Header],
            // A downgrade goes Start, Refcounts, ZeroClusters, Header; an
            // upgrade Start, then Table, Header, OldFreed if it rewrites
            // the snapshot table, then Header again. In this order a step
            // drawn for either is reached where its name says (a step
            // crash waits for the first step at or past the drawn one).
            MetaOp::AmendVersion => &[Start, Table, Refcounts, ZeroClusters, Header, OldFreed],
            MetaOp::AmendLazyRefcounts => &[Start, Header],
            MetaOp::AmendRefcountBits => &[Start, Table, Header],
            MetaOp::DirtyRebuild => &[Start, Refcounts, Flags, Header],
            // Start: the bytes placed and counted, then written (a crash
            // drawn there comes at that write); L2: the entry set, made
            // durable by the writeback after the refcounts (the request's
            // own without delayed metadata, the next flush's with it).
            MetaOp::CompressedPacking => &[Start, L2],
            MetaOp::CheckRepair => &[Start],
        }
    }

    /// The steps it can be in on a version 2 image (`v2`) or a version 3
    /// one. A version 2 image has no dirty bit for a snapshot operation
    /// to set and clear, and no dirty bit that asks for a rebuild at open
    /// (its repair after a crash inside a snapshot operation is `check -r`;
    /// on both versions `check -r` also reclaims what a crash leaked).
    /// Its snapshots are all of the active
    /// table's size (a version 2 image with snapshots cannot be resized,
    /// and a downgrade refuses a snapshot of another size), so an apply
    /// overwrites the active table in place: no new table, no header
    /// switch. An amend of its version is an upgrade, which rewrites the
    /// snapshot table (table, header, old freed) when an entry lacks the
    /// snapshot's size, as entries without extra data do (older writers'
    /// form; the simulation writes it with
    /// `EngineOptions::legacy_snapshot_entries`), then switches the
    /// header; of a version 3 image a downgrade (refcounts, zero clusters
    /// expanded, the header). Lazy refcounts and a refcount width other than 16
    /// need version 3, and their amends are refused on version 2 before
    /// anything is written.
    pub fn steps_on(self, v2: bool) -> Vec<Step> {
        use Step::*;
        let only: &[Step] = match (self, v2) {
            (MetaOp::SnapshotApply, true) => &[Start, Refcounts, L1, OldFreed, Flags],
            (MetaOp::AmendVersion, true) => &[Start, Table, Header, OldFreed],
            (MetaOp::AmendVersion, false) => &[Start, Refcounts, ZeroClusters, Header],
            (
                MetaOp::AmendLazyRefcounts | MetaOp::AmendRefcountBits | MetaOp::DirtyRebuild,
                true,
            ) => &[],
            _ => self.steps(),
        };
        only.iter()
            .copied()
            .filter(|&s| !(v2 && matches!(s, DirtyBit | DirtyCleared)))
            .collect()
    }

    /// Whether it is a snapshot operation (create, apply or delete).
    pub fn is_snapshot(self) -> bool {
        matches!(
            self,
            MetaOp::SnapshotCreate | MetaOp::SnapshotApply | MetaOp::SnapshotDelete
        )
    }

    /// Its place in [`MetaOp::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Where `step` comes in [`MetaOp::steps`] (0, the start, for a step
    /// the operation does not have).
    pub fn step_index(self, step: Step) -> usize {
        self.steps().iter().position(|&s| s == step).unwrap_or(0)
    }
}

/// The engine's side of the probe: which operation is running and in
/// which step, 0 for none. Encoded `(op + 1) << 8 | step`.
#[derive(Debug, Clone, Default)]
pub struct StepProbe(Arc<AtomicU32>);

impl StepProbe {
    /// The operation running and its step, if one is.
    pub fn get(&self) -> Option<(MetaOp, Step)> {
        decode(self.0.load(Ordering::Relaxed))
    }

    /// Enter `op` at its start; the returned scope puts back what was
    /// running before (an operation inside another: a refcount table grown
    /// by a snapshot create counts as growth until it ends).
    pub fn enter(&self, op: MetaOp) -> OpScope {
        let prev = self.0.swap(encode(op, Step::Start), Ordering::Relaxed);
        OpScope {
            probe: self.0.clone(),
            prev,
        }
    }

    /// The running operation has begun `step` (nothing if none runs).
    pub fn step(&self, step: Step) {
        if let Some((op, _)) = self.get() {
            debug_assert!(
                op.steps().contains(&step),
                "{} has no step {}",
                op.name(),
                step.name()
            );
            self.0.store(encode(op, step), Ordering::Relaxed);
        }
    }
}

/// An operation running (see [`StepProbe::enter`]); dropped, the one
/// before it is current again, whether the operation ended or was
/// dropped with the future that ran it.
#[must_use = "the operation ends when its scope drops"]
pub struct OpScope {
    probe: Arc<AtomicU32>,
    prev: u32,
}

impl Drop for OpScope {
    fn drop(&mut self) {
        self.probe.store(self.prev, Ordering::Relaxed);
    }
}

fn encode(op: MetaOp, step: Step) -> u32 {
    ((op.index() as u32 + 1) << 8) | step as u32
}

fn decode(v: u32) -> Option<(MetaOp, Step)> {
    let op = (v >> 8).checked_sub(1)?;
    Some((
        *MetaOp::ALL.get(op as usize)?,
        *Step::ALL.get((v & 0xff) as usize)?,
    ))
}

/// Crash points by operation and step: how many crashes landed while
/// each operation was in each of its steps. Serialized as an object of
/// operations, each an object of its steps (every step of
/// [`MetaOp::steps`], zeroes too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashPoints([[u64; STEPS]; META_OPS]);

impl Default for CrashPoints {
    fn default() -> Self {
        CrashPoints([[0; STEPS]; META_OPS])
    }
}

impl CrashPoints {
    /// The count of `op` in `step`.
    pub fn get(&self, op: MetaOp, step: Step) -> u64 {
        self.0[op.index()][step as usize]
    }

    /// Count one crash in `op`'s `step`.
    pub fn bump(&mut self, op: MetaOp, step: Step) {
        self.0[op.index()][step as usize] += 1;
    }

    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &CrashPoints) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }

    /// Every crash point counted.
    pub fn total(&self) -> u64 {
        self.0.iter().flatten().sum()
    }

    /// The crash points inside `op`, at any step.
    pub fn of_op(&self, op: MetaOp) -> u64 {
        self.0[op.index()].iter().sum()
    }

    /// The steps of `op` at least one crash landed in, in order.
    pub fn crashed_steps(&self, op: MetaOp) -> impl Iterator<Item = Step> + '_ {
        op.steps()
            .iter()
            .copied()
            .filter(move |&s| self.get(op, s) > 0)
    }

    /// Every step of every operation with its count, in order.
    pub fn named(&self) -> Vec<(MetaOp, Step, u64)> {
        MetaOp::ALL
            .iter()
            .flat_map(|&op| op.steps().iter().map(move |&s| (op, s)))
            .map(|(op, s)| (op, s, self.get(op, s)))
            .collect()
    }

    /// As `Display` shows them, with only the steps an image of that
    /// version can be in ([`MetaOp::steps_on`]); an operation with none
    /// there is `n/a`.
    pub fn show_on(&self, v2: bool) -> String {
        MetaOp::ALL
            .iter()
            .map(|&op| {
                let steps: Vec<String> = op
                    .steps_on(v2)
                    .iter()
                    .map(|&s| format!("{} {}", s.name(), self.get(op, s)))
                    .collect();
                if steps.is_empty() {
                    format!("{}: n/a", op.name())
                } else {
                    format!("{}: {}", op.name(), steps.join(", "))
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Serialized as [`CrashPoints`] is, with only the steps an image of
    /// that version can be in (an operation with none left out).
    pub fn on(&self, v2: bool) -> OnVersion<'_> {
        OnVersion { points: self, v2 }
    }
}

/// [`CrashPoints::on`].
pub struct OnVersion<'a> {
    points: &'a CrashPoints,
    v2: bool,
}

impl Serialize for OnVersion<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ops = MetaOp::ALL
            .iter()
            .map(|&op| (op, op.steps_on(self.v2)))
            .filter(|(_, steps)| !steps.is_empty())
            .collect();
        serialize_ops(self.points, ops, s)
    }
}

impl std::fmt::Display for CrashPoints {
    /// `snapshot_create: start 3, dirty_bit 12, ...; snapshot_apply: ...`:
    /// every step a version 3 image can be in, zeroes too, so a boundary
    /// never crashed is seen.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.show_on(false))
    }
}

impl Serialize for CrashPoints {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ops = MetaOp::ALL
            .iter()
            .map(|&op| (op, op.steps().to_vec()))
            .collect();
        serialize_ops(self, ops, s)
    }
}

/// `points` as an object of the operations `ops` names, each an object
/// of the steps given with it (zeroes too).
fn serialize_ops<S: Serializer>(
    points: &CrashPoints,
    ops: Vec<(MetaOp, Vec<Step>)>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    struct Steps<'a>(&'a CrashPoints, MetaOp, &'a [Step]);
    impl Serialize for Steps<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(self.2.len()))?;
            for &st in self.2 {
                m.serialize_entry(st.name(), &self.0.get(self.1, st))?;
            }
            m.end()
        }
    }
    let mut m = s.serialize_map(Some(ops.len()))?;
    for (op, steps) in &ops {
        m.serialize_entry(op.name(), &Steps(points, *op, steps))?;
    }
    m.end()
}
