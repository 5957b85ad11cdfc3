//! The runner: one case, run over the simulated disk under the
//! deterministic executor. The reference model checks every guest read and
//! the whole disk after every crash; the checker judges the image after
//! every crash and at the end. A run is a pure function of its case.
//!
//! The steps, per case:
//! 1. `setup`: the backing file (raw or qcow2) on its own quiet disk, the
//!    image created on the case's disk with faults off (and its external
//!    data file, if the case has one, on a second disk with the same
//!    options), then opened;
//! 2. each concurrency group: its operations spawned as tasks; without a
//!    crash the group runs to completion, with one it runs until a crash
//!    time drawn from the crash stream, then `crash` takes a crash image
//!    (of both disks at once, with a data file), reopens it through the
//!    engine (which repairs a dirty image), checks
//!    it and reads it whole against the model;
//! 3. `finish`: a last whole-disk read, a clean close, and a check that
//!    finds neither corruption nor leak.
//!
//! This file holds the loop (`Run::go`, a group at a time) and the entry
//! points; the rest lives by what it does, each importing only from
//! modules below it: `state` the run's state (the `Run` itself, its
//! options, its constructor and report), `ops` spawns the operations,
//! `faults` decides which errors an injected fault excuses, `recovery` is
//! a crash and the reopen after it (and `finish`), `judge` the checker's
//! verdict on an image, `explain` what a wrong read shows, `sweep` the
//! whole-disk reads, `setup` the image and its disks, `snapshots` the
//! snapshots a run knows, `enumerate` every crash state of one crash
//! point. The executor's budgets are the case's (`crate::budget`).

mod armed;
mod enumerate;
mod explain;
pub mod faults;
mod judge;
mod open_crash;
mod ops;
mod recovery;
mod repair_crash;
mod report;
mod setup;
pub mod snapshots;
pub mod state;
mod step_watch;
mod sweep;
pub mod values;

pub use crate::case::WHOLE_SWEEP_MAX;
pub use enumerate::{
    enumerate_crash_states, enumerate_crash_states_at, CrashAt, EnumerateError, EnumerateOptions,
    EnumerateReport, Granularity, StateFailure,
};
pub use report::{
    cow_summary, to_hex, AllowedValue, CrashPointsByVersion, ExcusedErrors, Failure, RunCounts,
    RunReport, RunStats, WrongSector,
};
pub use sweep::mapped_clusters;

pub use explain::{wrong_sector, NO_WRITES_LOGGED};
pub use judge::SAME_DUMP;
use state::*;

pub use state::{RunOptions, DATA_CRASH_STREAM};

/// Run one case.
pub fn run_case(case: &Case, opts: &RunOptions) -> RunReport {
    run_case_with_progress(case, opts, &mut |_, _| {})
}

/// Run one case, calling `progress(done, groups)` as its concurrency
/// groups finish (for a progress bar over a long case); the run is the
/// same as [`run_case`]'s.
pub fn run_case_with_progress(
    case: &Case,
    opts: &RunOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> RunReport {
    run_case_measured(case, opts, progress).0
}

/// What a run holds in memory at its end, in units that do not depend on
/// the allocator: what grows with the sectors written, and must not grow
/// with the virtual size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Chunks ([`crate::disk::CHUNK`] bytes) the image disk's volatile
    /// store holds.
    pub image_chunks: u64,
    /// Chunks its durable store holds.
    pub durable_chunks: u64,
    /// Sector records the reference model holds (`Model::records`).
    pub model_records: u64,
    /// Sectors the model knows of (`Model::recorded_sectors`).
    pub model_sectors: u64,
}

