//! The exhaust space: the vocabulary of guest operations, the geometries
//! they run on, every workload built from them, and each workload as an
//! ordinary [`Case`].
//!
//! The vocabulary is four kinds of operation over three extents. Extent `A`
//! is guest cluster 0, `B` cluster 1 and `AB` both, so two operations of a
//! workload touch the same cluster (`A` then `A`), overlap (`A` then `AB`)
//! or lie side by side (`A` then `B`). The kinds:
//! - `W`, an aligned write of the whole extent;
//! - `U`, an unaligned write of the middle half of the extent moved one
//!   sector on: it starts at an odd sector, so inside a subcluster too
//!   (with extended L2), leaves a head and a tail to copy (COW) in every
//!   cluster it touches, over `A` leaves whole subclusters untouched at
//!   both ends, and over `AB` crosses the cluster boundary;
//! - `Z`, write zeroes over the extent, without unmap (whole clusters:
//!   they become zero clusters, an allocated one keeping its host
//!   cluster, as QEMU's driver keeps it);
//! - `D`, discard of the extent (whole clusters, freed).
//!
//! Beyond these, which make the default vocabulary, the extra operations
//! ([`VocabOp::extra`]) exercise the metadata paths that are not guest
//! requests: `C`, a compressed write of each cluster of the extent (one
//! request per cluster, issued together); `S`, an internal snapshot of the
//! disk; `R`, revert to (apply) the first snapshot that exists; `X`,
//! delete it. The last three cover the whole disk and take no extent; `R`
//! and `X` do nothing when no snapshot exists. They multiply the space
//! (16 operations instead of 12), so a run names them (`--vocabulary`).
//!
//! The FUA operations ([`VocabOp::fua`], `--vocabulary fua`) are `FW`,
//! `FU` and `FZ`: `W`, `U` and `Z` flagged FUA, each durable once it
//! completes, so every crash after it must keep it whatever flushes the
//! workload has (an unaligned one also copies its cluster's head and tail
//! before its link can be durable).
//!
//! A workload is 1 to 3 of these operations, one after the other, with a
//! guest flush (`F`) after any subset of them: every placement of flushes.
//! Each step is a concurrency group of its own, so a step starts once the
//! one before it has completed.
//!
//! The geometries: 4 KiB clusters, 64 KiB clusters, 64 KiB clusters with
//! extended L2 entries, each without and with a backing file (version 3,
//! 16-bit refcounts); and 4 KiB clusters on version 2 images (without and
//! with a backing file), where only a snapshot operation's order protects
//! the image, and with 1-bit and 64-bit refcounts, where a compressed
//! write packs nothing (1 bit counts one reference) or a refcount block
//! covers few clusters. A 64 KiB
//! cluster moves sixteen times the bytes of a 4 KiB one through every run
//! (data, COW, the reads after each crash), so by default 4 KiB geometries
//! get workloads of up to 3 operations and 64 KiB ones up to 2
//! ([`Geometry::default_max_ops`]).

use crate::exec::SchedulePolicy;
use std::fmt;

use engine::{Compat, EngineOptions};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};

use crate::case::{BackingSpec, Case, ImageSpec, Op, CASE_VERSION};
use crate::disk::DiskOptions;

/// Most operations in one workload.
pub const MAX_OPS: usize = 3;

/// The seed of every exhaust case. Each step runs alone, so the seed only
/// moves request latencies; what is enumerated is the crash states.
pub const SEED: u64 = 0;

/// How far ahead the image file grows (`EngineOptions::grow_ahead`): one
/// 64 KiB step, so growing is on as by default, but a crash state that
/// keeps the growth in part costs 128 sectors to build, not the 16,384 of
/// the 8 MiB default (campaigns draw that one).
pub const GROW_AHEAD: u64 = 64 << 10;

/// Clusters in the virtual disk: the two the extents cover, and one more
/// that no operation touches (the reads after every crash check that it
/// kept its content, and the extents do not end at the disk's end, where
/// discard and write zeroes take a partial last cluster as whole).
pub const DISK_CLUSTERS: u64 = 3;

