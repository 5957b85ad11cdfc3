//! Shrinking a failing case: the smallest case that still fails the same
//! way, found by delta debugging over the case's parts.
//!
//! A case is a list of concurrency groups of operations, on an image of
//! some virtual size, on a device with some faults. The shrinker tries, in
//! a fixed order until nothing more can be removed:
//! 1. `drop_crashes`: each crash point, alone (a crash-free failure is the
//!    easiest to read);
//! 2. `drop_groups`: runs of whole groups, halving the run length (ddmin);
//! 3. `drop_ops`: runs of operations across groups, likewise; groups left
//!    empty go;
//! 4. `shorten_ops`: each request's length down to one sector, or halved;
//! 5. `quiet_faults`: injected I/O faults off;
//! 6. `shrink_disk`: the virtual size halved while every request still
//!    fits.
//!
//! Each candidate must pass [`Case::validate`] and is judged by a predicate;
//! [`shrink_failing`] uses "the run reports a failure of the same kind as
//! the original's first failure". Everything is deterministic: the same
//! case and predicate always give the same result, in the same number of
//! runs.

use crate::campaign::run_guarded;
use crate::case::{Case, Op};
use crate::runner::{Failure, RunReport};

/// Runs allowed by default: enough for cases of a few hundred operations.
pub const DEFAULT_MAX_RUNS: u64 = 2000;

/// The kind of a failure, the unit "fails the same way" compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    Model,
    Check,
    Engine,
    Hang,
    Panic,
}

impl FailureKind {
    pub fn of(f: &Failure) -> FailureKind {
        match f {
            Failure::Model { .. } => FailureKind::Model,
            Failure::Check { .. } => FailureKind::Check,
            Failure::Engine { .. } => FailureKind::Engine,
            Failure::Hang { .. } => FailureKind::Hang,
            Failure::Panic { .. } => FailureKind::Panic,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            FailureKind::Model => "model",
            FailureKind::Check => "check",
            FailureKind::Engine => "engine",
            FailureKind::Hang => "hang",
            FailureKind::Panic => "panic",
        }
    }

    /// Whether `report` holds a failure of this kind.
    pub fn in_report(&self, report: &RunReport) -> bool {
        report.failures.iter().any(|f| FailureKind::of(f) == *self)
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How far to shrink.
#[derive(Debug, Clone, Copy)]
pub struct ShrinkOptions {
    /// Most predicate evaluations (runs), the original's included; the
    /// smallest case found so far is returned when they run out.
    pub max_runs: u64,
}

impl Default for ShrinkOptions {
    fn default() -> Self {
        Self {
            max_runs: DEFAULT_MAX_RUNS,
        }
    }
}

/// A case's size, compared in this order: fewer operations first, then
/// fewer sectors touched, fewer groups, a smaller disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CaseSize {
    pub ops: usize,
    pub sectors: u64,
    pub groups: usize,
    pub virtual_size: u64,
}

impl CaseSize {
    pub fn of(case: &Case) -> CaseSize {
        CaseSize {
            ops: case.workload.iter().map(Vec::len).sum(),
            sectors: case
                .workload
                .iter()
                .flatten()
                .filter_map(|op| op.range())
                .map(|(_, n)| n)
                .sum(),
            groups: case.workload.len(),
            virtual_size: case.image.create.size,
        }
    }
}

impl std::fmt::Display for CaseSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ops in {} groups, {} sectors, {} KiB disk",
            self.ops,
            self.groups,
            self.sectors,
            self.virtual_size >> 10
        )
    }
}

/// What the shrinker reports as it goes: after each accepted step.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// The pass that found the step.
    pub pass: &'static str,
    pub runs: u64,
    pub size: CaseSize,
}

/// The result of a shrink.
#[derive(Debug, Clone)]
pub struct Shrunk {
    pub case: Case,
    /// Predicate evaluations made, the original's included.
    pub runs: u64,
    /// Candidates accepted.
    pub steps: u64,
    /// Whether the run budget ran out before a fixed point.
    pub budget_exhausted: bool,
}

/// Why a case cannot be shrunk.
#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    #[error("the case does not fail: nothing to shrink")]
    Passes,
}

/// Shrinks a failing case to the smallest one that still fails with the
/// kind of its first failure, re-running it (panics caught) for every
/// candidate. Returns the shrunk case and that kind.
pub fn shrink_failing(
    case: &Case,
    options: &ShrinkOptions,
    progress: impl FnMut(&Progress),
) -> Result<(Shrunk, FailureKind), ShrinkError> {
    let first = run_guarded(case);
    let kind = first
        .failures
        .first()
        .map(FailureKind::of)
        .ok_or(ShrinkError::Passes)?;
    let shrunk = shrink_with(case, options, |c| kind.in_report(&run_guarded(c)), progress)?;
    Ok((shrunk, kind))
}

/// Shrinks `case` under any predicate: `fails(c)` says whether candidate
/// `c` still shows the failure. `case` itself must satisfy it.
pub fn shrink_with(
    case: &Case,
    options: &ShrinkOptions,
    fails: impl FnMut(&Case) -> bool,
    progress: impl FnMut(&Progress),
) -> Result<Shrunk, ShrinkError> {
    let mut s = Shrinker {
        best: case.clone(),
        fails,
        progress,
        runs: 0,
        steps: 0,
        max_runs: options.max_runs.max(1),
    };
    s.runs += 1;
    if !(s.fails)(case) {
        return Err(ShrinkError::Passes);
    }
    loop {
        let before = s.steps;
        s.drop_crashes();
        s.drop_groups();
        s.drop_ops();
        s.shorten_ops();
        s.quiet_faults();
        s.shrink_disk();
        if s.steps == before || s.out_of_runs() {
            break;
        }
    }
    Ok(Shrunk {
        budget_exhausted: s.out_of_runs(),
        case: s.best,
        runs: s.runs,
        steps: s.steps,
    })
}

