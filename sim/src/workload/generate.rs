//! [`Case::generate`]: a whole case from a seed and a profile. Each part of
//! the case is drawn from its own stream (swarm testing: engine options,
//! image shape, device and fault rates vary from case to case), so that a
//! change in how one part is drawn leaves the others as they were.

use engine::{Compat, EngineOptions, Switches};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder, Geometry};
use super::fua::FuaMix;
use super::hazard::{Hazards, HELD_READS_FACTOR_MIN, HELD_READS_PPM};
use super::snapshot_compress::SnapshotsAndCompression;
use super::{
    amend, backing, bench, dsync, iozone, journal, mkfs, random, resize, sequential, Profile,
};
use crate::case::{
    Amend, BackingSpec, Case, DataFileSpec, ImageSpec, Op, CASE_VERSION,
    MIN_EXTENDED_L2_CLUSTER_SIZE,
};
use crate::disk::{DiskOptions, FaultOptions};
use crate::exec::SchedulePolicy;
use crate::rng::{self, Stream};

/// Most operations a generated workload has before its crash points.
const OP_BUDGET: u32 = 300;

/// Sub-streams of the workload stream: the operations, the image's shape,
/// and the profile [`Profile::Mixed`] picks.
const WORKLOAD_OPS: u32 = 0;
const WORKLOAD_IMAGE: u32 = 1;
const WORKLOAD_PROFILE: u32 = 2;
/// Whether the image has extended L2 entries: its own stream, so cases
/// drawn before it existed (and all that do not use it) stay as they were.
const WORKLOAD_EXTENDED_L2: u32 = 3;
/// Whether the image keeps its data in an external data file, and whether
/// that file is raw: its own stream, for the same reason.
const WORKLOAD_DATA_FILE: u32 = 4;
/// Share of version 3 images given an external data file.
const DATA_FILE_PROBABILITY: f64 = 0.2;
/// Whether the case is shaped to reach the engine's rare paths, and how
/// (see [`RareShape`]): its own stream, so the other draws stay as they
/// were.
const WORKLOAD_RARE_PATHS: u32 = 5;
/// Whether the case gets hazard cycles, and which (see
/// [`super::hazard`]): its own stream, so the other draws stay as they
/// were.
const WORKLOAD_HAZARDS: u32 = 6;
/// Whether the case gets snapshot operations or compressed writes, and
/// how many (see [`super::snapshot_compress`]): its own stream, so the
/// other draws stay as they were.
const WORKLOAD_SNAPSHOT_COMPRESS: u32 = 7;
/// Whether and how often the case's writes are flagged FUA (see
/// [`super::fua`]): its own stream, so the other draws stay as they were.
const WORKLOAD_FUA: u32 = 8;
/// The rare shapes of a case with snapshot operations or compressed
/// writes (see [`SnapshotsAndCompression::add_shapes`]): its own stream,
/// so what the case drew before them stays as it was.
const WORKLOAD_SHAPES: u32 = 10;
/// Whether the case gets amends of its image, and which (see
/// [`super::amend`]): its own stream, so the other draws stay as they
/// were.
const WORKLOAD_AMEND: u32 = 11;
/// Whether the case gets resizes (see [`super::resize`]): its own stream,
/// so the other draws stay as they were.
const WORKLOAD_RESIZE: u32 = 12;
/// Share of the plain version 3 images of cases with snapshot operations
/// made version 2.
const SNAPSHOTS_ON_V2: f64 = 0.6;
/// Whether [`Profile::Mixed`] picks one of the FUA profiles instead: its
/// own stream, so the other cases keep their pick.
const WORKLOAD_FUA_PROFILE: u32 = 9;
/// Share of [`Profile::Mixed`] cases given one of [`Profile::FUA`].
const FUA_PROFILE_PROBABILITY: f64 = 0.1;
/// Share of cases shaped to reach the rare paths.
const RARE_PATHS_PROBABILITY: f64 = 0.25;
/// The smaller caches of a rare-path case: their own sub-stream of the
/// engine options'.
const ENGINE_RARE_CACHES: u32 = 2;
/// Most guest data a rare-path case writes up front: a rare-path case
/// costs about what a sequential case writing its whole 4 to 8 MiB disk
/// costs.
const MAX_FILL_SECTORS: u64 = (6 << 20) / SECTOR_SIZE as u64;

/// What the first refcount table of a version 2 image with 512-byte
/// clusters counts (16-bit refcounts: 64 blocks of 256 clusters): its
/// rare-path fills go past it.
const V2_OUTGROWN_BYTES: u64 = 8 << 20;