/// [`run_case_with_progress`], with the run's [`Footprint`] at its end.
pub fn run_case_measured(
    case: &Case,
    opts: &RunOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> (RunReport, Footprint) {
    run_case_on(case, opts, &EngineDriver, progress)
}

/// [`run_case_measured`] with `driver` in place of qcsim's engine: the
/// same workload, schedule, disks, crashes, model and checker, with the
/// engine's own counters and guard counts at zero unless the driver
/// reports them (`crate::driver`).
pub fn run_case_on(
    case: &Case,
    opts: &RunOptions,
    driver: &dyn DriverKind,
    progress: &mut dyn FnMut(usize, usize),
) -> (RunReport, Footprint) {
    let mut run = Run::fresh(case, opts, driver);
    let skipped = driver.refuses(&case.image);
    if skipped.is_none() {
        run.go(progress);
    }
    let chunks = |s: SparseStore| s.allocated() / crate::disk::CHUNK;
    let footprint = Footprint {
        image_chunks: chunks(run.disk.volatile()),
        durable_chunks: chunks(run.disk.durable()),
        model_records: run.shared.model.borrow().records() as u64,
        model_sectors: run.shared.model.borrow().recorded_sectors().len() as u64,
    };
    let mut report = run.report();
    report.skipped = skipped;
    (report, footprint)
}

/// [`run_case`], with the device flushes each group issued on the image's
/// disk (as many entries as groups ran to their end): the crash points
/// [`CrashAt::DeviceFlush`] can name in each group.
pub fn run_case_counting_flushes(case: &Case) -> (RunReport, Vec<u64>) {
    let opts = RunOptions::default();
    let mut run = Run::fresh(case, &opts, &EngineDriver);
    run.go(&mut |_, _| {});
    let flushes = std::mem::take(&mut run.group_flushes);
    (run.report(), flushes)
}

impl<'a> Run<'a> {
    /// Spawn group `g`'s operations and run them: to completion, or (with
    /// `crash`) until a crash time drawn from the crash stream. Returns
    /// false, with a recorded hang, if the executor could not go on.
    fn run_group(&mut self, img: &Rc<Img>, g: usize, ops: &[(u64, Op)], crash: bool) -> bool {
        self.run_group_armed(img, g, ops, crash, false) != GroupEnd::Hung
    }

    /// `run_group`, and with `armed` (in a group with no crash of its
    /// own) the power goes at the first device flush after an armed
    /// guard's condition arises (`CrashOptions::at_guards`).
    fn run_group_armed(
        &mut self,
        img: &Rc<Img>,
        g: usize,
        ops: &[(u64, Op)],
        crash: bool,
        armed: bool,
    ) -> GroupEnd {
        self.group = g;
        self.background.retain(|h| !h.is_finished());
        let mut fg = Vec::new();
        let mut starts = Vec::new();
        let end = self.shared.sectors.get();
        let cs = self.case.image.create.cluster_size / SECTOR_SIZE as u64;
        for &(n, op) in ops.iter().filter(|(_, op)| !matches!(op, Op::Crash)) {
            // Past the end a resize left, the guest has no disk to ask:
            // not sent; nor a compressed write of a partial cluster that
            // is no longer the disk's last.
            let past = match op {
                Op::WriteCompressed { sector, sectors } => {
                    sector + sectors > end || (sectors < cs && sector + sectors != end)
                }
                _ => op.range().is_some_and(|(s, k)| s + k > end),
            };
            if past {
                self.shared.stats.borrow_mut().counts.ops_past_end += 1;
                continue;
            }
            // What the driver under test does not do is not sent: the
            // model never hears of it (`DriverKind::does`).
            if !self.driver.does(&op) {
                self.shared.stats.borrow_mut().counts.driver_skipped(&op);
                continue;
            }
            if let Op::BackgroundRead { hold, .. } = op {
                // The group waits for it to start (its first poll issues
                // the read), not to end.
                let started = Rc::new(Cell::new(false));
                let h = self.spawn_op_marked(img, n, op, Some(started.clone()));
                starts.push(started);
                if hold > 1 {
                    for d in self.crashing_disks() {
                        d.hold_task(h.id(), hold);
                    }
                }
                self.background.push(h);
            } else {
                fg.push(self.spawn_op(img, n, op));
            }
        }
        let fg = Foreground { tasks: fg, starts };
        let ran = if crash {
            self.run_until_power_fails()
        } else if armed && (!self.armed.is_empty() || self.step_watch.is_some()) {
            match self.run_armed(img, &fg) {
                Ok(Some(stop)) => {
                    self.armed_crash(stop);
                    return GroupEnd::ArmedCrash;
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            self.run_foreground(&fg)
        };
        if let Err(e) = ran {
            self.sim.abort_all();
            self.fail(Failure::Hang {
                group: g,
                message: e.to_string(),
            });
            return GroupEnd::Hung;
        }
        GroupEnd::Ran
    }

    /// Run the spawned group until the power goes: a time drawn from the
    /// crash stream, or (`CrashOptions::at_flush_ppm`) one of its flushes.
    fn run_until_power_fails(&mut self) -> Result<(), ExecError> {
        let horizon = self.crash_rng.gen_range(0..=CRASH_HORIZON_NS);
        // Drawn only when the case asks for crashes at flushes, so
        // cases saved before keep their crash stream.
        let at_flush = self.case.disk.crash.at_flush_ppm;
        if at_flush > 0 && self.crash_rng.gen_range(0..PPM) < at_flush {
            // Each flush the group issues takes the power with it with
            // chance 1/n: n = 1 crashes at the first, larger n reach
            // the later steps of a writeback.
            let n = self.crash_rng.gen_range(1..=AT_FLUSH_MAX);
            let disks = self.crashing_disks();
            let mut seen = flushes_on(&disks);
            let rng = &mut self.crash_rng;
            let end = self.sim.run_until(|| {
                let now = flushes_on(&disks);
                while seen < now {
                    seen += 1;
                    if rng.gen_ratio(1, n) {
                        return true;
                    }
                }
                false
            });
            self.at_flush = matches!(end, Ok(RunEnd::Stopped));
            if self.at_flush {
                self.shared.stats.borrow_mut().counts.crashes_at_flush += 1;
            }
            end.map(|_| ())
        } else {
            self.sim
                .run_until_time(self.sim.now() + horizon)
                .map(|_| ())
        }
    }

    /// Run the group whose tasks are `fg` to its end: every task, or with
    /// background reads in flight (which later groups do not wait for),
    /// the group's own.
    fn run_foreground(&self, fg: &Foreground) -> Result<(), ExecError> {
        if self.background.iter().all(|h| h.is_finished()) {
            return self.sim.run();
        }
        self.sim.run_until(|| fg.done()).map(|_| ())
    }

    fn fail(&self, f: Failure) {
        self.shared.failures.borrow_mut().push(f);
    }

    fn go(&mut self, progress: &mut dyn FnMut(usize, usize)) {
        let img = match self.setup() {
            Ok(img) => img,
            Err(f) => return self.fail(f),
        };
        let mut img = Some(Rc::new(img));
        self.epoch_start = self.disk_counters();
        let groups = self.case.numbered_groups();
        for (g, ops) in groups.iter().enumerate() {
            progress(g, groups.len());
            let live = img.take().expect("an open image between groups");
            if let Some(w) = &mut self.step_watch {
                // An amend may have changed the image's version.
                w.set_v2(self.shared.v2.get());
            }
            let crash = ops.iter().any(|(_, op)| matches!(op, Op::Crash));
            let flushes_before = self.disk.flushes();
            // Taken before a snapshot operation takes the image away.
            let probe = live.step_probe();
            // The image after the group (None if a crash cut a snapshot
            // operation short and it went with it), and whether the power
            // goes now.
            // One the driver does not do is skipped as the group's other
            // operations are (`run_group_armed`).
            let alone = ops
                .iter()
                .find(|(_, op)| op.runs_alone() && self.driver.does(op));
            let (live, crashed) = if let Some(&(n, op)) = alone {
                let until = if crash {
                    AloneUntil::PowerFails
                } else {
                    AloneUntil::Armed
                };
                let Some((back, went)) = self.run_alone_group(live, g, n, op, until) else {
                    return;
                };
                (back.map(Rc::new), crash || went)
            } else {
                let end = self.run_group_armed(&live, g, ops, crash, !crash);
                if end == GroupEnd::Hung {
                    return;
                }
                (Some(live), crash || end == GroupEnd::ArmedCrash)
            };
            self.group_flushes
                .push(self.disk.flushes() - flushes_before);
            if !crashed {
                img = Some(live.expect("a group run to its end gives the image back"));
                continue;
            }
            // Read before the abort drops the operation and its scope.
            let now = probe.and_then(|p| p.get());
            self.crashed_in = match self.step_crash.take() {
                Some(c) => Some(c.counted(now)),
                None => now,
            };
            if let Some((op, step)) = self.crashed_in {
                let v2 = self.shared.v2.get();
                self.shared
                    .stats
                    .borrow_mut()
                    .crash_points
                    .bump(v2, op, step);
            }
            self.sim.abort_all();
            self.background.clear();
            if let Some(live) = live {
                self.shared.stats.borrow_mut().add_epoch(&live.counters());
            }
            match self.crash() {
                Ok(next) => {
                    self.epoch_start = self.disk_counters();
                    img = Some(next)
                }
                Err(f) => return self.fail(f),
            }
        }
        progress(groups.len(), groups.len());
        if let Some(img) = img {
            // The workload ends when its background reads do.
            if let Err(e) = self.sim.run() {
                self.sim.abort_all();
                return self.fail(Failure::Hang {
                    group: groups.len(),
                    message: e.to_string(),
                });
            }
            self.finish(img);
            self.judge_overlaps("at the end");
        }
    }

    /// Drive one future (one engine request, `what`) to completion on the
    /// simulation. The executor's budgets follow from the case
    /// (`exec_options`), so running out of them, or a hang, is the
    /// engine's fault: a failure of the run, never a panic of the harness.
    pub fn block<T: 'static>(
        &self,
        what: &str,
        f: impl std::future::Future<Output = T> + 'static,
    ) -> Result<T, Failure> {
        self.sim.block_on(f).map_err(|e: ExecError| {
            self.sim.abort_all();
            Failure::Hang {
                group: self.group,
                message: format!("{what}: {e}"),
            }
        })
    }
}
