//! A trace as a case: the trace's requests become the case's operations,
//! so that a trace run is checked by the runner exactly as a campaign's
//! cases are (every read and every crash state against the model, every
//! post-crash and the final image by the checker), and saved and replayed
//! as any case is.
//!
//! - Requests are issued in trace order in *windows* of at most `depth`
//!   requests, a window being a concurrency group of the case: its
//!   requests are in flight together, and the next window starts when
//!   they have all completed. A request that overlaps one already in the
//!   window (unless both are reads) starts a new window, so that it sees
//!   (or overwrites) what the earlier one did, as in the recording.
//! - A flush is a window of its own: a barrier.
//! - Byte ranges become 512-byte guest sectors, rounded out to whole
//!   sectors where a request is not aligned (counted); a request longer
//!   than a case's longest operation ([`MAX_OP_SECTORS`], 2 MiB) is split
//!   into operations of at most that, each counting towards the depth.
//! - `z` is a write_zeroes that may not unmap; `d` a discard.
//! - A FUA request (`fua` on its line) becomes an operation with its
//!   `fua` flag set, which the runner sends to the engine's FUA entry
//!   points and the model holds durable once it completes. Every piece of
//!   a split FUA request is FUA (each must be durable when the request
//!   is), and rounding a request out changes nothing of its flag.
//! - `crashes` crash points go into windows drawn from the seed (a window
//!   is cut short at a time the run draws, possibly with its requests in
//!   flight, and the image is reopened and checked before the next one);
//!   with `crash_after_flush`, a crash also follows every flush that
//!   completes (a window of its own, at rest).
//!
//! The case's bounds ([`crate::case`]) apply: a virtual disk of at most
//! [`MAX_VIRTUAL_SIZE`], at most [`MAX_OPS`] operations, and at most
//! [`MAX_WRITTEN_SECTORS`] sectors written, [`MAX_EPOCH_WORK`] device
//! requests between two crashes and [`MAX_WORK`] in all; each is refused
//! with an error naming it (and the trace line where it can).

use crate::exec::SchedulePolicy;
use engine::{CreateOptions, EngineOptions};
use oracle::data::SECTOR_SIZE;
use rand::Rng;

use super::{Request, Trace};
use crate::case::{
    Case, CaseError, DataFileSpec, ImageSpec, Op, CASE_VERSION, MAX_EPOCH_WORK, MAX_GROUP_OPS,
    MAX_OPS, MAX_OP_SECTORS, MAX_VIRTUAL_SIZE, MAX_WORK, MAX_WRITTEN_SECTORS,
};
use crate::disk::DiskOptions;
use crate::rng::{self, Stream};

/// Requests in flight at once unless told otherwise.
pub const DEFAULT_DEPTH: usize = 8;
/// The workload substream the crash windows are drawn from (a trace case
/// has no generated workload, whose substreams are 0 to 4).
const CRASH_WINDOWS: u32 = 100;

/// How to run a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracePlan {
    /// The case's seed: scheduling, latencies, crash times and states, and
    /// which windows crash.
    pub seed: u64,
    /// The fresh image (as `qemu-img create -o`), its size the disk's.
    pub create: CreateOptions,
    pub engine: EngineOptions,
    pub disk: DiskOptions,
    /// Most requests in flight at once, 1 to [`MAX_GROUP_OPS`].
    pub depth: usize,
    /// Crash points drawn from the seed.
    pub crashes: usize,
    /// A crash after every flush, too.
    pub crash_after_flush: bool,
}

impl TracePlan {
    /// A plan with the defaults: engine and disk as their defaults (every
    /// switch on, no faults), depth [`DEFAULT_DEPTH`], no crash.
    pub fn new(seed: u64, create: CreateOptions) -> TracePlan {
        TracePlan {
            seed,
            create,
            engine: EngineOptions::default(),
            disk: DiskOptions::default(),
            depth: DEFAULT_DEPTH,
            crashes: 0,
            crash_after_flush: false,
        }
    }
}