/// How far ahead the image file grows: its own sub-stream of the engine
/// options', so the switches and caches drawn before it existed stay as
/// they were. Small steps make growth, and allocations racing it, common.
const ENGINE_GROW_AHEAD: u32 = 1;
/// Whether a version 2 image's snapshot entries are written without extra
/// data (`EngineOptions::legacy_snapshot_entries`), so that an upgrade
/// rewrites its snapshot table: its own sub-stream of the engine
/// options', drawn for cases with snapshot operations on version 2.
const ENGINE_LEGACY_SNAPSHOTS: u32 = 3;
const LEGACY_SNAPSHOTS_PROBABILITY: f64 = 0.5;
const GROW_AHEAD_CHOICES: [u64; 5] = [
    0,
    64 << 10,
    256 << 10,
    1 << 20,
    engine::options::DEFAULT_GROW_AHEAD,
];

fn stream(seed: u64, concern: Stream, index: u32) -> ChaCha8Rng {
    rng::substream(seed, concern, index)
}

impl Case {
    /// The case of `seed` under `profile`. [`Profile::Mixed`] picks a
    /// concrete profile from the seed and records that one in the case.
    pub fn generate(seed: u64, profile: Profile) -> Case {
        let profile = match profile {
            Profile::Mixed => {
                let mut r = stream(seed, Stream::Workload, WORKLOAD_FUA_PROFILE);
                if r.gen_bool(FUA_PROFILE_PROBABILITY) {
                    pick(&mut r, &Profile::FUA)
                } else {
                    pick(
                        &mut stream(seed, Stream::Workload, WORKLOAD_PROFILE),
                        &Profile::CONCRETE,
                    )
                }
            }
            p => p,
        };
        let mut image = image(&mut stream(seed, Stream::Workload, WORKLOAD_IMAGE), profile);
        let c = &mut image.create;
        if c.compat == Compat::V3
            && c.cluster_size >= MIN_EXTENDED_L2_CLUSTER_SIZE
            && stream(seed, Stream::Workload, WORKLOAD_EXTENDED_L2).gen_bool(0.4)
        {
            c.extended_l2 = true;
        }
        // Extended L2 entries need large clusters, which reach none of the
        // rare paths: such a case keeps its shape.
        let mut rare_rng = stream(seed, Stream::Workload, WORKLOAD_RARE_PATHS);
        let rare = (!image.create.extended_l2)
            .then(|| RareShape::draw(&mut rare_rng, &mut image))
            .flatten();
        let mut hazard_rng = stream(seed, Stream::Workload, WORKLOAD_HAZARDS);
        let hazards = Hazards::draw(&mut hazard_rng);
        if let Some(cs) = hazards.and_then(|h| h.small_clusters) {
            // Not over a rare shape's own, nor under extended L2 entries
            // (which need 16 KiB at least).
            if rare.is_none() && !image.create.extended_l2 {
                image.create.cluster_size = cs;
            }
        }
        // Guest data in a data file has no refcounts, so such an image
        // cannot outgrow its refcount table: a shape aimed at that keeps
        // its data in the image.
        let data_file_ok = rare.is_none_or(|r| !r.outgrows);
        if image.create.compat == Compat::V3 {
            let mut r = stream(seed, Stream::Workload, WORKLOAD_DATA_FILE);
            if r.gen_bool(DATA_FILE_PROBABILITY) && data_file_ok {
                // A raw data file cannot hold with a backing file.
                let raw = image.backing.is_none() && r.gen_bool(0.5);
                image = image.with_data_file(DataFileSpec { raw });
            }
        }
        let geom = Geometry {
            sectors: image.create.size / SECTOR_SIZE as u64,
            cluster_sectors: image.create.cluster_size / SECTOR_SIZE as u64,
        };
        let mut rng = stream(seed, Stream::Workload, WORKLOAD_OPS);
        let mut b = Builder::new(geom, rng.gen_range(OP_BUDGET / 3..=OP_BUDGET) as usize);
        if let Some(rare) = &rare {
            rare.fill(&mut rare_rng, &mut b);
        }
        match profile {
            Profile::Mixed => unreachable!("resolved above"),
            Profile::Random => random::generate(&mut rng, &mut b),
            Profile::Sequential => sequential::generate(&mut rng, &mut b),
            Profile::Iozone => iozone::generate(&mut rng, &mut b),
            Profile::Bench => bench::generate(&mut rng, &mut b),
            Profile::Mkfs => mkfs::generate(&mut rng, &mut b),
            Profile::Backing => backing::generate(&mut rng, &mut b),
            Profile::Journal => journal::generate(&mut rng, &mut b),
            Profile::Dsync => dsync::generate(&mut rng, &mut b),
        }
        if let Some(h) = &hazards {
            h.add(&mut hazard_rng, &mut b);
        }
        let mut extras_rng = stream(seed, Stream::Workload, WORKLOAD_SNAPSHOT_COMPRESS);
        let (mut snapshots, mut compressed) = (false, false);
        if let Some(x) = SnapshotsAndCompression::draw(&mut extras_rng, &image) {
            compressed = x.compressed() > 0;
            x.add(&mut extras_rng, &mut b);
            let mut shapes = stream(seed, Stream::Workload, WORKLOAD_SHAPES);
            let added = x.add_shapes(&mut shapes, &mut b);
            // A version 2 image has no dirty bit to cover a crash inside a
            // snapshot operation: there only the operation's order keeps
            // the image consistent, so snapshots go there often (a plain
            // version 3 image of the case made version 2; not a rare-path
            // or extended L2 shape, which need version 3).
            snapshots = x.snapshot_ops() + added > 0;
            let c = &mut image.create;
            if snapshots
                && c.compat == Compat::V3
                && !c.extended_l2
                && rare.is_none()
                && shapes.gen_bool(SNAPSHOTS_ON_V2)
            {
                c.compat = Compat::V2;
                c.refcount_bits = 16;
                c.lazy_refcounts = false;
                c.compression_type = Default::default();
            }
        }
        // Amends of the image as the lines above left it.
        let mut amend_rng = stream(seed, Stream::Workload, WORKLOAD_AMEND);
        amend::add(&mut amend_rng, &image, snapshots, &mut b);
        // Not in a case with compressed writes: a shrink drops the packed
        // host clusters whose later frees are the packing shapes' point
        // (with it, the free-keeps-packing-tail variant went from 3 seeds
        // of 500 to 1). The fuzz decoder still mixes the two.
        if !compressed {
            let mut resize_rng = stream(seed, Stream::Workload, WORKLOAD_RESIZE);
            resize::add(&mut resize_rng, &image, &mut b);
        }
        let crashes = rng.gen_range(2..=4u32) as usize;
        let mut workload = b.finish(&mut rng, crashes);
        let mut fua_rng = stream(seed, Stream::Workload, WORKLOAD_FUA);
        if let Some(mix) = FuaMix::draw(&mut fua_rng) {
            mix.apply(&mut fua_rng, &mut workload);
        }
        let mut engine = EngineOptions {
            grow_ahead: pick(
                &mut stream(seed, Stream::EngineConfig, ENGINE_GROW_AHEAD),
                &GROW_AHEAD_CHOICES,
            ),
            ..engine_options(&mut stream(seed, Stream::EngineConfig, 0))
        };
        if rare.is_some() {
            // Caches of 2 to 4 tables, so the many small tables of a
            // rare-path image are evicted, dirty ones too, under pressure.
            let mut r = stream(seed, Stream::EngineConfig, ENGINE_RARE_CACHES);
            engine.l2_cache_tables = r.gen_range(2..=4);
            engine.refcount_cache_tables = r.gen_range(2..=4);
        }
        if snapshots && image.create.compat == Compat::V2 {
            engine.legacy_snapshot_entries =
                stream(seed, Stream::EngineConfig, ENGINE_LEGACY_SNAPSHOTS)
                    .gen_bool(LEGACY_SNAPSHOTS_PROBABILITY);
        }
        if engine.legacy_snapshot_entries {
            // What such entries are for: an upgrade while a snapshot
            // written in that form exists, which must rewrite the table
            // (amends elsewhere rarely come while a snapshot is there).
            // After the workload's first create, a create of its own
            // first: the crash a case places inside a create often
            // undoes the first one, and lands only once per case.
            let first_create = workload
                .iter()
                .position(|g| g.iter().any(|op| matches!(op, Op::SnapshotCreate)));
            if let Some(i) = first_create {
                let upgrade = Op::Amend {
                    change: Amend::Version(3),
                };
                workload.splice(i + 1..i + 1, [vec![Op::SnapshotCreate], vec![upgrade]]);
            }
        }
        if hazards.is_some_and(|h| h.small_caches) {
            // The fewest tables a cache may hold: the hazard cycles' spread
            // writes evict dirty ones.
            engine.l2_cache_tables = 2;
            engine.refcount_cache_tables = 2;
        }
        let case = Case {
            version: CASE_VERSION,
            seed,
            profile: Some(profile),
            engine,
            // The disk's settings and fault rates (swarm testing); the
            // harsh modes stay off, since the oracle's rules do not hold
            // under them: campaigns turn them on explicitly.
            disk: DiskOptions {
                faults: if rare.is_some_and(|r| r.faultless) {
                    FaultOptions::default()
                } else {
                    FaultOptions::swarm(seed, false)
                },
                ..DiskOptions::swarm(seed, false)
            },
            image,
            workload,
            schedule: SchedulePolicy::Random,
        };
        let mut case = Case {
            schedule: schedule_for(&case),
            ..case
        };
        if hazards.is_some_and(|h| h.held_reads) {
            // Guest reads are served by the data file when there is one.
            let o = &mut case.disk.latency.outliers;
            for rates in [&mut o.image, &mut o.data_file] {
                rates.read_ppm = rates.read_ppm.max(HELD_READS_PPM);
            }
            o.factor_min = o.factor_min.max(HELD_READS_FACTOR_MIN.min(o.factor_max));
        }
        debug_assert!(case.validate().is_ok(), "{:?}", case.validate());
        case
    }
}

