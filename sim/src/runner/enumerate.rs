//! Exhaustive crash states: a case run up to its first crash point, then
//! every crash state the simulated disk can build there (instead of the
//! one the crash stream samples) reopened, checked and read whole against
//! the model, exactly as the runner checks its sampled state.
//!
//! Where in the crash group the power goes is [`CrashAt`]: at the time the
//! crash stream draws (as the runner crashes), or just after the group's
//! n-th device flush was issued. A crash group of only the crash has
//! nothing to run: its crash point is the end of the group before it.
//!
//! The model cannot be copied, so each state gets a fresh run of the same
//! prefix; a run is a pure function of its case, and the prefix's trace
//! hash is compared with the first one's to prove the states belong to
//! the same crash point. After its state is checked, each run ends as a
//! crash-free run does (a last whole-disk read, a clean close, a check),
//! without the groups that follow the crash.

use std::rc::Rc;

use serde::Serialize;

use super::{AloneUntil, Failure, Run, RunOptions};
use crate::case::{Case, Op};
use crate::disk::{CrashError, CrashImage, CrashStates};

/// Where in its crash group (the first group with a crash) an enumerated
/// crash point lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashAt {
    /// At the time the crash stream draws, as the runner's crash falls.
    Drawn,
    /// Just after the group issued its n-th device flush on the image's
    /// disk (counting from 1), before that flush completes: every write
    /// since the flush before it is still pending, the most that a crash
    /// between those two flushes can lose. The device flushes are the
    /// persistence points of a block device.
    DeviceFlush(u64),
}

/// Which crash states to enumerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// Each touched sector independently durable or one of the values its
    /// pending writes put there (`SimDisk::crash_states`).
    Sector,
    /// Each pending write landed whole or not at all
    /// (`SimDisk::crash_states_by_write`).
    Write,
    /// `Sector` when all its states fit under the cap, else `Write`.
    Auto,
}

/// What to enumerate.
#[derive(Debug, Clone, Copy)]
pub struct EnumerateOptions {
    pub granularity: Granularity,
    /// Most states checked.
    pub cap: u64,
}

/// One crash state that failed.
#[derive(Debug, Clone, Serialize)]
pub struct StateFailure {
    /// Its place in the enumeration (0: everything durable only).
    pub index: u64,
    pub failures: Vec<Failure>,
}

/// The outcome of an enumeration.
#[derive(Debug, Clone, Serialize)]
pub struct EnumerateReport {
    /// The group whose crash point was enumerated.
    pub group: usize,
    /// The granularity used (never `Auto`).
    pub granularity: Granularity,
    /// Device writes pending at the crash point.
    pub pending_writes: usize,
    /// Sectors some pending write could change.
    pub touched_sectors: usize,
    /// States in all at this granularity (`None` past `u64::MAX`).
    pub total: Option<u64>,
    /// States checked (at most the cap).
    pub checked: u64,
    /// Failures of the run before the crash point; when there are any, no
    /// state is checked.
    pub prefix_failures: Vec<Failure>,
    pub failing: Vec<StateFailure>,
    /// Counts summed over every state's run.
    pub crash_states_checked: u64,
    pub recovered_sectors_checked: u64,
}

impl EnumerateReport {
    pub fn passed(&self) -> bool {
        self.prefix_failures.is_empty() && self.failing.is_empty()
    }

    /// Whether the cap left states out.
    pub fn is_truncated(&self) -> bool {
        self.total.is_none_or(|t| t > self.checked)
    }
}

/// Why a case cannot be enumerated.
#[derive(Debug, thiserror::Error)]
pub enum EnumerateError {
    #[error("the case has no crash point to enumerate")]
    NoCrash,
    /// Enumeration builds the states of one disk; a data file's crash
    /// states would have to be combined with the image's.
    #[error("the case has an external data file: enumerating crash states of two disks is not supported")]
    DataFile,
    /// The cause is in the message and not a `source()` (see
    /// `CaseError`): a chain printer would print it twice.
    #[error("crash states: {0}")]
    Crash(CrashError),
    #[error("the run to the crash point went differently for state {index}: not deterministic")]
    Diverged { index: u64 },
    #[error("group {group} issued {issued} device flushes, so it has no crash point at device flush {wanted}")]
    NoSuchFlush {
        group: usize,
        issued: u64,
        wanted: u64,
    },
}

