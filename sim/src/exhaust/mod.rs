//! Bounded exhaustive workloads, as B3 and CrashMonkey do for file systems:
//! every workload of up to three guest operations from a small vocabulary
//! (`vocab`), with a flush after every subset of them, on a few geometries
//! and switch sets;
//! for each, every crash state of every crash point of its last step
//! (`run`), identical states checked once, with the model and the checker
//! as the runner checks a crash; the counts summed (`report`).
//!
//! The space is a list of slices ([`Slice`]): a switch set of the engine, a
//! geometry, a bound on operations. The default run ([`default_slices`])
//! has all switches on, on every geometry, and two more switch sets on the
//! plain 4 KiB geometries (version 3, 16-bit refcounts), up to 3
//! operations, each with one of the seed
//! optimisations that change when things reach the disk turned off:
//! - all on but `delayed_metadata`: L2 and refcount entries are written
//!   back with the write that changed them, not at the next flush; with
//!   delayed metadata the data write has always completed by the
//!   writeback, so an entry linked before its data (the LinkBeforeData
//!   variant's bug) is durable first only without it;
//! - all on but `delayed_cow`: an unaligned allocating write copies its
//!   COW areas with its data (merged into one device write), not at the
//!   next flush: the write path all on never takes.
//!
//! Measured on the 4 KiB geometries, each extra set costs about what all on
//! does there (47 and 49 s of CPU, all on 65 s), a quarter of the whole
//! run's; the 64 KiB geometries cost more than half of it with up to 2
//! operations, so they get all on only.
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

pub use report::{Counts, ExhaustFailure, ExhaustReport, SliceReport, FAILURES_KEPT};
pub use run::{check_workload, Point, PointOutcome, WorkloadOutcome};
pub use vocab::{
    workload_count, workloads, Extent, Geometry, Kind, Step, VocabOp, Workload, DISK_CLUSTERS,
    GROW_AHEAD, MAX_OPS, SEED,
};

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use engine::options::Broken;
use engine::{EngineOptions, Switches};

use crate::case::CaseError;
use crate::runner::{EnumerateError, EnumerateOptions, Failure, Granularity};

/// Most states enumerated per crash point by default.
pub const DEFAULT_CAP: u64 = 64;

/// The switch sets of the default run besides all on, as masks
/// (`Switches::from_mask`), each on the 4 KiB geometries with workloads of
/// up to 3 operations (see the module's doc): all on but
/// `delayed_metadata`, then all on but `delayed_cow`.
pub const EXTRA_SWITCH_SETS: [u8; 2] = [0b11101, 0b01111];

/// One part of the space: every workload of up to `max_ops` operations on
/// `geometry`, with the engine's `switches`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    pub switches: Switches,
    pub geometry: Geometry,
    /// 1 to [`MAX_OPS`].
    pub max_ops: usize,
}

impl Slice {
    /// Its name, as `11101 4k-backing`.
    pub fn name(&self) -> String {
        format!("{:05b} {}", self.switches.mask(), self.geometry)
    }
}

/// Every switch set of `switch_sets` on every geometry of `geometries`, in
/// that order, each with workloads of up to `max_ops` operations (`None`:
/// each geometry's [`Geometry::default_max_ops`]).
pub fn slices(
    switch_sets: &[Switches],
    geometries: &[Geometry],
    max_ops: Option<usize>,
) -> Vec<Slice> {
    switch_sets
        .iter()
        .flat_map(|&switches| {
            geometries.iter().map(move |&geometry| Slice {
                switches,
                geometry,
                max_ops: max_ops.unwrap_or_else(|| geometry.default_max_ops()),
            })
        })
        .collect()
}

/// The slices of the default run: all switches on, on every geometry with
/// its default bound, then each of [`EXTRA_SWITCH_SETS`] on the plain
/// 4 KiB geometries (version 3, 16-bit refcounts), up to [`MAX_OPS`]
/// operations.
pub fn default_slices() -> Vec<Slice> {
    let mut out = slices(&[Switches::ALL_ON], &Geometry::all(), None);
    let small: Vec<Geometry> = Geometry::all()
        .into_iter()
        .filter(|g| g.cluster_size == 4 << 10 && g.is_plain())
        .collect();
    let extra: Vec<Switches> = EXTRA_SWITCH_SETS.map(Switches::from_mask).to_vec();
    out.extend(slices(&extra, &small, Some(MAX_OPS)));
    out
}

/// What to enumerate.
#[derive(Debug, Clone)]
pub struct ExhaustOptions {
    /// The parts of the space, in order (by default [`default_slices`]).
    pub slices: Vec<Slice>,
    /// The operations workloads are built from (by default
    /// [`VocabOp::all`]).
    pub vocabulary: Vec<VocabOp>,
    /// Crash states per crash point: `Granularity::Auto` (sector by sector
    /// when every such state fits under the cap, else write by write) and
    /// the cap.
    pub enumerate: EnumerateOptions,
    /// Worker threads; at least 1.
    pub jobs: usize,
    /// A deliberately broken engine variant to run instead of the correct
    /// engine (tests that prove exhaust catches each).
    pub broken: Option<Broken>,
    /// The engine's crash-rule assertions in debug builds
    /// (`EngineOptions::rule_checks`); those tests turn them off.
    pub rule_checks: bool,
}