/// How a case is shaped to reach the engine's rare paths: small clusters
/// and wide refcounts, so that one refcount block counts few clusters and
/// the refcount table the image was created with (one cluster) is outgrown
/// by a few MiB of guest data (512-byte clusters with 64-bit refcounts: 64
/// blocks of 64 clusters, 2 MiB); many small L2 tables and refcount blocks
/// for caches of 2 to 4 tables to evict; and guest data written up front
/// past what the first refcount table counts.
///
/// The L1 table never grows (its size is fixed at create from the virtual
/// size, and the engine does not resize images), so no shape aims at it.
#[derive(Debug, Clone, Copy)]
struct RareShape {
    /// Guest sectors written up front, from `fill_start`.
    fill_sectors: u64,
    fill_start: u64,
    /// The fill is sized to outgrow the first refcount table.
    outgrows: bool,
    /// The case injects no faults. At 512-byte clusters every few writes
    /// evict a table, and one failed metadata write poisons the image
    /// until the next crash: with faults, most fills stop short of the
    /// growth. Half the outgrowing shapes go without, so the growth (and
    /// what follows it) surely runs; the other half meet faults in it.
    faultless: bool,
}

impl RareShape {
    /// With [`RARE_PATHS_PROBABILITY`], reshape `image` and say what to
    /// write up front.
    fn draw(rng: &mut ChaCha8Rng, image: &mut ImageSpec) -> Option<RareShape> {
        if !rng.gen_bool(RARE_PATHS_PROBABILITY) {
            return None;
        }
        let c = &mut image.create;
        c.cluster_size = pick(rng, &[512u64, 512, 512, 512, 1 << 10]);
        // Version 2 images have 16-bit refcounts only.
        if c.compat == Compat::V3 {
            c.refcount_bits = pick(rng, &[64u32, 64, 64, 32]);
        }
        let cs = c.cluster_size;
        // The clusters the first refcount table's blocks count, in bytes.
        let counted = (cs / 8) * (cs * 8 / c.refcount_bits as u64) * cs;
        let sector = SECTOR_SIZE as u64;
        // A version 2 image's 16-bit refcounts at 512-byte clusters
        // count 8 MiB: outgrown too, at twice the cost, so that its
        // table growth (whose order alone protects it, no dirty bit
        // there) meets crashes as version 3's does.
        let v2_reach = c.compat == Compat::V2 && counted <= V2_OUTGROWN_BYTES;
        let outgrows = counted <= (4 << 20) || v2_reach;
        let max_fill = if v2_reach {
            V2_OUTGROWN_BYTES * 5 / 4 / sector
        } else {
            MAX_FILL_SECTORS
        };
        let fill_sectors = if outgrows {
            // Up to past the first table's reach: the tables the data
            // needs (an L2 table and a refcount block per 64 clusters at
            // most) and the clusters other writes take count too.
            (counted / sector) * rng.gen_range(100..=125u64) / 100
        } else {
            // Out of reach at this cost: evictions and new refcount
            // blocks only.
            rng.gen_range(1..=4u64) << 20 >> 9
        }
        .min(max_fill);
        // The smallest disk the fill needs, so that reading it whole after
        // each crash stays cheap at 512-byte clusters; never smaller than
        // a backing file drawn for the size before.
        let needed = (fill_sectors * sector + (1 << 20))
            .next_multiple_of(4 << 20)
            .min(if v2_reach { 12 << 20 } else { 8 << 20 });
        let size = if image.backing.is_some() {
            needed.max(c.size)
        } else {
            needed
        };
        c.size = size;
        let sectors = size / sector;
        let fill_sectors = fill_sectors.min(sectors);
        let fill_start = rng.gen_range(0..=sectors - fill_sectors);
        Some(RareShape {
            fill_sectors,
            fill_start,
            outgrows,
            faultless: outgrows && rng.gen_bool(0.5),
        })
    }