impl From<CrashError> for EnumerateError {
    fn from(e: CrashError) -> Self {
        EnumerateError::Crash(e)
    }
}

/// Enumerate the crash states of `case`'s first crash point and check
/// each one.
pub fn enumerate_crash_states(
    case: &Case,
    options: &EnumerateOptions,
) -> Result<EnumerateReport, EnumerateError> {
    enumerate_crash_states_at(case, CrashAt::Drawn, options, &mut |_| true)
}

/// Enumerate the crash states of `case`'s first crash point, the power
/// going `at` that place in its group, and check each state that `keep`
/// accepts (it sees every state built, in order; a state it refuses is not
/// run, and `checked` does not count it: how a caller skips states it has
/// already checked).
pub fn enumerate_crash_states_at(
    case: &Case,
    at: CrashAt,
    options: &EnumerateOptions,
    keep: &mut dyn FnMut(&CrashImage) -> bool,
) -> Result<EnumerateReport, EnumerateError> {
    let group = case
        .workload
        .iter()
        .position(|ops| ops.iter().any(|op| matches!(op, Op::Crash)))
        .ok_or(EnumerateError::NoCrash)?;
    if case.image.data_file.is_some() {
        return Err(EnumerateError::DataFile);
    }
    let run_opts = RunOptions::default();
    let mut first = Run::fresh(case, &run_opts, &crate::driver::EngineDriver);
    let reached = first.run_to_crash(group, at)?;
    let mut report = EnumerateReport {
        group,
        granularity: options.granularity,
        pending_writes: 0,
        touched_sectors: 0,
        total: None,
        checked: 0,
        prefix_failures: first.shared.failures.take(),
        failing: Vec::new(),
        crash_states_checked: 0,
        recovered_sectors_checked: 0,
    };
    if !reached || !report.prefix_failures.is_empty() {
        return Ok(report);
    }
    let point = first.disk.crash_point()?;
    report.pending_writes = point.pending().len();
    report.touched_sectors = point.touched_sectors();
    let prefix_hash = first.sim.trace_hash();
    let by_sector = point.clone().states(options.cap);
    let (granularity, states): (Granularity, CrashStates) = match options.granularity {
        Granularity::Sector => (Granularity::Sector, by_sector),
        Granularity::Write => (Granularity::Write, point.states_by_write(options.cap)),
        Granularity::Auto if !by_sector.is_truncated() => (Granularity::Sector, by_sector),
        Granularity::Auto => (Granularity::Write, point.states_by_write(options.cap)),
    };
    report.granularity = granularity;
    report.total = states.total();
    drop(first);
    for (index, image) in (0u64..).zip(states) {
        if !keep(&image) {
            continue;
        }
        let mut run = Run::fresh(case, &run_opts, &crate::driver::EngineDriver);
        run.run_to_crash(group, at)?;
        if run.sim.trace_hash() != prefix_hash {
            return Err(EnumerateError::Diverged { index });
        }
        run.check_state(image);
        report.checked += 1;
        let failures = run.shared.failures.take();
        let m = run.shared.model.borrow().stats();
        report.recovered_sectors_checked += m.recovered_sectors;
        report.crash_states_checked += run.shared.stats.borrow().counts.crash_states_checked;
        if !failures.is_empty() {
            report.failing.push(StateFailure { index, failures });
        }
    }
    Ok(report)
}