struct Shrinker<F, P> {
    best: Case,
    fails: F,
    progress: P,
    runs: u64,
    steps: u64,
    max_runs: u64,
}

impl<F: FnMut(&Case) -> bool, P: FnMut(&Progress)> Shrinker<F, P> {
    fn out_of_runs(&self) -> bool {
        self.runs >= self.max_runs
    }

    /// Judge `candidate`; keep it if it is valid and still fails.
    fn try_case(&mut self, pass: &'static str, candidate: Case) -> bool {
        if self.out_of_runs() || candidate == self.best || candidate.validate().is_err() {
            return false;
        }
        self.runs += 1;
        if !(self.fails)(&candidate) {
            return false;
        }
        self.best = candidate;
        self.steps += 1;
        (self.progress)(&Progress {
            pass,
            runs: self.runs,
            size: CaseSize::of(&self.best),
        });
        true
    }

    fn drop_crashes(&mut self) {
        let mut k = 0;
        while let Some((g, i)) = crash_positions(&self.best).get(k).copied() {
            let mut c = self.best.clone();
            c.workload[g].remove(i);
            c.workload.retain(|ops| !ops.is_empty());
            if !self.try_case("drop_crashes", c) {
                k += 1;
            }
        }
    }

    fn drop_groups(&mut self) {
        let mut chunk = self.best.workload.len().div_ceil(2);
        while chunk >= 1 {
            let mut start = 0;
            while start < self.best.workload.len() {
                let mut c = self.best.clone();
                let end = (start + chunk).min(c.workload.len());
                c.workload.drain(start..end);
                if !self.try_case("drop_groups", c) {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }

    fn drop_ops(&mut self) {
        let total = |c: &Case| c.workload.iter().map(Vec::len).sum::<usize>();
        let mut chunk = total(&self.best).div_ceil(2);
        while chunk >= 1 {
            let mut start = 0;
            while start < total(&self.best) {
                let c = without_ops(&self.best, start, chunk);
                if !self.try_case("drop_ops", c) {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }

    fn shorten_ops(&mut self) {
        let positions: Vec<(usize, usize)> = self
            .best
            .workload
            .iter()
            .enumerate()
            .flat_map(|(g, ops)| (0..ops.len()).map(move |i| (g, i)))
            .collect();
        for (g, i) in positions {
            // One sector first; failing that, halve while it still fails.
            while let Some((_, n)) = self.best.workload[g][i].range() {
                if n <= 1 {
                    break;
                }
                let mut c = self.best.clone();
                c.workload[g][i] = with_length(c.workload[g][i], 1);
                if self.try_case("shorten_ops", c) {
                    break;
                }
                let mut c = self.best.clone();
                c.workload[g][i] = with_length(c.workload[g][i], n / 2);
                if !self.try_case("shorten_ops", c) {
                    break;
                }
            }
        }
    }

    fn quiet_faults(&mut self) {
        if self.best.disk.faults.enabled {
            let mut c = self.best.clone();
            c.disk.faults.enabled = false;
            self.try_case("quiet_faults", c);
        }
    }

    fn shrink_disk(&mut self) {
        loop {
            let size = self.best.image.create.size;
            let half = (size / 2).next_multiple_of(oracle::data::SECTOR_SIZE as u64);
            if half >= size {
                break;
            }
            let mut c = self.best.clone();
            c.image.create.size = half;
            // An invalid candidate (a request past the new end) is refused
            // by `try_case` without a run.
            if !self.try_case("shrink_disk", c) {
                break;
            }
        }
    }
}

/// Where the crash operations are, as (group, index).
fn crash_positions(case: &Case) -> Vec<(usize, usize)> {
    case.workload
        .iter()
        .enumerate()
        .flat_map(|(g, ops)| {
            ops.iter()
                .enumerate()
                .filter(|(_, op)| matches!(op, Op::Crash))
                .map(move |(i, _)| (g, i))
        })
        .collect()
}

/// `case` without the `count` operations from flat position `start`;
/// groups left empty are removed.
fn without_ops(case: &Case, start: usize, count: usize) -> Case {
    let mut c = case.clone();
    let mut pos = 0;
    for ops in &mut c.workload {
        let mut kept = Vec::with_capacity(ops.len());
        for op in ops.drain(..) {
            if pos < start || pos >= start + count {
                kept.push(op);
            }
            pos += 1;
        }
        *ops = kept;
    }
    c.workload.retain(|ops| !ops.is_empty());
    c
}

/// `op` covering `sectors` sectors from the same first sector.
fn with_length(op: Op, n: u64) -> Op {
    match op {
        Op::Write { sector, .. } => Op::Write { sector, sectors: n },
        Op::Read { sector, .. } => Op::Read { sector, sectors: n },
        Op::WriteZeroes { sector, unmap, .. } => Op::WriteZeroes {
            sector,
            sectors: n,
            unmap,
        },
        Op::Discard { sector, .. } => Op::Discard { sector, sectors: n },
        Op::Flush | Op::Crash => op,
    }
}
