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