/// What an operation of the vocabulary does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `W`: an aligned write of the whole extent.
    Write,
    /// `U`: a write from sector 3 of the extent to 2 sectors before its end.
    Unaligned,
    /// `Z`: write zeroes over the extent.
    Zeroes,
    /// `D`: discard the extent.
    Discard,
    /// `C`: a compressed write of each cluster of the extent.
    Compressed,
    /// `S`: an internal snapshot (no extent).
    Snapshot,
    /// `R`: apply the first snapshot that exists (no extent).
    Revert,
    /// `X`: delete the first snapshot that exists (no extent).
    Delete,
    /// `FW`: `W` flagged FUA.
    FuaWrite,
    /// `FU`: `U` flagged FUA.
    FuaUnaligned,
    /// `FZ`: `Z` flagged FUA.
    FuaZeroes,
}

impl Kind {
    const ALL: [Kind; 4] = [Kind::Write, Kind::Unaligned, Kind::Zeroes, Kind::Discard];

    /// Whether it covers the whole disk rather than an extent.
    fn whole_disk(self) -> bool {
        matches!(self, Kind::Snapshot | Kind::Revert | Kind::Delete)
    }

    fn code(self) -> &'static str {
        match self {
            Kind::Write => "W",
            Kind::Unaligned => "U",
            Kind::Zeroes => "Z",
            Kind::Discard => "D",
            Kind::Compressed => "C",
            Kind::Snapshot => "S",
            Kind::Revert => "R",
            Kind::Delete => "X",
            Kind::FuaWrite => "FW",
            Kind::FuaUnaligned => "FU",
            Kind::FuaZeroes => "FZ",
        }
    }

    /// The same kind without FUA, and whether it had it.
    fn unflagged(self) -> (Kind, bool) {
        match self {
            Kind::FuaWrite => (Kind::Write, true),
            Kind::FuaUnaligned => (Kind::Unaligned, true),
            Kind::FuaZeroes => (Kind::Zeroes, true),
            k => (k, false),
        }
    }
}

/// The guest clusters an operation covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Extent {
    /// Cluster 0.
    A,
    /// Cluster 1.
    B,
    /// Clusters 0 and 1.
    AB,
}

impl Extent {
    const ALL: [Extent; 3] = [Extent::A, Extent::B, Extent::AB];

    /// First cluster and number of clusters.
    fn clusters(self) -> (u64, u64) {
        match self {
            Extent::A => (0, 1),
            Extent::B => (1, 1),
            Extent::AB => (0, 2),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Extent::A => "A",
            Extent::B => "B",
            Extent::AB => "AB",
        }
    }
}

/// One operation of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct VocabOp {
    pub kind: Kind,
    pub extent: Extent,
}

impl VocabOp {
    /// The whole vocabulary, in its order: by kind (`W`, `U`, `Z`, `D`),
    /// then by extent (`A`, `B`, `AB`).
    pub fn all() -> Vec<VocabOp> {
        Self::over_every_extent(&Kind::ALL)
    }

    /// Each of `kinds` over `A`, `B` and `AB`, kind by kind.
    fn over_every_extent(kinds: &[Kind]) -> Vec<VocabOp> {
        kinds
            .iter()
            .flat_map(|&kind| {
                Extent::ALL
                    .iter()
                    .map(move |&extent| VocabOp { kind, extent })
            })
            .collect()
    }

    /// The extra operations, not in the default vocabulary (see the
    /// module's doc), in their order: `C(A)`, `C(B)`, `C(AB)`, `S`, `R`,
    /// `X`. The whole-disk ones carry extent `A`, which they ignore.
    pub fn extra() -> Vec<VocabOp> {
        let mut out: Vec<VocabOp> = Extent::ALL
            .iter()
            .map(|&extent| VocabOp {
                kind: Kind::Compressed,
                extent,
            })
            .collect();
        out.extend(
            [Kind::Snapshot, Kind::Revert, Kind::Delete].map(|kind| VocabOp {
                kind,
                extent: Extent::A,
            }),
        );
        out
    }

    /// Its name, as `W(A)`, or as `S` for a whole-disk operation.
    pub fn name(&self) -> String {
        if self.kind.whole_disk() {
            return self.kind.code().to_string();
        }
        format!("{}({})", self.kind.code(), self.extent.name())
    }

    /// The FUA operations, not in the default vocabulary: `FW`, `FU` and
    /// `FZ` over `A`, `B` and `AB`, in that order.
    pub fn fua() -> Vec<VocabOp> {
        Self::over_every_extent(&[Kind::FuaWrite, Kind::FuaUnaligned, Kind::FuaZeroes])
    }