    /// Write the fill: groups of up to 4 writes in flight, each of 128 to
    /// 4096 sectors, in order (a `dd` of a file system image), some groups
    /// and the whole followed by a flush (so that a crash during the rest
    /// keeps the clusters the fill took).
    fn fill(&self, rng: &mut ChaCha8Rng, b: &mut Builder) {
        let chunk = pick(rng, &[128u64, 512, 1024, 4096]);
        let depth = rng.gen_range(1..=4usize);
        let end = self.fill_start + self.fill_sectors;
        let mut at = self.fill_start;
        while at < end {
            let mut ops = Vec::new();
            while ops.len() < depth && at < end {
                let n = chunk.min(end - at);
                ops.push(b.geom.write(at, n));
                at += n;
            }
            b.group(ops);
            if at < end && rng.gen_bool(0.3) {
                b.one(Op::Flush);
            }
        }
        b.one(Op::Flush);
    }
}

/// The schedule of a generated case (swarm: uniform, PCT or starving a
/// task), drawn from the schedule configuration stream. The hints follow
/// from the workload: about 3 polls per unit of work, and one task per
/// operation besides the few the setup and each crash's reopen spawn.
fn schedule_for(case: &Case) -> SchedulePolicy {
    let ops = case.workload.iter().map(Vec::len).sum::<usize>() as u64;
    let tasks = ops + 4 * (case.crashes() as u64 + 1);
    SchedulePolicy::swarm(case.seed, case.work().saturating_mul(3), tasks)
}

