//! [`Case::from_arbitrary`]: any byte string decoded into a valid, bounded
//! case, so that fuzz targets and seeded runs share one case type.
//!
//! Every choice is a bounded draw (`int_in_range`, `choose`), so the decoder
//! never fails: when the bytes run out, draws return their smallest value
//! and the workload simply ends. The harsh fault modes stay off, since the
//! oracle's verdicts do not hold under them.

use arbitrary::{Arbitrary, Unstructured};
use engine::{Compat, EngineOptions, Switches};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};

use engine::dev::IoOp;

use crate::case::{
    Amend, BackingSpec, Case, ImageSpec, Op, CASE_VERSION, MAX_GROUP_OPS, MAX_OP_SECTORS,
};
use crate::disk::{
    DiscardEffect, DiskOptions, FaultOptions, LatencyOptions, NthRequest, OutlierOptions,
    OutlierRates, SupportOptions, MAX_OUTLIER_FACTOR,
};
use crate::exec::SchedulePolicy;

/// Most operations a decoded case holds.
pub const MAX_ARBITRARY_OPS: usize = 64;
/// Most snapshot operations and compressed writes a decoded case gets,
/// on top of its [`MAX_ARBITRARY_OPS`]: each snapshot operation reads the
/// whole disk back (a create) or rewrites the tables, as costly as a crash.
pub const MAX_ARBITRARY_EXTRAS: usize = 6;
/// Most amends a decoded case holds.
pub const MAX_ARBITRARY_AMENDS: usize = 3;
/// Most resizes a decoded case holds.
pub const MAX_ARBITRARY_RESIZES: usize = 3;
/// Most sectors one decoded request covers.
const MAX_ARBITRARY_OP_SECTORS: u64 = 256;
/// Most crash points a decoded case holds; later crash draws become
/// flushes. Each crash reopens, checks and reads back the whole image, so
/// it costs more than everything else a case does: with one draw in ten a
/// crash, a 256-operation case held about 25 of them and ran at 2
/// executions a second under the fuzzer. A crash's power is in what led up
/// to it, which the bytes still choose freely.
pub const MAX_ARBITRARY_CRASHES: usize = 3;

impl Case {
    /// Decodes a case from fuzzer bytes. Never fails, and the result always
    /// passes [`Case::validate`].
    pub fn from_arbitrary(u: &mut Unstructured<'_>) -> arbitrary::Result<Case> {
        let seed = u64::arbitrary(u)?;
        let engine = EngineOptions {
            switches: Switches::from_mask(u.int_in_range(0..=31)?),
            l2_cache_tables: u.int_in_range(2..=32)?,
            refcount_cache_tables: u.int_in_range(2..=8)?,
            ..EngineOptions::default()
        };
        let image = image(u)?;
        let mut disk = disk(u)?;
        let workload = workload(u, image.create.size / SECTOR_SIZE as u64)?;
        // Drawn last, so that inputs saved before they existed decode as
        // they did (exhausted bytes give no outliers and the uniform
        // schedule).
        disk.latency.outliers = outliers(u)?;
        let schedule = schedule(u)?;
        // Drawn after everything else, for the same reason.
        let mut workload = workload;
        extras(u, &image, &mut workload)?;
        // And amends after those, then resizes.
        amends(u, &mut workload)?;
        resizes(u, &image, &mut workload)?;
        let case = Case {
            version: CASE_VERSION,
            seed,
            profile: None,
            engine,
            image,
            disk,
            workload,
            schedule,
        };
        debug_assert!(case.validate().is_ok(), "{:?}", case.validate());
        Ok(case)
    }
}

impl<'a> Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Case> {
        Case::from_arbitrary(u)
    }
}

