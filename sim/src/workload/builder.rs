//! What every profile shares: the disk's shape, bounded ranges, grouping,
//! and the crash points sprinkled over a finished workload.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::case::{Op, MAX_GROUP_OPS, MAX_OP_SECTORS};

/// The virtual disk a workload is generated for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// Virtual size in guest sectors.
    pub sectors: u64,
    /// Cluster size in guest sectors (at least 1).
    pub cluster_sectors: u64,
}

impl Geometry {
    pub fn clusters(&self) -> u64 {
        self.sectors.div_ceil(self.cluster_sectors)
    }

    /// `(sector, sectors)` cut to the disk and to [`MAX_OP_SECTORS`], and
    /// at least one sector long.
    pub fn clamp(&self, sector: u64, sectors: u64) -> (u64, u64) {
        let sector = sector.min(self.sectors - 1);
        let sectors = sectors.clamp(1, MAX_OP_SECTORS).min(self.sectors - sector);
        (sector, sectors)
    }

    pub fn write(&self, sector: u64, sectors: u64) -> Op {
        let (sector, sectors) = self.clamp(sector, sectors);
        Op::Write {
            sector,
            sectors,
            fua: false,
        }
    }

    pub fn read(&self, sector: u64, sectors: u64) -> Op {
        let (sector, sectors) = self.clamp(sector, sectors);
        Op::Read { sector, sectors }
    }

    pub fn zeroes(&self, sector: u64, sectors: u64, unmap: bool) -> Op {
        let (sector, sectors) = self.clamp(sector, sectors);
        Op::WriteZeroes {
            sector,
            sectors,
            unmap,
            fua: false,
        }
    }

    pub fn discard(&self, sector: u64, sectors: u64) -> Op {
        let (sector, sectors) = self.clamp(sector, sectors);
        Op::Discard {
            sector,
            sectors,
            fua: false,
        }
    }
}

/// A workload under construction, with an operation budget.
pub(super) struct Builder {
    pub geom: Geometry,
    groups: Vec<Vec<Op>>,
    ops: usize,
    budget: usize,
    /// The clusters the writes, write_zeroes and discards so far touch:
    /// built the first time a generator asks (most cases never do), then
    /// kept as operations are added (rebuilt from every operation at each
    /// of the generators' cycles, it was about 1% of a campaign).
    touched: Option<std::collections::BTreeSet<u64>>,
}

impl Builder {
    pub fn new(geom: Geometry, budget: usize) -> Builder {
        assert!(geom.sectors > 0 && geom.cluster_sectors > 0);
        Builder {
            geom,
            groups: Vec::new(),
            ops: 0,
            budget,
            touched: None,
        }
    }

    /// Whether the budget is spent; profiles loop until it is.
    pub fn full(&self) -> bool {
        self.ops >= self.budget
    }

    /// Adds a concurrency group (split if too large; dropped if empty).
    pub fn group(&mut self, ops: Vec<Op>) {
        for op in &ops {
            self.note(op);
        }
        for chunk in ops.chunks(MAX_GROUP_OPS) {
            self.ops += chunk.len();
            self.groups.push(chunk.to_vec());
        }
    }

    /// Counts the clusters `op` touches, if it writes and the set is kept.
    fn note(&mut self, op: &Op) {
        if let Some(touched) = &mut self.touched {
            touched.extend(clusters_of(&self.geom, op));
        }
    }

    /// The first `most` clusters of the image that no operation so far
    /// touches (still unallocated, so a write there allocates), other than
    /// `except`, in order: the touched set is walked in step with the
    /// clusters, not searched for each (a workload that touched every
    /// cluster of a large image made that a search per cluster, every
    /// cycle).
    pub fn untouched_clusters(&mut self, except: Option<u64>, most: usize) -> Vec<u64> {
        let geom = self.geom;
        let groups = &self.groups;
        let touched = self.touched.get_or_insert_with(|| {
            groups
                .iter()
                .flatten()
                .flat_map(|op| clusters_of(&geom, op))
                .collect()
        });
        let mut out = Vec::new();
        let mut t = touched.iter().copied().peekable();
        let mut c = 0;
        while c < geom.clusters() && out.len() < most {
            while t.next_if(|&x| x < c).is_some() {}
            if Some(c) != except && t.peek() != Some(&c) {
                out.push(c);
            }
            c += 1;
        }
        out
    }