impl<'a> Run<'a> {
    /// Set up and run every group before `crash_group` to completion, then
    /// that group up to its crash point (`at`), and stop its tasks. Returns
    /// false when the run failed on the way.
    fn run_to_crash(&mut self, crash_group: usize, at: CrashAt) -> Result<bool, EnumerateError> {
        let mut img = match self.setup() {
            Ok(img) => Rc::new(img),
            Err(f) => {
                self.fail(f);
                return Ok(false);
            }
        };
        let groups = self.case.numbered_groups();
        for (g, ops) in groups.iter().enumerate().take(crash_group) {
            if let Some(&(n, op)) = ops.iter().find(|(_, op)| op.runs_alone()) {
                // It owns the image meanwhile and gives it back at its end.
                match self.run_alone_group(img, g, n, op, AloneUntil::End) {
                    Some((Some(back), _)) => img = Rc::new(back),
                    _ => return Ok(false),
                }
            } else if !self.run_group(&img, g, ops, false) {
                return Ok(false);
            }
        }
        let ops = &groups[crash_group];
        let reached = match ops.iter().find(|(_, op)| op.runs_alone()) {
            Some(&(n, op)) => {
                let until = match at {
                    CrashAt::Drawn => AloneUntil::PowerFails,
                    CrashAt::DeviceFlush(k) => AloneUntil::DeviceFlush(k),
                };
                let before = self.disk.flushes();
                // The image, if the operation ended before the power went,
                // goes with the crash.
                if self
                    .run_alone_group(img, crash_group, n, op, until)
                    .is_none()
                {
                    return Ok(false);
                }
                if let CrashAt::DeviceFlush(k) = at {
                    let issued = self.disk.flushes() - before;
                    if issued < k {
                        return Err(EnumerateError::NoSuchFlush {
                            group: crash_group,
                            issued,
                            wanted: k,
                        });
                    }
                }
                true
            }
            None => match at {
                CrashAt::Drawn => self.run_group(&img, crash_group, ops, true),
                CrashAt::DeviceFlush(n) => self.run_group_to_flush(&img, crash_group, ops, n)?,
            },
        };
        self.sim.abort_all();
        Ok(reached)
    }

    /// Run group `g` until it has issued its `n`-th device flush on the
    /// image's disk. The stop condition is looked at before every poll, so
    /// the run stops right after the poll that issued the flush: the flush
    /// has not completed, and nothing else has been issued since.
    fn run_group_to_flush(
        &mut self,
        img: &Rc<super::Img>,
        g: usize,
        ops: &[(u64, Op)],
        n: u64,
    ) -> Result<bool, EnumerateError> {
        self.group = g;
        for &(id, op) in ops.iter().filter(|(_, op)| !matches!(op, Op::Crash)) {
            self.spawn_op(img, id, op);
        }
        let disk = self.disk.clone();
        let before = disk.flushes();
        let target = before.saturating_add(n);
        match self.sim.run_until(|| disk.flushes() >= target) {
            Ok(_) if disk.flushes() >= target => Ok(true),
            Ok(_) => Err(EnumerateError::NoSuchFlush {
                group: g,
                issued: disk.flushes() - before,
                wanted: n,
            }),
            Err(e) => {
                self.sim.abort_all();
                self.fail(Failure::Hang {
                    group: g,
                    message: e.to_string(),
                });
                Ok(false)
            }
        }
    }

    /// Take `image` as the crash's outcome: reopen, check and read it whole
    /// as `crash` does, then end the run cleanly.
    fn check_state(&mut self, image: CrashImage) {
        self.crashes += 1;
        // A version 2 image cut inside a snapshot operation (or one whose
        // failure left its flags in doubt) is judged and repaired as a
        // campaign's crash there is (`Run::crash`).
        let in_snapshot = self
            .case
            .workload
            .get(self.group)
            .is_some_and(|ops| ops.iter().any(Op::is_snapshot));
        let mut content = image.content;
        if self.v2_snapshot_cut(in_snapshot) {
            match self.repair_v2_snapshot_crash(&content) {
                Ok(c) => content = c,
                Err(f) => return self.fail(f),
            }
        }
        self.shared.model.borrow_mut().crash();
        self.gone.add(std::slice::from_ref(&self.disk));
        self.disk = self.disk.reopen(content);
        match self.recover(&format!("crash-{}", self.crashes)) {
            Ok(img) => self.finish(img),
            Err(f) => self.fail(f),
        }
    }
}