fn image(u: &mut Unstructured<'_>) -> arbitrary::Result<ImageSpec> {
    // 64 KiB to 4 MiB, in 64 KiB steps: every crash and the end of a case
    // read the whole disk back, so the size is most of a case's cost, and
    // 512-byte clusters with wide refcounts still outgrow the first
    // refcount table within it.
    let size = u.int_in_range(1..=64u64)? << 16;
    let cluster_size = 1u64 << u.int_in_range(9..=21u32)?;
    let compat = if u.ratio(1, 8)? {
        Compat::V2
    } else {
        Compat::V3
    };
    let refcount_bits = match compat {
        Compat::V2 => 16,
        // Rotated so that exhausted bytes (a draw of 0) give the usual 16.
        Compat::V3 => 1 << ((u.int_in_range(0..=6u32)? + 4) % 7),
    };
    let lazy_refcounts = compat == Compat::V3 && u.ratio(1, 4)?;
    let backing = if u.ratio(1, 3)? {
        let sectors = u.int_in_range(1..=size / SECTOR_SIZE as u64)?;
        let pattern = match u.int_in_range(0..=2u8)? {
            0 => BackingPattern::Full,
            1 => BackingPattern::Stripes {
                data: u.int_in_range(0..=64)?,
                hole: u.int_in_range(0..=64)?,
            },
            _ => BackingPattern::Scattered {
                seed: u64::arbitrary(u)?,
                percent: u.int_in_range(0..=100)?,
            },
        };
        let data = BackingData { sectors, pattern };
        Some(if u.arbitrary()? {
            BackingSpec::Qcow2 {
                cluster_size: 1 << u.int_in_range(9..=16u32)?,
                data,
            }
        } else {
            BackingSpec::Raw { data }
        })
    } else {
        None
    };
    Ok(ImageSpec::new(
        size,
        cluster_size,
        refcount_bits,
        compat,
        lazy_refcounts,
        backing,
    ))
}

/// Outlier rates up to 20%, factors up to [`MAX_OUTLIER_FACTOR`]; none
/// when the first draw is 0 (as exhausted bytes give).
fn outliers(u: &mut Unstructured<'_>) -> arbitrary::Result<OutlierOptions> {
    let mut o = OutlierOptions::default();
    if u.int_in_range(0..=1u8)? == 0 {
        return Ok(o);
    }
    let mut rates = || -> arbitrary::Result<OutlierRates> {
        let mut rate = || u.int_in_range(0..=200_000u32);
        Ok(OutlierRates {
            read_ppm: rate()?,
            write_ppm: rate()?,
            flush_ppm: rate()?,
            zeroes_ppm: rate()?,
            discard_ppm: rate()?,
        })
    };
    o.image = rates()?;
    o.data_file = rates()?;
    o.backing = rates()?;
    o.factor_max = u.int_in_range(1..=MAX_OUTLIER_FACTOR)?;
    o.factor_min = u.int_in_range(1..=o.factor_max)?;
    Ok(o)
}

/// A schedule policy with bounded parameters: PCT with at most 8 change
/// points over at most 2^20 steps, starvation released within 2^20 steps.
fn schedule(u: &mut Unstructured<'_>) -> arbitrary::Result<SchedulePolicy> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => SchedulePolicy::Random,
        1 => SchedulePolicy::Priority {
            change_points: u.int_in_range(1..=8)?,
            steps_hint: u.int_in_range(1..=1 << 20)?,
        },
        _ => SchedulePolicy::Starve {
            task: u.int_in_range(0..=MAX_ARBITRARY_OPS as u64)?,
            every: u.int_in_range(0..=16)?,
            release_after: u.int_in_range(1..=1 << 20)?,
        },
    })
}