/// What a plan made of a trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Requests of the trace.
    pub requests: u64,
    /// Guest operations of the case, crash points included.
    pub ops: u64,
    /// Concurrency groups (windows, flushes, crash points of their own).
    pub groups: u64,
    /// Requests split into several operations.
    pub split: u64,
    /// Requests rounded out to whole sectors.
    pub rounded: u64,
    /// FUA requests of the trace.
    pub fua: u64,
    /// Operations of the case flagged FUA (more than `fua` where a FUA
    /// request is split).
    pub fua_ops: u64,
    /// Crash points drawn from the seed.
    pub crashes: u64,
    /// Crash points after flushes.
    pub crashes_after_flush: u64,
}

/// A trace as a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceCase {
    pub case: Case,
    /// The trace line of every operation, group by group (0 for a crash
    /// point).
    pub lines: Vec<Vec<u64>>,
    pub stats: PlanStats,
}

impl TraceCase {
    /// The trace lines group `g` of the case covers, as (first, last);
    /// None for a group of a crash point alone.
    pub fn group_lines(&self, g: usize) -> Option<(u64, u64)> {
        let lines = self.lines.get(g)?.iter().filter(|&&l| l > 0);
        let (lo, hi) = lines.fold((u64::MAX, 0), |(lo, hi), &l| (lo.min(l), hi.max(l)));
        (hi > 0).then_some((lo, hi))
    }
}

/// Why a trace cannot run.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "virtual size {0} bytes: must be a non-zero multiple of 512 and at most \
         {MAX_VIRTUAL_SIZE} bytes, the harness's largest virtual disk (case::MAX_VIRTUAL_SIZE)"
    )]
    Size(u64),
    #[error("depth {0}: must be 1 to {MAX_GROUP_OPS} requests in flight (case::MAX_GROUP_OPS)")]
    Depth(usize),
    #[error("image options: {0}")]
    Image(String),
    #[error("line {line}: `{request}` ends at byte {end}, past the end of the {size}-byte disk")]
    PastEnd {
        line: u64,
        request: Request,
        end: u64,
        size: u64,
    },
    #[error(
        "line {line}: the trace needs more than {MAX_OPS} operations by this line (a request \
         longer than {MAX_OP_SECTORS} sectors counts one per {MAX_OP_SECTORS}), more than one \
         run holds (case::MAX_OPS)"
    )]
    TooManyOps { line: u64 },
    #[error(
        "{ops} operations with the crash points, more than one run holds ({MAX_OPS}, \
         case::MAX_OPS): fewer crashes or a shorter trace"
    )]
    TooManyWithCrashes { ops: u64 },
    #[error("{crashes} crashes: the replay has only {places} windows of requests to crash in")]
    Crashes { crashes: usize, places: usize },
    #[error("the trace is too large for one run: {0}")]
    TooLarge(String),
    #[error("{0}")]
    Case(String),
}

