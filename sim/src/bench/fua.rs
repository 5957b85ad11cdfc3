//! `qcsim bench --sim`'s FUA jobs: 4 KiB guest writes flagged FUA
//! (`Image::write_fua`), sequential and random, into a fresh image and
//! into one fully allocated (written whole and flushed first, not
//! counted), beside the same requests as a plain write followed by a
//! guest flush: the durability a guest gets either way, and what each
//! costs per request on the simulated disk (exact counts).

use std::fmt::Write as _;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use engine::{EngineOptions, Switches};

use super::job::{run_job_with, BenchError, GuestOp, JobSetup, Workload, CLUSTER_SIZE};
use crate::disk::LatencyOptions;

/// The guest request size of every FUA job.
pub const FUA_REQUEST: u64 = 4 << 10;
/// Requests per job at most: enough for the costs per request to settle
/// (a fresh image's L2 tables and refcount blocks amortised), few enough
/// that the eight jobs stay quick.
pub const FUA_REQUESTS_MAX: u64 = 1024;
/// The random jobs' order of requests: fixed, so rows are reproducible.
const SHUFFLE_SEED: u64 = 0xf0a_5eed;

/// Where the requests go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    Sequential,
    /// Distinct 4 KiB slots spread over the whole image, in a fixed
    /// shuffled order.
    Random,
}

/// What the image holds before the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fill {
    Fresh,
    /// Every cluster written and flushed: the FUA writes overwrite in
    /// place.
    Allocated,
}

/// How each request is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// The write flagged FUA.
    Fua,
    /// A plain write, then a guest flush.
    WriteFlush,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Sequential => "sequential",
            Pattern::Random => "random",
        }
    }
}

impl Fill {
    pub fn name(self) -> &'static str {
        match self {
            Fill::Fresh => "fresh",
            Fill::Allocated => "allocated",
        }
    }
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Fua => "fua",
            Durability::WriteFlush => "write+flush",
        }
    }
}

/// One FUA job's costs, per guest request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FuaRow {
    pub pattern: Pattern,
    pub fill: Fill,
    pub durability: Durability,
    pub requests: u64,
    /// Device writes (data and metadata), write_zeroes and discards.
    pub device_writes: f64,
    /// Of those, writes sent with FUA.
    pub fua_writes: f64,
    pub flushes: f64,
    /// L2 tables and refcount blocks written.
    pub metadata_writes: f64,
    /// Simulated microseconds, on the SSD model.
    pub sim_us: f64,
}

/// Every FUA job on images of `size` bytes (a multiple of the cluster
/// size): each pattern and fill, FUA and write-then-flush.
pub fn run_fua_jobs(size: u64) -> Result<Vec<FuaRow>, BenchError> {
    let mut rows = Vec::new();
    for pattern in [Pattern::Sequential, Pattern::Random] {
        for fill in [Fill::Fresh, Fill::Allocated] {
            for durability in [Durability::Fua, Durability::WriteFlush] {
                rows.push(run_fua_job(size, pattern, fill, durability)?);
            }
        }
    }
    Ok(rows)
}

/// The guest offsets of a job's requests.
pub fn offsets(size: u64, pattern: Pattern) -> Vec<u64> {
    let slots = size / FUA_REQUEST;
    let n = slots.min(FUA_REQUESTS_MAX);
    match pattern {
        Pattern::Sequential => (0..n).map(|i| i * FUA_REQUEST).collect(),
        Pattern::Random => {
            let mut all: Vec<u64> = (0..slots).collect();
            all.shuffle(&mut ChaCha8Rng::seed_from_u64(SHUFFLE_SEED));
            all.truncate(n as usize);
            all.into_iter().map(|s| s * FUA_REQUEST).collect()
        }
    }
}

/// One job.
pub fn run_fua_job(
    size: u64,
    pattern: Pattern,
    fill: Fill,
    durability: Durability,
) -> Result<FuaRow, BenchError> {
    let mut ops = Vec::new();
    if fill == Fill::Allocated {
        ops.extend((0..size / CLUSTER_SIZE).map(|c| GuestOp::Write {
            offset: c * CLUSTER_SIZE,
            len: CLUSTER_SIZE,
        }));
        ops.push(GuestOp::Flush);
    }
    ops.push(GuestOp::StartCounting);
    let offsets = offsets(size, pattern);
    for &offset in &offsets {
        let len = FUA_REQUEST;
        match durability {
            Durability::Fua => ops.push(GuestOp::WriteFua { offset, len }),
            Durability::WriteFlush => {
                ops.push(GuestOp::Write { offset, len });
                ops.push(GuestOp::Flush);
            }
        }
    }
    let setup = JobSetup {
        workload: Workload::Seq4k,
        size,
        switches: Switches::ALL_ON,
        grow_ahead: EngineOptions::default().grow_ahead,
        latency: LatencyOptions::ssd(),
        log: false,
    };
    let o = run_job_with(&setup, ops)?;
    let n = offsets.len() as u64;
    let per = |v: u64| v as f64 / n as f64;
    let d = &o.device;
    Ok(FuaRow {
        pattern,
        fill,
        durability,
        requests: n,
        device_writes: per(d.writes + d.write_zeroes + d.discards),
        fua_writes: per(d.fua_writes),
        flushes: per(d.flushes),
        metadata_writes: per(o.engine.l2_writebacks + o.engine.refcount_writebacks),
        sim_us: o.row.sim_time_ns as f64 / n as f64 / 1000.0,
    })
}

/// The rows for people: one line per job, FUA beside write-then-flush.
pub fn render_fua_table(rows: &[FuaRow]) -> String {
    let mut out = String::from(
        "FUA jobs: 4 KiB writes, each durable when it completes (per guest request)\n",
    );
    let _ = writeln!(
        out,
        "{:<11} {:<10} {:<12} {:>8} {:>10} {:>9} {:>8} {:>9} {:>8}",
        "pattern",
        "image",
        "durability",
        "requests",
        "dev writes",
        "FUA",
        "flushes",
        "meta wr",
        "ssd us"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<11} {:<10} {:<12} {:>8} {:>10.2} {:>9.2} {:>8.2} {:>9.2} {:>8.1}",
            r.pattern.name(),
            r.fill.name(),
            r.durability.name(),
            r.requests,
            r.device_writes,
            r.fua_writes,
            r.flushes,
            r.metadata_writes,
            r.sim_us
        );
    }
    out
}
