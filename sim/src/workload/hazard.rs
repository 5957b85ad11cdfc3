//! Hazard cycles: short sequences of guest operations that make, on
//! purpose, the overlaps a bug in cluster lifetime needs, which random
//! workloads reach by luck only: a cluster written, flushed, freed (discard
//! or write zeroes with unmap) and its host cluster reused for other guest
//! data, with and without the flush that makes the free durable between;
//! reads, partial writes (COW) and flushes in flight over the same cluster
//! while that happens; a crash right after a reuse or while a flush is in
//! flight; and writes spread over more L2 tables and refcount blocks than
//! the caches hold, then a crash, so that evictions must order their
//! writes.
//!
//! A cycle is either a sequence of small groups (each step completes before
//! the next starts: the order the engine must get right) or one long group
//! holding the whole cycle, so that a request held far longer than the
//! rest (a latency outlier, a starved task) outlives the discard, the
//! flush, the reuse and the new data's write of its cluster.
//!
//! Drawn for [`HAZARD_PROBABILITY`] of generated cases from a workload
//! substream of their own, appended to the profile's operations before the
//! workload is finished, so every other draw of a case stays as it was.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder, Geometry};
use crate::case::{Op, MAX_OP_SECTORS};
use crate::disk::MAX_OUTLIER_FACTOR;

/// Share of generated cases given hazard cycles.
pub(super) const HAZARD_PROBABILITY: f64 = 0.5;

/// Most crash points the cycles of one case add: each crash reopens the
/// image and reads the whole disk back, the dearest thing a case does.
const MAX_HAZARD_CRASHES: u32 = 2;

/// The hazard cycles of one case.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hazards {
    cycles: u32,
    /// Whether the case also gets caches of 2 tables, so that spread
    /// writes evict dirty tables.
    pub small_caches: bool,
    /// Clusters of 1 or 4 KiB for the image (when its shape allows
    /// it): many L2 tables and refcount blocks for the spread writes and
    /// the caches, where 64 KiB clusters map a whole case's disk with one
    /// table.
    pub small_clusters: Option<u64>,
    /// Whether the case's disks also hold many guest reads long (see
    /// `HELD_READS_PPM`): a read of a cluster held past its free, the
    /// flush that applies it and the reuse of its host cluster is the
    /// interleaving the wait for in-flight I/O before a free exists for.
    pub held_reads: bool,
}

/// The read outlier rate of a case with `Hazards::held_reads`, in parts
/// per million: one read in ten.
pub(super) const HELD_READS_PPM: u32 = 100_000;

/// The least factor a held read's latency is multiplied by then, so that
/// it outlives a writeback.
pub(super) const HELD_READS_FACTOR_MIN: u32 = 100;

impl Hazards {
    /// With [`HAZARD_PROBABILITY`], the cycles of a case.
    pub fn draw(rng: &mut ChaCha8Rng) -> Option<Hazards> {
        if !rng.gen_bool(HAZARD_PROBABILITY) {
            return None;
        }
        Some(Hazards {
            cycles: rng.gen_range(3..=8),
            small_caches: rng.gen_bool(0.5),
            small_clusters: rng
                .gen_bool(0.5)
                .then(|| pick(rng, &[1u64 << 10, 1 << 10, 4 << 10])),
            held_reads: rng.gen_bool(0.5),
        })
    }

    /// Append the cycles to `b`.
    pub fn add(&self, rng: &mut ChaCha8Rng, b: &mut Builder) {
        let geom = b.geom;
        // Two clusters at least, so that the reused one and the one freed
        // can differ.
        if geom.clusters() < 2 {
            return;
        }
        let mut crashes = 0;
        for _ in 0..self.cycles {
            let a = rng.gen_range(0..geom.clusters());
            // Clusters no write has touched yet, where a write allocates
            // (and so may take the host cluster just freed); any other
            // when the workload has touched them all.
            let fresh = b.untouched_clusters(Some(a), 64);
            let other = |rng: &mut ChaCha8Rng| {
                if !fresh.is_empty() {
                    return pick(rng, &fresh);
                }
                let c = rng.gen_range(0..geom.clusters() - 1);
                if c >= a {
                    c + 1
                } else {
                    c
                }
            };
            let (c, d) = (other(rng), other(rng));
            let crash = crashes < MAX_HAZARD_CRASHES && rng.gen_bool(0.7);
            crashes += u32::from(crash);
            match rng.gen_range(0..5) {
                0 => reuse(rng, b, &geom, a, c, crash),
                1 => long_group(rng, b, &geom, a, [c, d], crash),
                2 => flush_in_flight(rng, b, &geom, a, c, crash),
                3 => outlived_read(rng, b, &geom, a, c, crash),
                _ => spread(rng, b, &geom, crash),
            }
        }
    }
}