    /// Adds an operation on its own.
    pub fn one(&mut self, op: Op) {
        self.group(vec![op]);
    }

    /// Groups so far.
    pub fn groups(&self) -> usize {
        self.groups.len()
    }

    /// Inserts `op` as a group of its own before group `at` (at the end
    /// when `at` is the number of groups).
    pub fn insert_one(&mut self, at: usize, op: Op) {
        self.note(&op);
        self.groups.insert(at, vec![op]);
        self.ops += 1;
    }

    /// Adds `op` to group `at`, to run concurrently with its requests, if
    /// the group has room and no snapshot operation or amend (which runs
    /// alone); says whether it did.
    pub fn join(&mut self, at: usize, op: Op) -> bool {
        let group = &mut self.groups[at];
        if group.len() >= MAX_GROUP_OPS || group.iter().any(Op::runs_alone) {
            return false;
        }
        group.push(op);
        self.note(&op);
        self.ops += 1;
        true
    }

    /// Ends the workload: adds, at random places, what a file system on
    /// top would issue whatever the program (a read, an fstrim-like discard
    /// and a fallocate-like zero write), a final flush, and `crashes` crash
    /// points, each either inside a group (crashing with its requests in
    /// flight) or as a group of its own (crashing at rest).
    pub fn finish(mut self, rng: &mut ChaCha8Rng, crashes: usize) -> Vec<Vec<Op>> {
        let geom = self.geom;
        let max = (4 * geom.cluster_sectors).clamp(8, 1024);
        for kind in 0..3 {
            let (sector, sectors) = anywhere(rng, &geom, max);
            let op = match kind {
                0 => geom.read(sector, sectors),
                1 => geom.discard(sector, sectors),
                _ => geom.zeroes(sector, sectors, rng.gen_bool(0.5)),
            };
            // u32 draws, so that a case is the same on 32- and 64-bit hosts.
            let at = rng.gen_range(0..=self.groups.len() as u32) as usize;
            self.groups.insert(at, vec![op]);
            self.ops += 1;
        }
        self.one(Op::Flush);
        let mut places: Vec<usize> = (0..self.groups.len()).collect();
        places.shuffle(rng);
        places.truncate(crashes);
        places.sort_unstable();
        // From the back, so earlier indices stay valid.
        for &g in places.iter().rev() {
            let group = &mut self.groups[g];
            let roomy = group.len() < MAX_GROUP_OPS && !group.contains(&Op::Crash);
            // Mostly inside a group: a crash at rest finds every metadata
            // write flushed, so only one in flight can catch an ordering
            // bug inside a writeback.
            if roomy && rng.gen_bool(0.75) {
                // Half of these with a flush in flight too, so the power
                // can go during its writeback (and, with
                // `CrashOptions::at_flush_ppm`, at one of its flushes).
                // Not beside a snapshot operation or an amend, which runs
                // alone (its own flushes are where the power may go).
                if group.len() + 1 < MAX_GROUP_OPS
                    && !group.contains(&Op::Flush)
                    && !group.iter().any(Op::runs_alone)
                    && rng.gen_bool(0.5)
                {
                    group.push(Op::Flush);
                    self.ops += 1;
                }
                group.push(Op::Crash);
            } else {
                self.groups.insert(g + 1, vec![Op::Crash]);
            }
        }
        self.groups
    }
}

/// A random `(sector, sectors)` anywhere on the disk, at most `max` long.
pub(super) fn anywhere(rng: &mut ChaCha8Rng, geom: &Geometry, max: u64) -> (u64, u64) {
    let sector = rng.gen_range(0..geom.sectors);
    let sectors = rng.gen_range(1..=max.max(1));
    geom.clamp(sector, sectors)
}

/// One of `choices`, uniformly.
pub(super) fn pick<T: Copy>(rng: &mut ChaCha8Rng, choices: &[T]) -> T {
    *choices.choose(rng).expect("choices are never empty")
}

/// The clusters `op` touches if it writes (a write, write_zeroes or
/// discard), in order.
fn clusters_of(geom: &Geometry, op: &Op) -> std::ops::Range<u64> {
    let cs = geom.cluster_sectors;
    match Some(op).filter(|op| !op.is_read()).and_then(Op::range) {
        Some((s, n)) => s / cs..(s + n).div_ceil(cs),
        None => 0..0,
    }
}
