//! [`Case::generate`]: a whole case from a seed and a profile. Each part of
//! the case is drawn from its own stream (swarm testing: engine options,
//! image shape, device and fault rates vary from case to case), so that a
//! change in how one part is drawn leaves the others as they were.

use engine::{Compat, EngineOptions, Switches};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder, Geometry};
use super::{backing, bench, iozone, mkfs, random, sequential, Profile};
use crate::case::{
    BackingSpec, Case, DataFileSpec, ImageSpec, CASE_VERSION, MIN_EXTENDED_L2_CLUSTER_SIZE,
};
use crate::disk::DiskOptions;
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

/// How far ahead the image file grows: its own sub-stream of the engine
/// options', so the switches and caches drawn before it existed stay as
/// they were. Small steps make growth, and allocations racing it, common.
const ENGINE_GROW_AHEAD: u32 = 1;
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
            Profile::Mixed => pick(
                &mut stream(seed, Stream::Workload, WORKLOAD_PROFILE),
                &Profile::CONCRETE,
            ),
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
        if image.create.compat == Compat::V3 {
            let mut r = stream(seed, Stream::Workload, WORKLOAD_DATA_FILE);
            if r.gen_bool(DATA_FILE_PROBABILITY) {
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
        match profile {
            Profile::Mixed => unreachable!("resolved above"),
            Profile::Random => random::generate(&mut rng, &mut b),
            Profile::Sequential => sequential::generate(&mut rng, &mut b),
            Profile::Iozone => iozone::generate(&mut rng, &mut b),
            Profile::Bench => bench::generate(&mut rng, &mut b),
            Profile::Mkfs => mkfs::generate(&mut rng, &mut b),
            Profile::Backing => backing::generate(&mut rng, &mut b),
        }
        let crashes = rng.gen_range(2..=4u32) as usize;
        let case = Case {
            version: CASE_VERSION,
            seed,
            profile: Some(profile),
            engine: EngineOptions {
                grow_ahead: pick(
                    &mut stream(seed, Stream::EngineConfig, ENGINE_GROW_AHEAD),
                    &GROW_AHEAD_CHOICES,
                ),
                ..engine_options(&mut stream(seed, Stream::EngineConfig, 0))
            },
            // The disk's settings and fault rates (swarm testing); the
            // harsh modes stay off, since the oracle's rules do not hold
            // under them: campaigns turn them on explicitly.
            disk: DiskOptions::swarm(seed, false),
            image,
            workload: b.finish(&mut rng, crashes),
        };
        debug_assert!(case.validate().is_ok(), "{:?}", case.validate());
        case
    }
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