/// The case that runs `trace` as `plan` says.
pub fn plan_case(trace: &Trace, plan: &TracePlan) -> Result<TraceCase, PlanError> {
    let ss = SECTOR_SIZE as u64;
    let size = plan.create.size;
    if size == 0 || !size.is_multiple_of(ss) || size > MAX_VIRTUAL_SIZE {
        return Err(PlanError::Size(size));
    }
    if !(1..=MAX_GROUP_OPS).contains(&plan.depth) {
        return Err(PlanError::Depth(plan.depth));
    }
    let image = image_spec(&plan.create)?;
    let mut stats = PlanStats {
        requests: trace.entries.len() as u64,
        ..PlanStats::default()
    };

    // Windows: (operations, their lines, whether it is a flush).
    let mut windows: Vec<(Vec<Op>, Vec<u64>, bool)> = Vec::new();
    let mut cur: (Vec<Op>, Vec<u64>) = (Vec::new(), Vec::new());
    let close = |cur: &mut (Vec<Op>, Vec<u64>), windows: &mut Vec<(Vec<Op>, Vec<u64>, bool)>| {
        if !cur.0.is_empty() {
            let (ops, lines) = std::mem::take(cur);
            windows.push((ops, lines, false));
        }
    };
    let mut ops = 0u64;
    for e in &trace.entries {
        let Some((offset, length)) = e.request.range() else {
            close(&mut cur, &mut windows);
            windows.push((vec![Op::Flush], vec![e.line], true));
            ops += 1;
            if ops > MAX_OPS as u64 {
                return Err(PlanError::TooManyOps { line: e.line });
            }
            continue;
        };
        let end = offset + length;
        if end > size {
            return Err(PlanError::PastEnd {
                line: e.line,
                request: e.request,
                end,
                size,
            });
        }
        if !offset.is_multiple_of(ss) || !end.is_multiple_of(ss) {
            stats.rounded += 1;
        }
        let (first, last) = (offset / ss, end.div_ceil(ss));
        if last - first > MAX_OP_SECTORS {
            stats.split += 1;
        }
        let fua = e.request.is_fua();
        stats.fua += u64::from(fua);
        let mut sector = first;
        while sector < last {
            let sectors = (last - sector).min(MAX_OP_SECTORS);
            let op = match e.request {
                Request::Write { .. } => Op::Write {
                    sector,
                    sectors,
                    fua,
                },
                Request::Read { .. } => Op::Read { sector, sectors },
                Request::WriteZeroes { .. } => Op::WriteZeroes {
                    sector,
                    sectors,
                    unmap: false,
                    fua,
                },
                Request::Discard { .. } => Op::Discard {
                    sector,
                    sectors,
                    fua,
                },
                Request::Flush => unreachable!("a flush has no range"),
            };
            stats.fua_ops += u64::from(op.is_fua());
            if cur.0.len() >= plan.depth || cur.0.iter().any(|o| conflicts(o, &op)) {
                close(&mut cur, &mut windows);
            }
            cur.0.push(op);
            cur.1.push(e.line);
            ops += 1;
            if ops > MAX_OPS as u64 {
                return Err(PlanError::TooManyOps { line: e.line });
            }
            sector += sectors;
        }
    }
    close(&mut cur, &mut windows);

    // Crash points: `crashes` distinct windows, drawn from the seed
    // (a partial Fisher-Yates shuffle, u32 draws as everywhere in cases).
    let places = windows.len();
    if plan.crashes > places {
        return Err(PlanError::Crashes {
            crashes: plan.crashes,
            places,
        });
    }
    let mut chosen = vec![false; places];
    {
        let mut rng = rng::substream(plan.seed, Stream::Workload, CRASH_WINDOWS);
        let mut order: Vec<u32> = (0..places as u32).collect();
        for i in 0..plan.crashes {
            let j = rng.gen_range(i as u32..places as u32) as usize;
            order.swap(i, j);
            chosen[order[i] as usize] = true;
        }
    }
    let mut workload = Vec::new();
    let mut lines = Vec::new();
    for ((mut group, mut group_lines, flush), crash) in windows.into_iter().zip(chosen) {
        let mut alone = false;
        if crash {
            stats.crashes += 1;
            if group.len() < MAX_GROUP_OPS {
                group.push(Op::Crash);
                group_lines.push(0);
            } else {
                alone = true;
            }
        }
        workload.push(group);
        lines.push(group_lines);
        if alone || (flush && !crash && plan.crash_after_flush) {
            if !alone {
                stats.crashes_after_flush += 1;
            }
            workload.push(vec![Op::Crash]);
            lines.push(vec![0]);
        }
    }
    stats.groups = workload.len() as u64;
    stats.ops = workload.iter().map(|g| g.len() as u64).sum();
    if stats.ops > MAX_OPS as u64 {
        return Err(PlanError::TooManyWithCrashes { ops: stats.ops });
    }
    let case = Case {
        version: CASE_VERSION,
        seed: plan.seed,
        profile: None,
        engine: plan.engine.clone(),
        image,
        disk: plan.disk.clone(),
        workload,
        schedule: SchedulePolicy::Random,
    };
    let tc = TraceCase { case, lines, stats };
    tc.check_size()?;
    tc.case.validate().map_err(|e| tc.case_error(e))?;
    Ok(tc)
}