fn engine_options(rng: &mut ChaCha8Rng) -> EngineOptions {
    EngineOptions {
        switches: if rng.gen_bool(0.5) {
            Switches::ALL_ON
        } else {
            Switches::from_mask(rng.gen_range(0..32))
        },
        // Small caches make eviction, and its write ordering, common.
        l2_cache_tables: pick(rng, &[2usize, 4, 32]),
        refcount_cache_tables: pick(rng, &[2usize, 8]),
        ..EngineOptions::default()
    }
}

fn image(rng: &mut ChaCha8Rng, profile: Profile) -> ImageSpec {
    let mib = match profile {
        Profile::Sequential | Profile::Bench | Profile::Iozone => pick(rng, &[4u64, 8]),
        _ => pick(rng, &[1u64, 2, 4, 4, 8]),
    };
    let size = mib << 20;
    let cluster_size = pick(
        rng,
        &[
            512u64,
            1 << 10,
            4 << 10,
            4 << 10,
            16 << 10,
            64 << 10,
            64 << 10,
            64 << 10,
            256 << 10,
        ],
    );
    let compat = if rng.gen_bool(0.85) {
        Compat::V3
    } else {
        Compat::V2
    };
    let refcount_bits = match compat {
        Compat::V3 if rng.gen_bool(0.3) => pick(rng, &[1u32, 2, 4, 8, 32, 64]),
        _ => 16,
    };
    let lazy_refcounts = compat == Compat::V3 && rng.gen_bool(0.2);
    let with_backing = match profile {
        Profile::Backing => true,
        Profile::Random => rng.gen_bool(0.2),
        _ => false,
    };
    let backing = with_backing.then(|| backing_spec(rng, size));
    ImageSpec::new(
        size,
        cluster_size,
        refcount_bits,
        compat,
        lazy_refcounts,
        backing,
    )
}

fn backing_spec(rng: &mut ChaCha8Rng, size: u64) -> BackingSpec {
    let full = size / SECTOR_SIZE as u64;
    // A shorter backing file leaves the overlay's tail reading zeroes.
    let sectors = if rng.gen_bool(0.7) {
        full
    } else {
        rng.gen_range(1..=full)
    };
    let pattern = match rng.gen_range(0..3) {
        0 => BackingPattern::Full,
        1 => BackingPattern::Stripes {
            data: rng.gen_range(1..=64),
            hole: rng.gen_range(0..=64),
        },
        _ => BackingPattern::Scattered {
            seed: rng.gen(),
            percent: rng.gen_range(10..=90),
        },
    };
    let data = BackingData { sectors, pattern };
    if rng.gen_bool(0.6) {
        BackingSpec::Raw { data }
    } else {
        BackingSpec::Qcow2 {
            cluster_size: pick(rng, &[4u64 << 10, 64 << 10]),
            data,
        }
    }
}
