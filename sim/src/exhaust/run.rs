//! Checking one workload: its crash-free run, then every crash state of
//! each crash point of its last step, identical states checked once.
//!
//! The crash points of a workload's last step are:
//! - just after each device flush the step issued, before it completes
//!   ([`CrashAt::DeviceFlush`]): the persistence points of a block device,
//!   each the moment when the most writes since the flush before it are
//!   pending (a crash any earlier in between can keep only fewer of them);
//! - after the step has completed (the case with a group of only a crash
//!   after it), where whatever the step wrote since the last device flush
//!   is pending.
//!
//! The crash points of the earlier steps are those of the workload's
//! prefixes, which are workloads of the set themselves (see
//! [`super::vocab::workloads`]) and are checked there, once: a crash point
//! depends only on the steps up to it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::case::{Case, Op};
use crate::disk::{CrashImage, SparseStore};
use crate::runner::{
    enumerate_crash_states_at, run_case_counting_flushes, CrashAt, EnumerateError,
    EnumerateOptions, Failure, Granularity, StateFailure,
};

/// Where a crash point of a workload's last step lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Point {
    /// Just after the step's n-th device flush was issued (from 1).
    DeviceFlush(u64),
    /// Once the step has completed.
    AfterStep,
}

impl Point {
    /// The case whose first crash point this is: `case` (the workload,
    /// without a crash) with the crash in its last group, or in a group of
    /// its own after it.
    pub fn case(&self, case: &Case) -> Case {
        let mut c = case.clone();
        match self {
            Point::DeviceFlush(_) => c
                .workload
                .last_mut()
                .expect("a workload has a step")
                .push(Op::Crash),
            Point::AfterStep => c.workload.push(vec![Op::Crash]),
        }
        c
    }

    /// Where the enumeration puts the crash in the case's crash group.
    pub fn crash_at(&self) -> CrashAt {
        match *self {
            Point::DeviceFlush(n) => CrashAt::DeviceFlush(n),
            // The crash group has nothing to run: the drawn time is its
            // start, the end of the step before it.
            Point::AfterStep => CrashAt::Drawn,
        }
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Point::DeviceFlush(n) => write!(f, "at device flush {n} of the last step"),
            Point::AfterStep => f.write_str("after the last step"),
        }
    }
}

/// What one crash point's enumeration found.
#[derive(Debug, Clone)]
pub struct PointOutcome {
    pub point: Point,
    /// The granularity used (never `Auto`).
    pub granularity: Granularity,
    /// Whether the cap left states out.
    pub capped: bool,
    /// States built (every one the enumeration produced, up to the cap).
    pub built: u64,
    /// States skipped because an earlier state of the same crash point had
    /// the same image content.
    pub duplicates: u64,
    /// States reopened and checked.
    pub checked: u64,
    /// Failures of the run before the crash point (no state is checked).
    pub prefix_failures: Vec<Failure>,
    pub failing: Vec<StateFailure>,
}

/// What one workload's check found.
#[derive(Debug, Clone)]
pub struct WorkloadOutcome {
    /// The workload as a case, without a crash.
    pub case: Case,
    /// Failures of its crash-free run.
    pub crash_free: Vec<Failure>,
    pub points: Vec<PointOutcome>,
}

/// Crash images already checked at one crash point, by content.
#[derive(Default)]
struct Seen {
    by_hash: BTreeMap<u64, Vec<SparseStore>>,
    built: u64,
    duplicates: u64,
}

impl Seen {
    /// Whether `image` is new here (and now seen).
    fn keep(&mut self, image: &CrashImage) -> bool {
        self.built += 1;
        // The run after a crash is a function of the image's content (the
        // model and the simulation stand where the crash point left them,
        // the same for every state of it), so an image equal to one
        // already checked would be checked the same way again.
        let same = self
            .by_hash
            .entry(image.content.content_hash())
            .or_default();
        if same.contains(&image.content) {
            self.duplicates += 1;
            false
        } else {
            same.push(image.content.clone());
            true
        }
    }
}

/// Check `case` (a valid workload without a crash): its crash-free run,
/// as the runner runs it, then every crash point of its last step. An
/// error names the crash point the enumeration could not do.
pub fn check_workload(
    case: Case,
    options: &EnumerateOptions,
) -> Result<WorkloadOutcome, (Point, EnumerateError)> {
    let (report, flushes) = run_case_counting_flushes(&case);
    // A run that failed before its last step ended counted no flushes
    // there: its crash point after the step is still enumerated (and
    // fails before the crash), but no device flush of the step is named.
    let last = match flushes.len() == case.workload.len() {
        true => flushes.last().copied().unwrap_or(0),
        false => 0,
    };
    let mut outcome = WorkloadOutcome {
        crash_free: report.failures,
        points: Vec::new(),
        case,
    };
    let points = (1..=last).map(Point::DeviceFlush).chain([Point::AfterStep]);
    for point in points {
        let crash_case = point.case(&outcome.case);
        let mut seen = Seen::default();
        let r = enumerate_crash_states_at(&crash_case, point.crash_at(), options, &mut |image| {
            seen.keep(image)
        })
        .map_err(|e| (point, e))?;
        outcome.points.push(PointOutcome {
            point,
            granularity: r.granularity,
            capped: r.prefix_failures.is_empty() && r.is_truncated(),
            built: seen.built,
            duplicates: seen.duplicates,
            checked: r.checked,
            prefix_failures: r.prefix_failures,
            failing: r.failing,
        });
    }
    Ok(outcome)
}