fn disk(u: &mut Unstructured<'_>) -> arbitrary::Result<DiskOptions> {
    // Latencies in microseconds, scaled to the disk's nanoseconds.
    let span = |u: &mut Unstructured<'_>| -> arbitrary::Result<(u64, u64)> {
        let min = u.int_in_range(0..=1000u64)?;
        Ok((min * 1000, (min + u.int_in_range(0..=10_000u64)?) * 1000))
    };
    let (read_min, read_mean) = span(u)?;
    let (write_min, write_mean) = span(u)?;
    let (flush_min, flush_mean) = span(u)?;
    let latency = LatencyOptions {
        read_min,
        read_mean,
        write_min,
        write_mean,
        flush_min,
        flush_mean,
        seek: u.int_in_range(0..=1_000u64)? * 1000,
        bandwidth: u.choose(&[0u64, 150_000_000, 2_000_000_000])?.to_owned(),
        channels: u.int_in_range(0..=4)?,
        // Not drawn, so that fuzz inputs saved before it existed decode
        // as they did; it changes only timing.
        extend: 0,
        // Not drawn either: the benchmark's rotating disk only.
        stroke: 0,
        stroke_span: 0,
        zeroes_journal: None,
        // Drawn after the workload (`outliers`), for the same reason.
        outliers: OutlierOptions::default(),
    };
    let enabled = u.ratio(1, 2)?;
    let faults = FaultOptions {
        enabled,
        read_error_ppm: u.int_in_range(0..=50_000)?,
        write_error_ppm: u.int_in_range(0..=50_000)?,
        flush_error_ppm: u.int_in_range(0..=50_000)?,
        error_at: if u.ratio(1, 4)? {
            vec![NthRequest {
                op: *u.choose(&[IoOp::Read, IoOp::Write, IoOp::WriteZeroes, IoOp::Flush])?,
                n: u.int_in_range(1..=200)?,
                device: None,
            }]
        } else {
            Vec::new()
        },
        capacity: if u.ratio(1, 8)? {
            Some(u.int_in_range(0..=256u64)? << 16)
        } else {
            None
        },
        ..FaultOptions::default()
    };
    Ok(DiskOptions {
        sector_size: if u.ratio(1, 4)? { 4096 } else { 512 },
        latency,
        support: SupportOptions {
            write_zeroes: !u.ratio(1, 3)?,
            discard: if u.arbitrary()? {
                DiscardEffect::Nothing
            } else {
                DiscardEffect::Zeroes
            },
        },
        faults,
        ..DiskOptions::default()
    })
}

fn workload(u: &mut Unstructured<'_>, sectors: u64) -> arbitrary::Result<Vec<Vec<Op>>> {
    let mut groups: Vec<Vec<Op>> = Vec::new();
    let mut ops = 0;
    let mut crashes = 0;
    while ops < MAX_ARBITRARY_OPS && !u.is_empty() {
        let op = match u.int_in_range(0..=9u8)? {
            0 => Op::Flush,
            1 if crashes < MAX_ARBITRARY_CRASHES => {
                crashes += 1;
                Op::Crash
            }
            1 => Op::Flush,
            kind => {
                let sector = u.int_in_range(0..=sectors - 1)?;
                let most = MAX_ARBITRARY_OP_SECTORS.min(sectors - sector);
                let n = u.int_in_range(1..=most)?;
                // A quarter of the write-like requests flagged FUA, so a
                // fuzzer meets durability without a flush too.
                match kind {
                    2..=4 => Op::Write {
                        sector,
                        sectors: n,
                        fua: u.ratio(1u8, 4u8)?,
                    },
                    5 | 6 => Op::Read { sector, sectors: n },
                    7 => Op::WriteZeroes {
                        sector,
                        sectors: n,
                        unmap: u.arbitrary()?,
                        fua: u.ratio(1u8, 4u8)?,
                    },
                    _ => Op::Discard {
                        sector,
                        sectors: n,
                        fua: u.ratio(1u8, 4u8)?,
                    },
                }
            }
        };
        // Join the previous group (run concurrently with it) or start one.
        let join = u.arbitrary::<bool>()?;
        match groups.last_mut() {
            Some(g) if join && g.len() < MAX_GROUP_OPS && !(op == Op::Crash && g.contains(&op)) => {
                g.push(op)
            }
            _ => groups.push(vec![op]),
        }
        ops += 1;
    }
    Ok(groups)
}

