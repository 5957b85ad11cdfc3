//! Internal snapshots and compressed writes among a workload's requests:
//! what `qemu-img snapshot` and `qemu-io write -c` (or `qemu-img convert
//! -c`) do to an image, under the same crashes, faults and checks as the
//! guest's own requests.
//!
//! A case drawn for them gets a few snapshot operations, each a group of
//! its own (it runs alone: the runner lets every request in flight end
//! first), the first of them a create, so that later applies and deletes
//! have one to pick; and a few compressed writes of one whole cluster
//! each, mostly of clusters no other request touches (a compressed write
//! of a cluster that has a host cluster is refused, as QEMU refuses it),
//! each sometimes beside other requests and sometimes followed by a
//! partial write of its cluster, whose copy-on-write must decompress it.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};

use crate::case::{ImageSpec, Op};

/// Share of cases given snapshot operations or compressed writes.
const PROBABILITY: f64 = 0.25;
/// Most snapshot operations a case gets.
const MAX_SNAPSHOT_OPS: u32 = 5;
/// Most compressed writes a case gets.
const MAX_COMPRESSED: u32 = 8;

/// Share of cases with compressed writes given a packing run.
const PACKING_RUN_PROBABILITY: f64 = 0.8;
/// Most compressed writes in a packing run (at least 3).
const MAX_PACKING_RUN: u32 = 8;
/// Most create-then-apply or create-then-delete pairs added to a case
/// with snapshot operations.
const MAX_SNAPSHOT_PAIRS: u32 = 3;

/// A packing run: compressed writes of several clusters no other request
/// touches, one after the other with nothing allocated between them, so
/// that their bytes are packed into the same host clusters and, a cluster
/// filled, spill from one into the next (a compressed cluster is about a
/// quarter of a cluster: [`oracle::data::COMPRESSIBLE_STRIDE`]). Then,
/// mostly, the run is discarded and flushed, which frees host clusters
/// holding several compressed clusters and the packing tail, and an
/// allocating write and another compressed write follow, which reuse what
/// was freed, then reads of it all.
fn add_packing_run(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    let cs = geom.cluster_sectors;
    let want = rng.gen_range(3..=MAX_PACKING_RUN) as usize;
    // The run, as many clusters to reuse what it frees, and one more
    // compressed write.
    let fresh = b.untouched_clusters(None, 2 * want + 1);
    if fresh.len() < 2 * want + 1 {
        return;
    }
    let (run, after) = fresh.split_at(want);
    let (reuse, last) = after.split_at(want);
    let whole = |c: u64| (c * cs, cs.min(geom.sectors - c * cs));
    let start = rng.gen_range(0..=b.groups() as u32) as usize;
    for (k, &c) in run.iter().enumerate() {
        let (sector, sectors) = whole(c);
        b.insert_one(start + k, Op::WriteCompressed { sector, sectors });
    }
    let at = start + run.len();
    if !rng.gen_bool(0.8) {
        return;
    }
    let mut tail = vec![Op::Flush];
    for &c in run {
        let (sector, sectors) = whole(c);
        tail.push(if rng.gen_bool(0.7) {
            geom.discard(sector, sectors)
        } else {
            geom.zeroes(sector, sectors, true)
        });
    }
    tail.extend([Op::Flush, Op::Flush]);
    // Allocating writes enough to take every host cluster the run freed,
    // then a compressed write, which must not pack into any of them.
    for &c in reuse {
        let (sector, sectors) = whole(c);
        tail.push(geom.write(sector, sectors));
    }
    let (sector, sectors) = whole(last[0]);
    tail.push(Op::WriteCompressed { sector, sectors });
    tail.push(Op::Flush);
    for &c in run.iter().chain(reuse).chain(last) {
        let (sector, sectors) = whole(c);
        tail.push(geom.read(sector, sectors));
    }
    let at = rng.gen_range(at as u32..=b.groups() as u32) as usize;
    for (k, op) in tail.into_iter().enumerate() {
        b.insert_one(at + k, op);
    }
}

/// How many of each a case gets.
#[derive(Debug, Clone, Copy)]
pub(super) struct SnapshotsAndCompression {
    snapshot_ops: u32,
    compressed: u32,
}

impl SnapshotsAndCompression {
    /// With [`PROBABILITY`], for an image that can hold them (not one
    /// keeping its data in an external data file).
    pub fn draw(rng: &mut ChaCha8Rng, image: &ImageSpec) -> Option<SnapshotsAndCompression> {
        if !rng.gen_bool(PROBABILITY) || image.data_file.is_some() {
            return None;
        }
        // One kind, the other, or both.
        let (snapshots, compressed) = match rng.gen_range(0..3) {
            0 => (true, false),
            1 => (false, true),
            _ => (true, true),
        };
        Some(SnapshotsAndCompression {
            snapshot_ops: if snapshots {
                rng.gen_range(1..=MAX_SNAPSHOT_OPS)
            } else {
                0
            },
            compressed: if compressed {
                rng.gen_range(1..=MAX_COMPRESSED)
            } else {
                0
            },
        })
    }

