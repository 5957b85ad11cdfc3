//! Bounded exhaustive workloads, as B3 and CrashMonkey do for file systems:
//! every workload of up to three guest operations from a small vocabulary
//! (`vocab`), with a flush after every subset of them, on a few geometries;
//! for each, every crash state of every crash point of its last step
//! (`run`), identical states checked once, with the model and the checker
//! as the runner checks a crash; the counts summed (`report`).
//!
//! Each workload is an ordinary [`Case`](crate::case::Case), so a failure
//! is saved and replayed as any case is. Workloads run on worker threads as
//! a campaign's cases do; a workload's check is a pure function of it, and
//! the counts are sums, so the report does not depend on the number of
//! workers or the order they finish in (failures are kept in workload
//! order).

mod report;
mod run;
mod vocab;

pub use report::{Counts, ExhaustFailure, ExhaustReport, FAILURES_KEPT};
pub use run::{check_workload, Point, PointOutcome, WorkloadOutcome};
pub use vocab::{
    workload_count, workloads, Extent, Geometry, Kind, Step, VocabOp, Workload, DISK_CLUSTERS,
    GROW_AHEAD, MAX_OPS, SEED,
};

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

#[cfg(feature = "broken")]
use engine::options::Broken;
use engine::{EngineOptions, Switches};

use crate::case::CaseError;
use crate::runner::{EnumerateError, EnumerateOptions, Failure, Granularity};

/// Most states enumerated per crash point by default.
pub const DEFAULT_CAP: u64 = 64;

/// What to enumerate.
#[derive(Debug, Clone)]
pub struct ExhaustOptions {
    /// Most operations per workload, 1 to [`MAX_OPS`], on every geometry;
    /// `None`: each geometry's [`Geometry::default_max_ops`].
    pub max_ops: Option<usize>,
    /// The operations workloads are built from (by default
    /// [`VocabOp::all`]).
    pub vocabulary: Vec<VocabOp>,
    /// The images they run on (by default [`Geometry::all`]).
    pub geometries: Vec<Geometry>,
    /// The engine's switches (by default all on).
    pub switches: Switches,
    /// Crash states per crash point: `Granularity::Auto` (sector by sector
    /// when every such state fits under the cap, else write by write) and
    /// the cap.
    pub enumerate: EnumerateOptions,
    /// Worker threads; at least 1.
    pub jobs: usize,
    /// A deliberately broken engine variant to run instead of the correct
    /// engine (tests that prove exhaust catches each).
    #[cfg(feature = "broken")]
    pub broken: Option<Broken>,
}

impl Default for ExhaustOptions {
    fn default() -> Self {
        ExhaustOptions {
            max_ops: None,
            vocabulary: VocabOp::all(),
            geometries: Geometry::all(),
            switches: Switches::ALL_ON,
            enumerate: EnumerateOptions {
                granularity: Granularity::Auto,
                cap: DEFAULT_CAP,
            },
            jobs: 1,
            #[cfg(feature = "broken")]
            broken: None,
        }
    }
}

impl ExhaustOptions {
    /// The engine options every case gets.
    pub fn engine(&self) -> EngineOptions {
        EngineOptions {
            switches: self.switches,
            grow_ahead: GROW_AHEAD,
            #[cfg(feature = "broken")]
            broken: self.broken,
            ..EngineOptions::default()
        }
    }

    /// Most operations per workload on `geometry`.
    pub fn max_ops(&self, geometry: &Geometry) -> usize {
        self.max_ops.unwrap_or_else(|| geometry.default_max_ops())
    }

    /// How many workloads each geometry gets, in order.
    pub fn workloads_per_geometry(&self) -> Vec<u64> {
        let v = self.vocabulary.len() as u64;
        self.geometries
            .iter()
            .map(|g| workload_count(v, self.max_ops(g)))
            .collect()
    }

    /// How many workloads the options describe.
    pub fn workload_count(&self) -> u64 {
        self.workloads_per_geometry().iter().sum()
    }
}

/// Why an exhaust run could not be done. The causes are in the messages
/// and not `source()`s (see `CaseError`).
#[derive(Debug, thiserror::Error)]
pub enum ExhaustError {
    #[error("{0} operations per workload: must be 1 to {MAX_OPS}")]
    Ops(usize),
    #[error("the vocabulary is empty")]
    EmptyVocabulary,
    #[error("no geometry to run on")]
    NoGeometry,
    #[error("the case of workload {workload}: {error}")]
    Case { workload: String, error: CaseError },
    #[error("workload {workload}, crash point {point}: {error}")]
    Enumerate {
        workload: String,
        point: Point,
        error: EnumerateError,
    },
}