/// Cluster `c` whole, as `(sector, sectors)`, cut to the disk and the
/// longest request.
fn whole(geom: &Geometry, c: u64) -> (u64, u64) {
    let cs = geom.cluster_sectors;
    geom.clamp(c * cs, cs.min(MAX_OP_SECTORS))
}

/// A write of the middle of cluster `c` (a partial write: COW of the rest)
/// when the cluster is more than a sector, else all of it.
fn partial(geom: &Geometry, c: u64) -> Op {
    let (s, n) = whole(geom, c);
    if n >= 4 {
        geom.write(s + n / 4, n / 2)
    } else {
        geom.write(s, n)
    }
}

/// The cluster freed: a discard, or write zeroes that may unmap.
fn free(rng: &mut ChaCha8Rng, geom: &Geometry, c: u64) -> Op {
    let (s, n) = whole(geom, c);
    if rng.gen_bool(0.5) {
        geom.discard(s, n)
    } else {
        geom.zeroes(s, n, rng.gen_bool(0.8))
    }
}

fn write_whole(geom: &Geometry, c: u64) -> Op {
    let (s, n) = whole(geom, c);
    geom.write(s, n)
}

/// `W(c) F`, each on its own: cluster `c` gets a host cluster, durably,
/// before a cycle over it.
fn written_and_flushed(b: &mut Builder, geom: &Geometry, c: u64) {
    b.one(write_whole(geom, c));
    b.one(Op::Flush);
}

fn read_whole(geom: &Geometry, c: u64) -> Op {
    let (s, n) = whole(geom, c);
    geom.read(s, n)
}

/// `W(a) F free(a) [F] W(b) [crash]`, step by step: the host cluster of
/// `a` is reused for `b`, before the free is durable or after. The write
/// of `b` is whole, or partial (after the flush) and then flushed and read
/// back: a partial
/// one copies the rest of its cluster (zeroes, without a backing file)
/// into the reused host cluster, which still holds `a`'s data however
/// freshly the file grew there (the `FreshOnlyUnused` guard). The flush
/// makes the copy happen (delayed COW waits for one; until then reads see
/// the old mapping), and the read shows what it left.
fn reuse(rng: &mut ChaCha8Rng, b: &mut Builder, geom: &Geometry, a: u64, c: u64, crash: bool) {
    written_and_flushed(b, geom, a);
    b.one(free(rng, geom, a));
    // A partial write follows a durable free, so that its allocation may
    // take the freed host cluster.
    let partial_write = rng.gen_bool(0.5);
    if partial_write || rng.gen_bool(0.5) {
        b.one(Op::Flush);
    }
    if partial_write {
        b.one(partial(geom, c));
        b.one(Op::Flush);
        b.one(read_whole(geom, c));
        if crash {
            b.one(Op::Crash);
        }
        return;
    }
    let mut last = vec![write_whole(geom, c)];
    if rng.gen_bool(0.5) {
        // Read the freed cluster back while its host cluster is reused.
        last.push(read_whole(geom, a));
    }
    if crash {
        if rng.gen_bool(0.5) {
            last.push(Op::Crash);
            b.group(last);
        } else {
            b.group(last);
            b.one(Op::Crash);
        }
    } else {
        b.group(last);
    }
}

