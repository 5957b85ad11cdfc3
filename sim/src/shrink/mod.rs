//! Shrinking a failing case: the smallest case that still fails the same
//! way, found by delta debugging over the case's parts.
//!
//! A case is a list of concurrency groups of operations, on an image with
//! some options, on a device with some latencies and faults. The shrinker
//! runs a fixed list of passes, and runs the whole list again until a
//! round accepts nothing (a fixed point) or the run budget is spent:
//! 1. `drop_crashes`: each crash point, alone (a crash-free failure is the
//!    easiest to read); `cut_after_crash`: every group after a crash
//!    (earliest crash first); `move_crashes`: a crash into the group
//!    before it (a failure seen at an earlier crash);
//! 2. `quiet_faults`: injected I/O faults off, then each kind of fault
//!    alone; `quiet_outliers`: no request held long, else only the
//!    background reads, each by its own `hold` (a hold that moves with
//!    no removal), else runs of held requests dropped, halving down to
//!    one (before the passes,
//!    [`shrink_failing`] pins the requests the run held, and those it
//!    failed with EIO, to their ranks on their disks, so that removing an
//!    operation does not redraw which are held or fail); `plain_timing`: the
//!    uniform schedule, crashes at a drawn time rather than at a flush, no
//!    guard armed; `steady_device`: latencies without spread (every request of
//!    a kind takes its mean), then no seek, no extension cost, free
//!    transfers, unlimited channels, 512-byte sectors, default support.
//!    These come before the workload passes because they are few runs and
//!    make the run depend less on which operations are left: a latency
//!    drawn at random for every request shifts with every request removed;
//! 3. `drop_groups`: runs of whole groups, halving the run length (ddmin);
//! 4. `drop_ops`: runs of operations across groups, likewise, down to one
//!    operation at a time (the result is 1-minimal: no single operation
//!    can go); groups left empty go;
//! 5. `merge_groups`: two adjacent groups as one (fewer groups, and the
//!    next round's `drop_ops` sees the operations side by side);
//! 6. `coalesce_ops`: requests of one kind in one group as one request
//!    spanning them (a failure that needs many clusters allocated needs
//!    the allocations, not the requests); `shorten_ops`: each request down
//!    to its first or last sector, or to its first or second half, while
//!    it still fails;
//! 7. `lower_offsets`: every request moved down together (relative places
//!    kept), then each request toward sector 0: its cluster first, then
//!    its place in the cluster;
//! 8. `simplify_image`: no backing file (or a raw one), no external data
//!    file, no extended L2 entries, no lazy refcounts, and the default
//!    cluster size, refcount width, compression and engine options (cache
//!    sizes, growth, switches; never the broken variant);
//! 9. `shrink_disk`: the virtual size cut to the clusters the requests
//!    reach, else halved while every request still fits;
//! 10. `trim_ops`, only in a round where nothing else shrank: each
//!     request's end, then its start, trimmed by a quarter down to a
//!     sector;
//! 11. `thin_groups`, likewise: each group's requests of one kind thinned
//!     to one of them, each in turn (pinned rank faults of that kind moved
//!     down by the number removed, or one more);
//! 12. `rerank_drop_ops`, likewise: runs of operations removed (halving
//!     down to one), with the requests failed by rank on a disk (pinned)
//!     moved down by as many ranks as the run issued requests of their
//!     kind, or one more;
//! 13. `reseed_drop_ops`, likewise: each
//!     operation removed under each of `ShrinkOptions::reseeds` seeds after
//!     the case's own. Removing an operation shifts every random draw after
//!     it (schedule, latencies, crash states), so a failure that hangs on
//!     one interleaving often vanishes with any single operation, and under
//!     a neighbouring seed the smaller case may fail the same way again. The
//!     shrunk case then carries that seed, and replays as it is.
//!
//! Each candidate must pass [`Case::validate`] (an invalid one costs no
//! run) and is judged by a predicate; [`shrink_failing`] uses "the run
//! reports a failure of the same kind as the original's first failure".
//! Every accepted step makes the case smaller by [`CaseSize`] or leaves
//! that equal and moves something toward its simplest value (a crash
//! earlier, an offset lower, an option to its default), never back, so
//! rounds end. Everything is deterministic: the same case and predicate
//! always give the same result, in the same number of runs.

mod device;
pub mod image;
pub mod workload;

use crate::campaign::run_guarded_on;
use crate::case::Case;
use crate::driver::{DriverKind, EngineDriver};
use crate::runner::{Failure, RunReport};

/// Runs allowed by default. A shrink usually stops at its fixed point long
/// before; a case of a few hundred operations whose failure hangs on one
/// interleaving (every removal shifts the draws after it) takes a few
/// thousand runs to get small.
pub const DEFAULT_MAX_RUNS: u64 = 10_000;

/// Seeds `reseed_drop_ops` tries per operation by default.
pub const DEFAULT_RESEEDS: u64 = 16;

/// The kind of a failure, the unit "fails the same way" compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureKind {
    Model,
    Check,
    Engine,
    Hang,
    Panic,
    Overlap,
}