/// Run every workload `options` describe; `progress(done, total, failed)`
/// is called after each workload with the workloads done and failed so far.
pub fn run_exhaust(
    options: &ExhaustOptions,
    progress: &(dyn Fn(u64, u64, u64) + Sync),
) -> Result<ExhaustReport, ExhaustError> {
    if let Some(n) = options.max_ops.filter(|n| !(1..=MAX_OPS).contains(n)) {
        return Err(ExhaustError::Ops(n));
    }
    if options.vocabulary.is_empty() {
        return Err(ExhaustError::EmptyVocabulary);
    }
    if options.geometries.is_empty() {
        return Err(ExhaustError::NoGeometry);
    }
    // Workloads are ordered by number of operations first, so a geometry
    // with a lower bound takes a prefix of the longest list.
    let most = options.geometries.iter().map(|g| options.max_ops(g)).max();
    let workloads = workloads(&options.vocabulary, most.unwrap_or(MAX_OPS));
    let per_geometry_total = options.workloads_per_geometry();
    let total: usize = per_geometry_total.iter().sum::<u64>() as usize;
    // Item `i` is workload `i - starts[g]` of geometry `g`.
    let starts: Vec<usize> = per_geometry_total
        .iter()
        .scan(0usize, |acc, &n| {
            let start = *acc;
            *acc += n as usize;
            Some(start)
        })
        .collect();
    let item = |i: usize| {
        let g = starts.iter().rposition(|&s| s <= i).expect("starts at 0");
        (g, i - starts[g])
    };
    let engine = options.engine();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut per_geometry = vec![Counts::default(); options.geometries.len()];
    let mut counts = Counts::default();
    // Keyed by (workload ordinal, failure within it), so that the failures
    // kept are the first in workload order whichever worker finished first.
    let mut failures: BTreeMap<(usize, usize), ExhaustFailure> = BTreeMap::new();
    let mut first_error: Option<(usize, ExhaustError)> = None;
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.max(1) {
            let tx = tx.clone();
            let (next, stop, workloads, engine, item) = (&next, &stop, &workloads, &engine, &item);
            scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let (g, w) = item(i);
                let geometry = options.geometries[g];
                let workload = &workloads[w];
                let result = check_guarded(geometry, workload, engine, &options.enumerate);
                if tx.send((i, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, result) in rx {
            let (g, w) = item(i);
            match result {
                Ok(outcome) => {
                    counts.add(&outcome);
                    per_geometry[g].add(&outcome);
                    let geometry = options.geometries[g].name();
                    let workload = workloads[w].to_string();
                    for (k, f) in ExhaustFailure::of(&geometry, &workload, &outcome)
                        .into_iter()
                        .enumerate()
                    {
                        failures.insert((i, k), f);
                        if failures.len() > FAILURES_KEPT {
                            failures.pop_last();
                        }
                    }
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    if first_error.as_ref().is_none_or(|(j, _)| i < *j) {
                        first_error = Some((i, e));
                    }
                }
            }
            progress(counts.workloads, total as u64, counts.failed_workloads);
        }
    });
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    Ok(ExhaustReport {
        geometries: options.geometries.iter().map(Geometry::name).collect(),
        vocabulary: options.vocabulary.iter().map(VocabOp::name).collect(),
        max_ops: options
            .geometries
            .iter()
            .map(|g| options.max_ops(g))
            .collect(),
        switches: options.switches.mask(),
        granularity: options.enumerate.granularity,
        cap: options.enumerate.cap,
        counts,
        per_geometry,
        failures: failures.into_values().collect(),
    })
}

/// [`check_workload`] of `workload` on `geometry`, a panic of the engine
/// (or of the harness) turned into a failure of its crash-free run, as a
/// campaign turns one into a failed case.
fn check_guarded(
    geometry: Geometry,
    workload: &Workload,
    engine: &EngineOptions,
    options: &EnumerateOptions,
) -> Result<WorkloadOutcome, ExhaustError> {
    let case = geometry.case(workload, engine);
    let label = || format!("{geometry}: {workload}");
    case.validate().map_err(|error| ExhaustError::Case {
        workload: label(),
        error,
    })?;
    match catch_unwind(AssertUnwindSafe(|| check_workload(case.clone(), options))) {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err((point, error))) => Err(ExhaustError::Enumerate {
            workload: label(),
            point,
            error,
        }),
        Err(p) => {
            let message = crate::campaign::panic_message(p.as_ref());
            Ok(WorkloadOutcome {
                case,
                crash_free: vec![Failure::Panic { message }],
                points: Vec::new(),
            })
        }
    }
}