/// One group holding a whole cycle over cluster `a` (reads and a partial
/// write of it in flight, its free, a flush, new data elsewhere that may
/// take its host cluster, another flush, new data for it), so that a held
/// request outlives all of it; preceded by the write and flush that give
/// `a` a host cluster.
fn long_group(
    rng: &mut ChaCha8Rng,
    b: &mut Builder,
    geom: &Geometry,
    a: u64,
    others: [u64; 2],
    crash: bool,
) {
    written_and_flushed(b, geom, a);
    // One to four reads of it, each a chance for the disk to hold one
    // (a latency outlier) past the rest of the cycle.
    let mut ops = vec![read_whole(geom, a); rng.gen_range(1..=4)];
    if rng.gen_bool(0.5) {
        ops.push(partial(geom, a));
    }
    ops.push(free(rng, geom, a));
    ops.push(Op::Flush);
    for &c in &others {
        ops.push(write_whole(geom, c));
    }
    ops.push(Op::Flush);
    if rng.gen_bool(0.5) {
        ops.push(partial(geom, a));
    } else {
        ops.push(write_whole(geom, a));
    }
    ops.push(read_whole(geom, a));
    if crash {
        ops.push(Op::Crash);
    }
    b.group(ops);
}

/// `W(a) F`, then background reads of `a` (one to four: each a chance for
/// the disk to hold one long) that the groups after them do not wait for:
/// `free(a) F W(c) F R(a) [crash]`, each step on its own. A held read
/// outlives the free of its cluster, the flush whose writeback applies it
/// and the write that may take the host cluster for `c`: the free must
/// wait for the read, or the read returns `c`'s data.
fn outlived_read(
    rng: &mut ChaCha8Rng,
    b: &mut Builder,
    geom: &Geometry,
    a: u64,
    c: u64,
    crash: bool,
) {
    written_and_flushed(b, geom, a);
    let (s, n) = whole(geom, a);
    // Half the time the first of them asks to be held long itself; else
    // only the disk's outliers hold one.
    let mut reads = vec![
        Op::BackgroundRead {
            sector: s,
            sectors: n,
            hold: 0,
        };
        rng.gen_range(1..=4)
    ];
    if rng.gen_bool(0.5) {
        reads[0] = Op::BackgroundRead {
            sector: s,
            sectors: n,
            hold: rng.gen_range(HELD_READS_FACTOR_MIN..=MAX_OUTLIER_FACTOR),
        };
    }
    b.group(reads);
    b.one(free(rng, geom, a));
    b.one(Op::Flush);
    b.one(write_whole(geom, c));
    b.one(Op::Flush);
    b.one(read_whole(geom, a));
    if crash {
        b.one(Op::Crash);
    }
}

/// `W(a) F` then new data and a flush in flight together, crashing (when
/// `crash`) while the flush may still be writing metadata back: the
/// refcount blocks must be durable before the L2 entries that need them.
fn flush_in_flight(
    rng: &mut ChaCha8Rng,
    b: &mut Builder,
    geom: &Geometry,
    a: u64,
    c: u64,
    crash: bool,
) {
    written_and_flushed(b, geom, a);
    let mut ops = vec![write_whole(geom, c), Op::Flush];
    if rng.gen_bool(0.5) {
        ops.push(partial(geom, a));
    }
    if crash {
        ops.push(Op::Crash);
    }
    b.group(ops);
}

/// Writes spread over the disk, one per L2 table's reach where the disk
/// has several (at most 12), in groups of up to 4, then a crash (when
/// `crash`) before any flush: with small caches the tables they dirty are
/// evicted, and each eviction must order its writes.
fn spread(rng: &mut ChaCha8Rng, b: &mut Builder, geom: &Geometry, crash: bool) {
    let cs = geom.cluster_sectors;
    // Guest sectors one L2 table maps: a cluster of 8-byte entries.
    let l2_reach = cs * (cs * 512 / 8);
    let tables = geom.sectors.div_ceil(l2_reach).clamp(1, 12);
    let depth = pick(rng, &[1usize, 2, 4]);
    let mut ops = Vec::new();
    for t in 0..tables {
        let base = t * l2_reach;
        let span = l2_reach.min(geom.sectors - base).div_ceil(cs);
        let c = base / cs + rng.gen_range(0..span);
        ops.push(write_whole(geom, c));
        if ops.len() == depth {
            b.group(std::mem::take(&mut ops));
        }
    }
    if crash {
        ops.push(Op::Crash);
    }
    if !ops.is_empty() {
        b.group(ops);
    }
}
