//! [`Case::generate`]: a whole case from a seed and a profile. Each part of
//! the case is drawn from its own stream (swarm testing: engine options,
//! image shape, device and fault rates vary from case to case), so that a
//! change in how one part is drawn leaves the others as they were.

use engine::{Compat, CreateOptions, EngineOptions, Switches};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder, Geometry};
use super::{backing, bench, iozone, mkfs, random, sequential, Profile};
use crate::case::{BackingSpec, Case, DeviceSpec, FaultSpec, ImageSpec, LatencySpec, CASE_VERSION};

/// Most operations a generated workload has before its crash points.
const OP_BUDGET: usize = 300;

/// The concerns a generated case draws from, numbered as `sim::rng`
/// numbers its streams (the discriminants must stay in step with it).
#[derive(Clone, Copy)]
enum Concern {
    FaultConfig = 6,
    DeviceConfig = 7,
    EngineConfig = 8,
    Workload = 4,
}

/// Index of the workload concern's sub-streams.
const WORKLOAD_OPS: u32 = 0;
const WORKLOAD_IMAGE: u32 = 1;
const WORKLOAD_PROFILE: u32 = 2;

/// The same derivation as `sim::rng::substream`: ChaCha8 seeded from the
/// case seed, the concern and index in the stream word. (Kept here until
/// that module lands, then to be replaced by it.)
fn stream(seed: u64, concern: Concern, index: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(((concern as u64) << 32) | u64::from(index));
    rng
}

impl Case {
    /// The case of `seed` under `profile`. [`Profile::Mixed`] picks a
    /// concrete profile from the seed and records that one in the case.
    pub fn generate(seed: u64, profile: Profile) -> Case {
        let profile = match profile {
            Profile::Mixed => pick(
                &mut stream(seed, Concern::Workload, WORKLOAD_PROFILE),
                &Profile::CONCRETE,
            ),
            p => p,
        };
        let image = image(
            &mut stream(seed, Concern::Workload, WORKLOAD_IMAGE),
            profile,
        );
        let geom = Geometry {
            sectors: image.create.size / SECTOR_SIZE as u64,
            cluster_sectors: image.create.cluster_size / SECTOR_SIZE as u64,
        };
        let mut rng = stream(seed, Concern::Workload, WORKLOAD_OPS);
        let mut b = Builder::new(geom, rng.gen_range(OP_BUDGET / 3..=OP_BUDGET));
        match profile {
            Profile::Mixed => unreachable!("resolved above"),
            Profile::Random => random::generate(&mut rng, &mut b),
            Profile::Sequential => sequential::generate(&mut rng, &mut b),
            Profile::Iozone => iozone::generate(&mut rng, &mut b),
            Profile::Bench => bench::generate(&mut rng, &mut b),
            Profile::Mkfs => mkfs::generate(&mut rng, &mut b),
            Profile::Backing => backing::generate(&mut rng, &mut b),
        }
        let crashes = rng.gen_range(2..=4);
        let case = Case {
            version: CASE_VERSION,
            seed,
            profile: Some(profile),
            engine: engine_options(&mut stream(seed, Concern::EngineConfig, 0)),
            device: DeviceSpec {
                faults: faults(
                    &mut stream(seed, Concern::FaultConfig, 0),
                    image.create.size,
                ),
                ..device(&mut stream(seed, Concern::DeviceConfig, 0))
            },
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
    ImageSpec {
        create: CreateOptions {
            size,
            cluster_size,
            refcount_bits,
            compat,
            lazy_refcounts,
            extended_l2: false,
            backing_file: backing.map(|b| b.file_name().to_string()),
            backing_format: backing.map(|b| b.format_name().to_string()),
        },
        backing,
    }
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

fn device(rng: &mut ChaCha8Rng) -> DeviceSpec {
    let latency = match rng.gen_range(0..3) {
        // SSD-like.
        0 => LatencySpec {
            read_min: 20,
            read_max: 120,
            write_min: 20,
            write_max: 200,
            flush_min: 50,
            flush_max: 1000,
        },
        // HDD-like.
        1 => LatencySpec {
            read_min: 500,
            read_max: 12_000,
            write_min: 500,
            write_max: 12_000,
            flush_min: 2_000,
            flush_max: 20_000,
        },
        // Wildly variable: completions come back in any order.
        _ => LatencySpec {
            read_min: 1,
            read_max: 10_000,
            write_min: 1,
            write_max: 10_000,
            flush_min: 1,
            flush_max: 10_000,
        },
    };
    DeviceSpec {
        sector_size: if rng.gen_bool(0.75) { 512 } else { 4096 },
        latency,
        write_zeroes_supported: rng.gen_bool(0.8),
        discard_supported: rng.gen_bool(0.8),
        faults: FaultSpec::NONE,
    }
}

/// Fault rates, gentle to brutal; the harsh modes stay off (the oracle's
/// rules do not hold under them, so campaigns turn them on explicitly).
fn faults(rng: &mut ChaCha8Rng, virtual_size: u64) -> FaultSpec {
    if rng.gen_bool(0.5) {
        return FaultSpec::NONE;
    }
    let rate = |rng: &mut ChaCha8Rng| pick(rng, &[0u16, 0, 1, 5, 20]);
    FaultSpec {
        read_eio_permille: rate(rng),
        write_eio_permille: rate(rng),
        flush_eio_permille: rate(rng),
        // Room for part of the data plus some metadata.
        capacity: rng
            .gen_bool(0.15)
            .then(|| virtual_size / 2 + rng.gen_range(0..=virtual_size)),
        ..FaultSpec::NONE
    }
}