    /// Adds them to `b`'s workload at random places.
    pub fn add(&self, rng: &mut ChaCha8Rng, b: &mut Builder) {
        self.add_compressed(rng, b);
        self.add_snapshot_ops(rng, b);
    }

    /// How many compressed writes [`Self::add`] adds.
    pub fn compressed(&self) -> u32 {
        self.compressed
    }

    /// How many snapshot operations [`Self::add`] adds.
    pub fn snapshot_ops(&self) -> u32 {
        self.snapshot_ops
    }

    /// Adds the rare shapes of these operations, drawn from `rng` (a
    /// stream of their own, so that what [`Self::add`] drew stays as it
    /// was): a packing run, its free and what may reuse it, for a case
    /// with compressed writes; snapshots each later applied or deleted,
    /// for one with snapshot operations (and now and then one without).
    /// Returns how many snapshot operations it added.
    pub fn add_shapes(&self, rng: &mut ChaCha8Rng, b: &mut Builder) -> u32 {
        if self.compressed > 0 && rng.gen_bool(PACKING_RUN_PROBABILITY) {
            add_packing_run(rng, b);
        }
        // Snapshots over whatever the case wrote by then (compressed
        // clusters too), each applied or deleted later: a create before
        // each, so the later operation has a snapshot to pick.
        let pairs = if self.snapshot_ops > 0 {
            rng.gen_range(1..=MAX_SNAPSHOT_PAIRS)
        } else {
            u32::from(rng.gen_bool(0.5))
        };
        for _ in 0..pairs {
            let n = b.groups() as u32;
            let first = rng.gen_range(0..=n) as usize;
            let then = rng.gen_range(first as u32..=n) as usize;
            let op = if rng.gen_bool(0.5) {
                Op::SnapshotApply { pick: rng.gen() }
            } else {
                Op::SnapshotDelete { pick: rng.gen() }
            };
            b.insert_one(then, op);
            b.insert_one(first, Op::SnapshotCreate);
        }
        2 * pairs
    }

    fn add_compressed(&self, rng: &mut ChaCha8Rng, b: &mut Builder) {
        let geom = b.geom;
        let cs = geom.cluster_sectors;
        for _ in 0..self.compressed {
            let fresh = b.untouched_clusters(None, 256);
            // Mostly a cluster nothing else writes; now and then any, which
            // the engine may refuse.
            let c = if !fresh.is_empty() && rng.gen_bool(0.85) {
                pick(rng, &fresh)
            } else {
                rng.gen_range(0..geom.clusters())
            };
            let sector = c * cs;
            let op = Op::WriteCompressed {
                sector,
                sectors: cs.min(geom.sectors - sector),
            };
            let at = rng.gen_range(0..=b.groups() as u32) as usize;
            if at == b.groups() || !rng.gen_bool(0.5) || !b.join(at, op) {
                b.insert_one(at, op);
            }
            // A later partial write of the cluster: its COW reads the
            // compressed data back.
            if rng.gen_bool(0.5) {
                let (s, n) = geom.clamp(sector, cs);
                let later = rng.gen_range(at as u32 + 1..=b.groups() as u32) as usize;
                let op = if n >= 4 {
                    geom.write(s + n / 4, n / 2)
                } else {
                    geom.write(s, n)
                };
                b.insert_one(later, op);
            }
        }
    }

    fn add_snapshot_ops(&self, rng: &mut ChaCha8Rng, b: &mut Builder) {
        if self.snapshot_ops == 0 {
            return;
        }
        let mut places: Vec<usize> = (0..self.snapshot_ops)
            .map(|_| rng.gen_range(0..=b.groups() as u32) as usize)
            .collect();
        places.sort_unstable();
        // From the back, so that earlier places stay where they were; the
        // first (in workload order) is a create.
        for (k, &at) in places.iter().enumerate().rev() {
            let op = if k == 0 {
                Op::SnapshotCreate
            } else {
                match rng.gen_range(0..5) {
                    0 | 1 => Op::SnapshotCreate,
                    2 | 3 => Op::SnapshotApply { pick: rng.gen() },
                    _ => Op::SnapshotDelete { pick: rng.gen() },
                }
            };
            b.insert_one(at, op);
        }
    }
}