/// Whether two operations may not be in flight together: they overlap,
/// and one of them changes what the other reads or writes.
fn conflicts(a: &Op, b: &Op) -> bool {
    let (Some((s1, n1)), Some((s2, n2))) = (a.range(), b.range()) else {
        return true;
    };
    let both_read = matches!(a, Op::Read { .. }) && matches!(b, Op::Read { .. });
    s1 < s2 + n2 && s2 < s1 + n1 && !both_read
}

fn image_spec(create: &CreateOptions) -> Result<ImageSpec, PlanError> {
    if create.backing_file.is_some() || create.backing_format.is_some() {
        return Err(PlanError::Image(
            "a trace runs on a fresh image without a backing file".into(),
        ));
    }
    let spec = ImageSpec {
        create: create.clone(),
        backing: None,
        data_file: None,
    };
    Ok(match create.data_file {
        // The data file lives on a second simulated disk, under the name
        // cases give it.
        Some(_) => spec.with_data_file(DataFileSpec {
            raw: create.data_file_raw,
        }),
        None => spec,
    })
}

impl TraceCase {
    /// The case's size bounds, with the trace lines where they are passed.
    fn check_size(&self) -> Result<(), PlanError> {
        let case = &self.case;
        let written = case.written_sectors();
        if written > MAX_WRITTEN_SECTORS {
            return Err(PlanError::TooLarge(format!(
                "its writes, write_zeroes and discards cover {written} sectors of 512 bytes, \
                 more than {MAX_WRITTEN_SECTORS} (case::MAX_WRITTEN_SECTORS: the model and the \
                 crash states keep a record per sector written since the last flush)"
            )));
        }
        for (epoch, &work) in case.epoch_work().iter().enumerate() {
            if work > MAX_EPOCH_WORK {
                let (first, last) = self.epoch_lines(epoch);
                return Err(PlanError::TooLarge(format!(
                    "trace lines {first} to {last} (between two crashes) need about {work} \
                     device requests, more than {MAX_EPOCH_WORK} (case::MAX_EPOCH_WORK: the disk \
                     logs every request between two crashes): more crashes, or larger clusters"
                )));
            }
        }
        let work = case.work();
        if work > MAX_WORK {
            return Err(PlanError::TooLarge(format!(
                "the run needs about {work} device requests, more than {MAX_WORK} \
                 (case::MAX_WORK; every crash reads the whole disk back): fewer crashes, a \
                 smaller disk or larger clusters"
            )));
        }
        Ok(())
    }

    /// The first and last trace lines of epoch `epoch` (each crash ends
    /// one).
    fn epoch_lines(&self, epoch: usize) -> (u64, u64) {
        let mut e = 0;
        let (mut first, mut last) = (u64::MAX, 0);
        for (g, ops) in self.case.workload.iter().enumerate() {
            if e == epoch {
                if let Some((lo, hi)) = self.group_lines(g) {
                    first = first.min(lo);
                    last = last.max(hi);
                }
            }
            if ops.contains(&Op::Crash) {
                e += 1;
            }
        }
        (first.min(last), last)
    }

    /// A validation error, with the trace line where it names an operation.
    fn case_error(&self, e: CaseError) -> PlanError {
        match e {
            CaseError::OpRange { group, index, .. } => {
                let line = self.lines[group][index];
                PlanError::Case(format!("line {line}: {e}"))
            }
            e => PlanError::Case(e.to_string()),
        }
    }
}