    /// The operation its name names, of the default vocabulary, the extra
    /// one or the FUA one.
    pub fn parse(name: &str) -> Option<VocabOp> {
        VocabOp::all()
            .into_iter()
            .chain(VocabOp::extra())
            .chain(VocabOp::fua())
            .find(|op| op.name() == name)
    }

    /// The case's operations for it (one, or one compressed write per
    /// cluster), on an image of `cluster_sectors`-sector clusters.
    pub fn ops(&self, cluster_sectors: u64) -> Vec<Op> {
        let (first, n) = self.extent.clusters();
        let sector = first * cluster_sectors;
        let sectors = n * cluster_sectors;
        let (kind, fua) = self.kind.unflagged();
        vec![match kind {
            Kind::Write => Op::Write {
                sector,
                sectors,
                fua: false,
            },
            // The middle half, one sector on: an odd first sector, since
            // a quarter of a cluster is an even number of sectors.
            Kind::Unaligned => Op::Write {
                sector: sector + sectors / 4 + 1,
                sectors: sectors / 2,
                fua: false,
            },
            Kind::Zeroes => Op::WriteZeroes {
                sector,
                sectors,
                unmap: false,
                fua: false,
            },
            Kind::Discard => Op::Discard {
                sector,
                sectors,
                fua: false,
            },
            Kind::Compressed => {
                return (first..first + n)
                    .map(|c| Op::WriteCompressed {
                        sector: c * cluster_sectors,
                        sectors: cluster_sectors,
                    })
                    .collect()
            }
            Kind::Snapshot => Op::SnapshotCreate,
            Kind::Revert => Op::SnapshotApply { pick: 0 },
            Kind::Delete => Op::SnapshotDelete { pick: 0 },
            Kind::FuaWrite | Kind::FuaUnaligned | Kind::FuaZeroes => {
                unreachable!("unflagged above")
            }
        }
        .with_fua(fua)]
    }
}

impl fmt::Display for VocabOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// One step of a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Op(VocabOp),
    Flush,
}

/// Operations, with flushes between and after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub steps: Vec<Step>,
}

impl Workload {
    /// Its operations, flushes not counted.
    pub fn ops(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Op(_)))
            .count()
    }

    /// The case's concurrency groups: one per step.
    pub fn groups(&self, cluster_sectors: u64) -> Vec<Vec<Op>> {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Op(op) => op.ops(cluster_sectors),
                Step::Flush => vec![Op::Flush],
            })
            .collect()
    }
}

impl fmt::Display for Workload {
    /// As `W(A) F U(AB)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            match s {
                Step::Op(op) => write!(f, "{op}")?,
                Step::Flush => f.write_str("F")?,
            }
        }
        Ok(())
    }
}

/// Every workload of 1 to `max_ops` operations of `vocabulary`, each with
/// a flush after every subset of its operations. The order is fixed: by
/// number of operations, then by the operations in vocabulary order (the
/// first slowest), then by the flushes as a binary number whose bit `i` is
/// a flush after operation `i`.
///
/// The set is closed under prefixes: the steps up to any operation or
/// flush of a workload are a workload of the set themselves.
pub fn workloads(vocabulary: &[VocabOp], max_ops: usize) -> Vec<Workload> {
    let mut out = Vec::new();
    for n in 1..=max_ops {
        let sequences = vocabulary.len().pow(n as u32);
        for seq in 0..sequences {
            // Digit i (most significant first) picks operation i.
            let mut ops = Vec::with_capacity(n);
            let mut rest = seq;
            for _ in 0..n {
                ops.push(vocabulary[rest % vocabulary.len()]);
                rest /= vocabulary.len();
            }
            ops.reverse();
            for flushes in 0..1u32 << n {
                let mut steps = Vec::with_capacity(2 * n);
                for (i, &op) in ops.iter().enumerate() {
                    steps.push(Step::Op(op));
                    if flushes & (1 << i) != 0 {
                        steps.push(Step::Flush);
                    }
                }
                out.push(Workload { steps });
            }
        }
    }
    out
}

/// How many workloads [`workloads`] builds from a vocabulary of `v`
/// operations: `v^n` sequences of `n` operations, each with `2^n` flush
/// placements, summed over `n` from 1 to `max_ops`.
pub fn workload_count(v: u64, max_ops: usize) -> u64 {
    (1..=max_ops as u32).map(|n| (2 * v).pow(n)).sum()
}