impl Default for ExhaustOptions {
    fn default() -> Self {
        ExhaustOptions {
            slices: default_slices(),
            vocabulary: VocabOp::all(),
            enumerate: EnumerateOptions {
                granularity: Granularity::Auto,
                cap: DEFAULT_CAP,
            },
            jobs: 1,
            broken: None,
            rule_checks: true,
        }
    }
}

impl ExhaustOptions {
    /// The engine options a slice's cases get.
    pub fn engine(&self, switches: Switches) -> EngineOptions {
        EngineOptions {
            switches,
            grow_ahead: GROW_AHEAD,
            broken: self.broken,
            rule_checks: self.rule_checks,
            ..EngineOptions::default()
        }
    }

    /// These options with only the slices on `geometries`, each bounded
    /// to at most `max_ops` operations: a part of the same run (every
    /// workload of it is one of the run's, checked the same way).
    pub fn restricted(&self, geometries: &[Geometry], max_ops: usize) -> ExhaustOptions {
        ExhaustOptions {
            slices: self
                .slices
                .iter()
                .filter(|s| geometries.contains(&s.geometry))
                .map(|s| Slice {
                    max_ops: s.max_ops.min(max_ops),
                    ..*s
                })
                .collect(),
            ..self.clone()
        }
    }

    /// How many workloads each slice gets, in order.
    pub fn workloads_per_slice(&self) -> Vec<u64> {
        let v = self.vocabulary.len() as u64;
        self.slices
            .iter()
            .map(|s| workload_count(v, s.max_ops))
            .collect()
    }

    /// How many workloads the options describe.
    pub fn workload_count(&self) -> u64 {
        self.workloads_per_slice().iter().sum()
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
    #[error("no slice (switch set and geometry) to run")]
    NoSlice,
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
    if let Some(s) = options
        .slices
        .iter()
        .find(|s| !(1..=MAX_OPS).contains(&s.max_ops))
    {
        return Err(ExhaustError::Ops(s.max_ops));
    }
    if options.vocabulary.is_empty() {
        return Err(ExhaustError::EmptyVocabulary);
    }
    if options.slices.is_empty() {
        return Err(ExhaustError::NoSlice);
    }
    // Workloads are ordered by number of operations first, so a slice
    // with a lower bound takes a prefix of the longest list.
    let most = options.slices.iter().map(|s| s.max_ops).max();
    let workloads = workloads(&options.vocabulary, most.unwrap_or(MAX_OPS));
    let per_slice_total = options.workloads_per_slice();
    let total: usize = per_slice_total.iter().sum::<u64>() as usize;
    // Item `i` is workload `i - starts[s]` of slice `s`.
    let starts: Vec<usize> = per_slice_total
        .iter()
        .scan(0usize, |acc, &n| {
            let start = *acc;
            *acc += n as usize;
            Some(start)
        })
        .collect();
    let item = |i: usize| {
        let s = starts
            .iter()
            .rposition(|&start| start <= i)
            .expect("starts at 0");
        (s, i - starts[s])
    };
    let engines: Vec<EngineOptions> = options
        .slices
        .iter()
        .map(|s| options.engine(s.switches))
        .collect();
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut per_slice = vec![Counts::default(); options.slices.len()];
    let mut counts = Counts::default();
    // Keyed by (workload ordinal, failure within it), so that the failures
    // kept are the first in workload order whichever worker finished first.
    let mut failures: BTreeMap<(usize, usize), ExhaustFailure> = BTreeMap::new();
    let mut first_error: Option<(usize, ExhaustError)> = None;
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.max(1) {
            let tx = tx.clone();
            let (next, stop, workloads, engines, item) =
                (&next, &stop, &workloads, &engines, &item);
            scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let (s, w) = item(i);
                let geometry = options.slices[s].geometry;
                let workload = &workloads[w];
                let result = check_guarded(geometry, workload, &engines[s], &options.enumerate);
                if tx.send((i, result)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, result) in rx {
            let (s, w) = item(i);
            match result {
                Ok(outcome) => {
                    counts.add(&outcome);
                    per_slice[s].add(&outcome);
                    let workload = workloads[w].to_string();
                    for (k, f) in ExhaustFailure::of(&options.slices[s], &workload, &outcome)
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
        vocabulary: options.vocabulary.iter().map(VocabOp::name).collect(),
        granularity: options.enumerate.granularity,
        cap: options.enumerate.cap,
        counts,
        slices: options
            .slices
            .iter()
            .zip(per_slice)
            .map(|(s, counts)| SliceReport {
                switches: s.switches.mask(),
                geometry: s.geometry.name(),
                max_ops: s.max_ops,
                counts,
            })
            .collect(),
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