impl FailureKind {
    pub fn of(f: &Failure) -> FailureKind {
        match f {
            Failure::Model { .. } => FailureKind::Model,
            Failure::Check { .. } => FailureKind::Check,
            // A driver's own failure is its engine's.
            Failure::Engine { .. } | Failure::Driver { .. } => FailureKind::Engine,
            Failure::Hang { .. } => FailureKind::Hang,
            Failure::Panic { .. } => FailureKind::Panic,
            Failure::Overlap { .. } => FailureKind::Overlap,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            FailureKind::Model => "model",
            FailureKind::Check => "check",
            FailureKind::Engine => "engine",
            FailureKind::Hang => "hang",
            FailureKind::Panic => "panic",
            FailureKind::Overlap => "overlap",
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
    /// Seeds tried, after the case's own, for each operation the
    /// `reseed_drop_ops` pass tries to remove once nothing else shrinks (0:
    /// the pass is off, and the shrunk case keeps the original's seed).
    pub reseeds: u64,
}

impl Default for ShrinkOptions {
    fn default() -> Self {
        Self {
            max_runs: DEFAULT_MAX_RUNS,
            reseeds: DEFAULT_RESEEDS,
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
    shrink_failing_on(case, &EngineDriver, options, progress)
}

/// [`shrink_failing`] with every run on `driver` in place of qcsim's
/// engine (`crate::driver`): a case the driver fails shrinks as the
/// engine's failures do. A candidate the driver skips (an image it cannot
/// run) shows no failure, so the shrunk case stays one it runs.
pub fn shrink_failing_on(
    case: &Case,
    driver: &dyn DriverKind,
    options: &ShrinkOptions,
    progress: impl FnMut(&Progress),
) -> Result<(Shrunk, FailureKind), ShrinkError> {
    let run = |c: &Case| run_guarded_on(c, driver);
    let first = run(case);
    let kind = first
        .failures
        .first()
        .map(FailureKind::of)
        .ok_or(ShrinkError::Passes)?;
    let (start, report) = pin_outliers(case, first, &kind, &run);
    let start = pin_faults(start, &report, &kind, &run);
    let shrunk = shrink_with(&start, options, |c| kind.in_report(&run(c)), progress)?;
    Ok((shrunk, kind))
}

/// `case` with the requests its run `report` held long pinned by rank
/// (`OutlierOptions::held`, every rate 0), if it still fails so: removing
/// an operation then leaves the other held requests held, where under
/// rates every later draw would shift. Else `case` itself. Either way
/// with the report of the case returned.
fn pin_outliers(
    case: &Case,
    report: RunReport,
    kind: &FailureKind,
    run_guarded: &dyn Fn(&Case) -> RunReport,
) -> (Case, RunReport) {
    let o = &case.disk.latency.outliers;
    if o.image.is_none() && o.data_file.is_none() && o.backing.is_none() {
        return (case.clone(), report);
    }
    let mut pinned = case.clone();
    let o = &mut pinned.disk.latency.outliers;
    o.image = Default::default();
    o.data_file = Default::default();
    o.backing = Default::default();
    o.held = report.held.clone();
    if pinned.validate().is_ok() {
        let again = run_guarded(&pinned);
        if kind.in_report(&again) {
            return (pinned, again);
        }
    }
    (case.clone(), report)
}

/// `case` with the requests its run (`report`) failed with EIO pinned by rank on
/// their disk (`FaultOptions::error_at` with `NthRequest::device`, the
/// EIO rates 0), if it still fails so: a failure that needed a fault
/// drawn at a rate is lost as soon as a removed operation shifts which
/// request the draw falls on (a removed flush before it moves the fault to
/// the next flush, not off the flushes). Else `case` itself.
fn pin_faults(
    case: Case,
    report: &RunReport,
    kind: &FailureKind,
    run_guarded: &dyn Fn(&Case) -> RunReport,
) -> Case {
    let f = &case.disk.faults;
    if !f.enabled || f.read_error_ppm + f.write_error_ppm + f.flush_error_ppm == 0 {
        return case;
    }
    let mut pinned = case.clone();
    let f = &mut pinned.disk.faults;
    f.read_error_ppm = 0;
    f.write_error_ppm = 0;
    f.flush_error_ppm = 0;
    f.error_at = report.failed.clone();
    if pinned.validate().is_ok() && kind.in_report(&run_guarded(&pinned)) {
        pinned
    } else {
        case
    }
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
        s.cut_after_crash();
        s.move_crashes();
        s.quiet_faults();
        s.quiet_outliers();
        s.plain_timing();
        s.steady_device();
        s.drop_groups();
        s.drop_ops();
        s.plain_requests();
        s.merge_groups();
        s.coalesce_ops();
        s.shorten_ops();
        s.lower_offsets();
        s.simplify_image();
        s.shrink_disk();
        if s.steps == before {
            // Stalled: the fine trims, then the last resort, then a new
            // round if either found something (the cheaper passes may go
            // on from there).
            s.trim_ops();
        }
        if s.steps == before {
            s.thin_groups();
        }
        if s.steps == before {
            s.rerank_drop_ops();
        }
        if s.steps == before {
            s.reseed_drop_ops(options.reseeds);
        }
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

    /// ddmin's removal loop over a list `len` measures in the case (groups,
    /// operations, held requests): runs of half its length, then halving
    /// down to one, from each start; `try_run(self, start, len)` builds
    /// and tries the candidate without that run, and when it is kept the
    /// next run has moved into the same start.
    fn halving_runs(
        &mut self,
        len: impl Fn(&Case) -> usize,
        mut try_run: impl FnMut(&mut Self, usize, usize) -> bool,
    ) {
        let mut chunk = len(&self.best).div_ceil(2);
        while chunk >= 1 && !self.out_of_runs() {
            let mut start = 0;
            while start < len(&self.best) && !self.out_of_runs() {
                if !try_run(self, start, chunk) {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }

    /// Tries each edit on the case as it stands when its turn comes, in
    /// order, keeping every one under which the case still fails. An edit
    /// that changes nothing costs no run (`try_case`).
    fn try_edits(&mut self, pass: &'static str, edits: &[&dyn Fn(&mut Case)]) {
        for edit in edits {
            let mut c = self.best.clone();
            edit(&mut c);
            self.try_case(pass, c);
        }
    }
}
