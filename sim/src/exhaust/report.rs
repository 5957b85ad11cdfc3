//! The counts of an exhaust run, summed over its workloads (in all and per
//! slice: switch set and geometry), and the first failures, kept to show
//! and to save as cases.

use serde::Serialize;

use super::run::{Point, WorkloadOutcome};
use super::Slice;
use crate::case::Case;
use crate::runner::{Failure, Granularity};

/// Failures a report keeps in full (the first, in workload order); the
/// rest are counted.
pub const FAILURES_KEPT: usize = 32;

/// Counts summed over workloads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub workloads: u64,
    /// Workloads whose crash-free run failed.
    pub crash_free_failed: u64,
    /// Crash points enumerated: one after every workload's last step, and
    /// one at each device flush that step issued.
    pub crash_points: u64,
    /// Of those, the ones at a device flush.
    pub device_flush_points: u64,
    /// Crash points enumerated sector by sector (the others write by
    /// write: their sector states did not fit under the cap).
    pub by_sector_points: u64,
    /// Crash points with more states than the cap: not exhaustive.
    pub capped_points: u64,
    /// Crash states built.
    pub built: u64,
    /// Crash states skipped: an earlier state of the same crash point had
    /// the same image content.
    pub duplicates: u64,
    /// Crash states reopened, checked and read against the model.
    pub checked: u64,
    /// Crash states that failed.
    pub failed: u64,
    /// Crash points with a failing state, or whose run failed before the
    /// crash.
    pub failed_points: u64,
    /// Workloads with any failure.
    pub failed_workloads: u64,
}

impl Counts {
    pub fn add(&mut self, o: &WorkloadOutcome) {
        self.workloads += 1;
        self.crash_free_failed += u64::from(!o.crash_free.is_empty());
        let mut failed = !o.crash_free.is_empty();
        for p in &o.points {
            self.crash_points += 1;
            self.device_flush_points += u64::from(matches!(p.point, Point::DeviceFlush(_)));
            self.by_sector_points += u64::from(p.granularity == Granularity::Sector);
            self.capped_points += u64::from(p.capped);
            self.built += p.built;
            self.duplicates += p.duplicates;
            self.checked += p.checked;
            self.failed += p.failing.len() as u64;
            let point_failed = !p.failing.is_empty() || !p.prefix_failures.is_empty();
            self.failed_points += u64::from(point_failed);
            failed |= point_failed;
        }
        self.failed_workloads += u64::from(failed);
    }
}

/// One failure of a workload: of its crash-free run, or of a crash point.
#[derive(Debug, Clone, Serialize)]
pub struct ExhaustFailure {
    /// The engine's switches, as a 5-bit mask.
    pub switches: u8,
    pub geometry: String,
    pub workload: String,
    /// The crash point; `None` for the crash-free run.
    pub point: Option<Point>,
    /// Failing crash states of the crash point.
    pub failing_states: u64,
    /// The first failing state's place in the enumeration, when a state
    /// failed (not the run before the crash).
    pub first_state: Option<u64>,
    /// What failed: the first failing state's failures, or the run's.
    pub failures: Vec<Failure>,
    /// The workload as an ordinary case, with its crash at `point`: `qcsim
    /// enumerate --case` checks every state of that crash point again
    /// (with `--at-flush N` for a device flush), `qcsim replay` runs it
    /// with one crash state drawn from its seed.
    pub case: Case,
}

impl ExhaustFailure {
    /// The failures of `o`, in order: its crash-free run, then its crash
    /// points.
    pub fn of(slice: &Slice, workload: &str, o: &WorkloadOutcome) -> Vec<ExhaustFailure> {
        let (switches, geometry) = (slice.switches.mask(), slice.geometry.name());
        let mut out = Vec::new();
        if !o.crash_free.is_empty() {
            out.push(ExhaustFailure {
                switches,
                geometry: geometry.clone(),
                workload: workload.to_string(),
                point: None,
                failing_states: 0,
                first_state: None,
                failures: o.crash_free.clone(),
                case: o.case.clone(),
            });
        }
        for p in &o.points {
            let failures = match (p.prefix_failures.is_empty(), p.failing.first()) {
                (false, _) => p.prefix_failures.clone(),
                (true, Some(s)) => s.failures.clone(),
                (true, None) => continue,
            };
            out.push(ExhaustFailure {
                switches,
                geometry: geometry.clone(),
                workload: workload.to_string(),
                point: Some(p.point),
                failing_states: p.failing.len() as u64,
                first_state: p.failing.first().map(|s| s.index),
                failures,
                case: p.point.case(&o.case),
            });
        }
        out
    }
}

/// One slice of a run and its counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SliceReport {
    /// The engine's switches, as a 5-bit mask.
    pub switches: u8,
    pub geometry: String,
    /// Most operations per workload.
    pub max_ops: usize,
    pub counts: Counts,
}

/// The outcome of an exhaust run.
#[derive(Debug, Clone, Serialize)]
pub struct ExhaustReport {
    pub vocabulary: Vec<String>,
    pub granularity: Granularity,
    /// Most states per crash point.
    pub cap: u64,
    /// Summed over every slice.
    pub counts: Counts,
    /// Each slice (switch set and geometry) with its counts, in the order
    /// of the options.
    pub slices: Vec<SliceReport>,
    /// The first [`FAILURES_KEPT`] failures, in workload order.
    pub failures: Vec<ExhaustFailure>,
}

impl ExhaustReport {
    pub fn passed(&self) -> bool {
        self.counts.failed_workloads == 0
    }
}