/// The image a workload runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Geometry {
    pub cluster_size: u64,
    /// Extended L2 entries (32 subclusters per cluster; qemu-img allows
    /// them from 16 KiB clusters, so here with 64 KiB ones only).
    pub extended_l2: bool,
    /// A raw backing file with data in every sector, under the whole disk:
    /// a partial write must copy it, a discard of the overlay must not
    /// uncover it.
    pub backing: bool,
    /// A version 2 image: no dirty bit, so a crash inside a snapshot
    /// operation is judged by its order alone (COPIED flags a crash may
    /// leave missing excused, then repaired, as campaigns do).
    pub v2: bool,
    /// Refcount width in bits: 16, or a narrow (1) or wide (64) one.
    pub refcount_bits: u32,
}

impl Geometry {
    /// Every geometry, in order: 4 KiB clusters, 64 KiB, 64 KiB with
    /// extended L2; each without then with a backing file (version 3,
    /// 16-bit refcounts); then 4 KiB clusters on version 2, without and
    /// with a backing file, and with 1-bit and 64-bit refcounts.
    pub fn all() -> Vec<Geometry> {
        let plain = |cluster_size, extended_l2, backing| Geometry {
            cluster_size,
            extended_l2,
            backing,
            v2: false,
            refcount_bits: 16,
        };
        let mut out: Vec<Geometry> = [(4 << 10, false), (64 << 10, false), (64 << 10, true)]
            .into_iter()
            .flat_map(|(cs, extl2)| [false, true].map(|backing| plain(cs, extl2, backing)))
            .collect();
        let small = plain(4 << 10, false, false);
        out.extend([
            Geometry { v2: true, ..small },
            Geometry {
                v2: true,
                backing: true,
                ..small
            },
            Geometry {
                refcount_bits: 1,
                ..small
            },
            Geometry {
                refcount_bits: 64,
                ..small
            },
        ]);
        out
    }

    /// Whether it is one of the version 3, 16-bit refcount geometries
    /// (the extra switch sets of the default run take only these).
    pub fn is_plain(&self) -> bool {
        !self.v2 && self.refcount_bits == 16
    }

    /// Its name, as `64k-extl2-backing` or `4k-v2`, `4k-rc1`.
    pub fn name(&self) -> String {
        format!(
            "{}k{}{}{}{}",
            self.cluster_size >> 10,
            if self.extended_l2 { "-extl2" } else { "" },
            if self.v2 { "-v2" } else { "" },
            if self.refcount_bits != 16 {
                format!("-rc{}", self.refcount_bits)
            } else {
                String::new()
            },
            if self.backing { "-backing" } else { "" }
        )
    }

    /// The geometry its name names.
    pub fn parse(name: &str) -> Option<Geometry> {
        Geometry::all().into_iter().find(|g| g.name() == name)
    }

    /// Most operations per workload when the caller gives no bound: 3
    /// with 4 KiB clusters, 2 with larger ones (see the module's doc).
    pub fn default_max_ops(&self) -> usize {
        if self.cluster_size <= 4 << 10 {
            MAX_OPS
        } else {
            2
        }
    }

    /// Sectors per cluster.
    pub fn cluster_sectors(&self) -> u64 {
        self.cluster_size / SECTOR_SIZE as u64
    }

    /// `workload` on this geometry as an ordinary case, without a crash:
    /// its version and refcount width, no lazy refcounts, a fault-free
    /// disk of 512-byte sectors, `engine`'s options.
    pub fn case(&self, workload: &Workload, engine: &EngineOptions) -> Case {
        let size = DISK_CLUSTERS * self.cluster_size;
        let backing = self.backing.then_some(BackingSpec::Raw {
            data: BackingData {
                sectors: size / SECTOR_SIZE as u64,
                pattern: BackingPattern::Full,
            },
        });
        let compat = if self.v2 { Compat::V2 } else { Compat::V3 };
        let mut image = ImageSpec::new(
            size,
            self.cluster_size,
            self.refcount_bits,
            compat,
            false,
            backing,
        );
        image.create.extended_l2 = self.extended_l2;
        Case {
            version: CASE_VERSION,
            seed: SEED,
            profile: None,
            engine: engine.clone(),
            image,
            disk: DiskOptions::default(),
            workload: workload.groups(self.cluster_sectors()),
            schedule: SchedulePolicy::Random,
        }
    }
}

impl fmt::Display for Geometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}