/// Snapshot operations and compressed writes, put among the workload's
/// groups: none when the first draw is 0 (as exhausted bytes give). A
/// snapshot operation gets a group of its own (it runs alone), and only on
/// a version 3 image, whose dirty bit covers a crash inside one (see
/// `snapshot_compress`); a compressed write is one whole cluster (or the
/// disk's partial last one), in a group of its own or joining one, and
/// only where a cluster is at most `MAX_OP_SECTORS`.
fn extras(
    u: &mut Unstructured<'_>,
    image: &ImageSpec,
    groups: &mut Vec<Vec<Op>>,
) -> arbitrary::Result<()> {
    if u.int_in_range(0..=1u8)? == 0 {
        return Ok(());
    }
    let sectors = image.create.size / SECTOR_SIZE as u64;
    let cs = image.create.cluster_size / SECTOR_SIZE as u64;
    let compressed_ok = cs <= MAX_OP_SECTORS;
    for _ in 0..u.int_in_range(1..=MAX_ARBITRARY_EXTRAS)? {
        let at = u.int_in_range(0..=groups.len())?;
        let op = match u.int_in_range(0..=3u8)? {
            0 => Op::SnapshotCreate,
            1 => Op::SnapshotApply {
                pick: u.arbitrary()?,
            },
            2 => Op::SnapshotDelete {
                pick: u.arbitrary()?,
            },
            _ if compressed_ok => {
                let sector = u.int_in_range(0..=(sectors - 1) / cs)? * cs;
                Op::WriteCompressed {
                    sector,
                    sectors: cs.min(sectors - sector),
                }
            }
            _ => continue,
        };
        let join = !op.is_snapshot() && u.arbitrary::<bool>()?;
        match groups.get_mut(at) {
            Some(g) if join && g.len() < MAX_GROUP_OPS && !g.iter().any(Op::is_snapshot) => {
                g.push(op)
            }
            _ => groups.insert(at, vec![op]),
        }
    }
    Ok(())
}

/// Amends of the image, each a group of its own: none when the first draw
/// is 0 (as exhausted bytes give). Any change, whether the image can take
/// it or not (the engine refuses what QEMU refuses).
fn amends(u: &mut Unstructured<'_>, groups: &mut Vec<Vec<Op>>) -> arbitrary::Result<()> {
    if u.int_in_range(0..=1u8)? == 0 {
        return Ok(());
    }
    for _ in 0..u.int_in_range(1..=MAX_ARBITRARY_AMENDS)? {
        let at = u.int_in_range(0..=groups.len())?;
        let change = match u.int_in_range(0..=2u8)? {
            0 => Amend::Version(u.int_in_range(2..=3)?),
            1 => Amend::LazyRefcounts(u.arbitrary()?),
            _ => Amend::RefcountBits(1 << u.int_in_range(0..=6)?),
        };
        groups.insert(at, vec![Op::Amend { change }]);
    }
    Ok(())
}

/// Resizes of the guest disk, each a group of its own: none when the first
/// draw is 0 (as exhausted bytes give), and none for an image with an
/// external data file. Each to a whole number of clusters from one to
/// twice the created size, or back to the created size.
fn resizes(
    u: &mut Unstructured<'_>,
    image: &ImageSpec,
    groups: &mut Vec<Vec<Op>>,
) -> arbitrary::Result<()> {
    if u.int_in_range(0..=1u8)? == 0 || image.data_file.is_some() {
        return Ok(());
    }
    let size = image.create.size / SECTOR_SIZE as u64;
    let cs = image.create.cluster_size / SECTOR_SIZE as u64;
    for _ in 0..u.int_in_range(1..=MAX_ARBITRARY_RESIZES)? {
        let at = u.int_in_range(0..=groups.len())?;
        let sectors = if u.arbitrary()? {
            size
        } else {
            u.int_in_range(1..=(2 * size).div_ceil(cs))? * cs
        };
        groups.insert(at, vec![Op::Resize { sectors }]);
    }
    Ok(())
}
