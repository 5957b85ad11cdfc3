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
//! This file holds the loop (`Run::go`, a group at a time) and the run's
//! state; the rest lives by what it does: `ops` spawns the operations,
//! `faults` decides which errors an injected fault excuses, `recovery`
//! is a crash and the reopen after it (and `finish`), `judge` the
//! checker's verdict on an image, `explain` what a wrong read shows,
//! `budget` the executor's bounds, `sweep` the whole-disk reads, `setup`
//! the image and its disks, `snapshots` the snapshots a run knows,
//! `enumerate` every crash state of one crash point.

mod budget;
mod enumerate;
mod explain;
mod faults;
mod judge;
mod ops;
mod recovery;
mod report;
mod setup;
mod snapshots;
mod sweep;

pub use enumerate::{
    enumerate_crash_states, enumerate_crash_states_at, CrashAt, EnumerateError, EnumerateOptions,
    EnumerateReport, Granularity, StateFailure,
};
pub use report::{
    cow_summary, to_hex, AllowedValue, ExcusedErrors, Failure, RunReport, RunStats, WrongSector,
};
pub use sweep::{mapped_clusters, WHOLE_SWEEP_MAX};

pub use budget::exec_options;
pub(crate) use budget::{time_budget, worst_request};
use explain::*;
pub use explain::{wrong_sector, NO_WRITES_LOGGED};
use faults::*;
pub use judge::SAME_DUMP;
use judge::*;

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use engine::dev::IoOp;
use engine::Guard;

use crate::driver::{Driver, DriverKind, EngineDriver};
use oracle::check::FindingKind;
use oracle::data::{decode, fill_compressible_buffer, write_buffer, WriteId, SECTOR_SIZE};
use oracle::model::{Model, OpId, SectorRange, Status, Value, Violation, WriteKind};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::case::{Case, Op, MAX_REQUEST_BYTES};
use crate::disk::{
    DiskCounters, FaultCounts, HeldRequest, NthRequest, SimDisk, SparseStore, AT_FLUSH_MAX, PPM,
};
use crate::exec::{ExecError, ExecOptions, JoinHandle, Nanos, RunEnd, Sim};
use crate::rng::{self, Stream};
use snapshots::{Presence, Snapshots};

/// What a run does besides running.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Write every post-crash image and the final image, with the
    /// checker's and the model's verdicts, under `DIR/seed-N/`.
    pub export: Option<PathBuf>,
}

/// Crash states beyond the one a run goes on from that a crash at a flush
/// has the checker judge (`Run::judge_more_states`).
const EXTRA_STATES_AT_FLUSH: u32 = 3;
/// At a crash at a flush with at most this many pending writes, the extra
/// states are all 2^n whole-write states instead.
const EXHAUSTIVE_PENDING_AT_FLUSH: usize = 4;

/// Longest simulated time a crash group runs before the power goes.
const CRASH_HORIZON_NS: u64 = 3_000_000;

/// The image under test, behind the driver interface (`crate::driver`).
type Img = Box<dyn Driver>;

/// State shared by the op tasks of a run.
struct Shared {
    model: RefCell<Model>,
    failures: RefCell<Vec<Failure>>,
    stats: RefCell<RunStats>,
    /// The internal snapshots the workload took.
    snapshots: RefCell<Snapshots>,
}

/// What a snapshot operation will do, decided by the runner before it
/// hands the image to the operation's task.
enum SnapshotPlan {
    /// Take the snapshot at this index of the run's list.
    Create(usize),
    /// Revert to the snapshot at this index: each sector in `values` gets
    /// its value back (the others keep theirs, unwritten in both).
    Apply {
        snapshot: usize,
        values: Vec<(u64, Value)>,
    },
    Delete(usize),
    /// No snapshot surely exists to apply or delete.
    Skip,
}

struct Run<'a> {
    case: &'a Case,
    opts: &'a RunOptions,
    /// The driver under test.
    driver: &'a dyn DriverKind,
    sim: Sim,
    /// The group running (0 during setup, the last one at the end): where
    /// a hang or livelock is reported.
    group: usize,
    shared: Rc<Shared>,
    disk: SimDisk,
    /// The external data file's disk, when the case has one: faults,
    /// reordering and crashes apply to it as to `disk`.
    data: Option<SimDisk>,
    backing: Option<setup::BackingDisk>,
    crash_rng: ChaCha8Rng,
    /// Crash states of the data file's disk: a stream of its own, so that
    /// the image disk's crash states are drawn as without a data file.
    data_crash_rng: ChaCha8Rng,
    crashes: u32,
    /// What the disks replaced at a crash injected and held.
    gone: GoneDisks,
    /// The image's disk as it was when the power went, until the crash
    /// state is judged: a failed check shows the metadata dump's diff.
    before_crash: Option<SimDisk>,
    /// The data file's disk as it was when the power went, until the
    /// crash's wrong reads are described: its log holds the writes made
    /// before the crash, which the new disk's log does not.
    data_before_crash: Option<SimDisk>,
    /// The image as the last crash's check judged it (`None` before any
    /// crash): the clusters it leaked, counting those past its end that a
    /// refcount still claims, are the only leaks a crash-free epoch may
    /// end with. Kept as the image (its chunks shared, so cheap) and
    /// checked again only when the final check finds a leak at all, which
    /// few runs do: a checker pass after every crash was a few per cent of
    /// a campaign's time.
    last_crash_image: Option<SparseStore>,
    /// The disk's counts when the current epoch's guest requests began.
    epoch_start: DiskCounters,
    /// The device flushes each group ran so far issued on the image's disk:
    /// where `CrashAt::DeviceFlush` can put a crash.
    group_flushes: Vec<u64>,
    /// The crash about to be taken came the moment a flush reached the
    /// disk (`CrashOptions::at_flush_ppm`, or a guard's).
    at_flush: bool,
    /// The case's armed guards that have not yet taken the power with
    /// them (`CrashOptions::at_guards`).
    armed: Vec<Guard>,
    /// Background reads of earlier groups, perhaps still in flight.
    background: Vec<JoinHandle<()>>,
    /// Draws whether an armed guard's condition takes the power with it.
    guard_rng: ChaCha8Rng,
    /// The sweeps' read buffer, handed back after each read
    /// (`Run::read_all`, `Run::give_back`): a fresh zeroed megabyte per
    /// read was a twentieth of a campaign's time.
    spare: RefCell<Vec<u8>>,
}

/// How a group's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupEnd {
    /// Its operations ran (to completion, or to its own crash).
    Ran,
    /// An armed guard's condition arose and the power went at the next
    /// device flush, in a group with no crash of its own.
    GuardCrash,
    /// The executor could not go on (a hang, recorded).
    Hung,
}

/// When a snapshot group stops (`Run::run_snapshot_group`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SnapshotUntil {
    /// At the operation's end.
    End,
    /// When the power goes: a time drawn from the crash stream, as any
    /// crash group's.
    PowerFails,
    /// Right after the group issued its n-th device flush on the image's
    /// disk, counting from 1 (`CrashAt::DeviceFlush`); at its end if it
    /// issued fewer.
    DeviceFlush(u64),
}

/// Flushes issued on `disks` so far, together.
fn flushes_on(disks: &[SimDisk]) -> u64 {
    disks.iter().map(SimDisk::flushes).sum()
}

/// What a group waits for: its operations but background reads, and the
/// start of those.
struct Foreground {
    tasks: Vec<JoinHandle<()>>,
    starts: Vec<Rc<Cell<bool>>>,
}

impl Foreground {
    fn done(&self) -> bool {
        self.tasks.iter().all(|h| h.is_finished()) && self.starts.iter().all(|s| s.get())
    }
}

/// The crash substream of the data file's disk (the image disk's is 0);
/// `--driver qemu` draws its data file's crash states from it too.
pub const DATA_CRASH_STREAM: u32 = 1;
/// The substream of the crash stream that draws crashes at armed guards.
const GUARD_CRASH_STREAM: u32 = 2;

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
    run.go(progress);
    let chunks = |s: SparseStore| s.allocated() / crate::disk::CHUNK;
    let footprint = Footprint {
        image_chunks: chunks(run.disk.volatile()),
        durable_chunks: chunks(run.disk.durable()),
        model_records: run.shared.model.borrow().records() as u64,
        model_sectors: run.shared.model.borrow().recorded_sectors().len() as u64,
    };
    (run.report(), footprint)
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

impl Run<'_> {
    /// The report of a run that has ended.
    fn report(&self) -> RunReport {
        let case = self.case;
        let trace_hash = self.sim.trace_hash();
        let mut stats = *self.shared.stats.borrow();
        let m = self.shared.model.borrow().stats();
        stats.read_sectors_checked = m.read_sectors;
        stats.recovered_sectors_checked = m.recovered_sectors;
        stats.crashes = m.crashes;
        let mut all = self.gone.clone();
        all.add(&self.crashing_disks());
        if let Some(b) = &self.backing {
            all.held.extend(b.disk().held_list());
            all.failed.extend(b.disk().failed_by_rank());
        }
        stats.faults_injected = all.faults();
        stats.fault_kinds = all.fault_kinds;
        stats.held_requests = all.held.len() as u64;
        stats.polls = self.sim.steps();
        let mut failures = self.shared.failures.take();
        if case.harsh() {
            // Lost, misdirected or torn writes are beyond what qcow2 can
            // survive without checksums: only a panic or a hang is a failure;
            // what the model and the checker saw is counted, not judged.
            let before = failures.len();
            failures.retain(|f| matches!(f, Failure::Hang { .. } | Failure::Panic { .. }));
            stats.harsh_findings = (before - failures.len()) as u64;
        }
        RunReport {
            seed: case.seed,
            profile: case.profile,
            schedule: case.schedule,
            failures,
            trace_hash,
            stats,
            held: all.held,
            failed: all.failed,
        }
    }
}

impl<'a> Run<'a> {
    /// A run of `case`, not yet started.
    fn fresh(case: &'a Case, opts: &'a RunOptions, driver: &'a dyn DriverKind) -> Run<'a> {
        // The case's schedule policy (uniform for a case saved before
        // cases recorded one, as `Sim::new`), and budgets that no run that
        // stays within them can observe.
        let sim = Sim::with_options(case.seed, exec_options(case));
        let shared = Rc::new(Shared {
            model: RefCell::new(case.model()),
            failures: RefCell::new(Vec::new()),
            stats: RefCell::new(RunStats::default()),
            snapshots: RefCell::new(Snapshots::default()),
        });
        Run {
            case,
            opts,
            driver,
            disk: SimDisk::new(&sim, setup::quiet_disk()).expect("quiet disk options are valid"),
            sim,
            group: 0,
            shared,
            data: None,
            backing: None,
            crash_rng: rng::stream(case.seed, Stream::Crash),
            data_crash_rng: rng::substream(case.seed, Stream::Crash, DATA_CRASH_STREAM),
            crashes: 0,
            gone: GoneDisks::default(),
            before_crash: None,
            data_before_crash: None,
            last_crash_image: None,
            epoch_start: DiskCounters::default(),
            group_flushes: Vec::new(),
            at_flush: false,
            armed: case.disk.crash.at_guards.clone(),
            background: Vec::new(),
            guard_rng: rng::substream(case.seed, Stream::Crash, GUARD_CRASH_STREAM),
            spare: RefCell::new(Vec::new()),
        }
    }

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
        for &(n, op) in ops.iter().filter(|(_, op)| !matches!(op, Op::Crash)) {
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
        } else if armed && !self.armed.is_empty() {
            match self.run_to_guard(img, &fg) {
                Ok(Some(guard)) => {
                    self.armed.retain(|&a| a != guard);
                    self.at_flush = true;
                    let mut stats = self.shared.stats.borrow_mut();
                    stats.crashes_at_flush += 1;
                    stats.crashes_at_guard += 1;
                    return GroupEnd::GuardCrash;
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
                self.shared.stats.borrow_mut().crashes_at_flush += 1;
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

    /// Run the spawned group until the first device flush (on the
    /// crashing disks) after one of the armed guards' condition arose, or
    /// to its end. Returns the guard that stopped it. The flush counted is
    /// one issued after the step before the one that counted the guard: a
    /// guarded flush issued in the same step as its guard is the one.
    fn run_to_guard(&mut self, img: &Rc<Img>, fg: &Foreground) -> Result<Option<Guard>, ExecError> {
        let disks = self.crashing_disks();
        // Each armed guard's count as last seen.
        let mut seen: Vec<(Guard, u64)> = self
            .armed
            .iter()
            .map(|&g| (g, img.guard_count(g)))
            .collect();
        let one_in = self.case.disk.crash.at_guard_one_in.max(1);
        let rng = &mut self.guard_rng;
        let mut before = flushes_on(&disks);
        let mut arose: Option<(Guard, u64)> = None;
        let end = self.sim.run_until(|| {
            let now = flushes_on(&disks);
            for (g, n) in seen.iter_mut() {
                let count = img.guard_count(*g);
                while arose.is_none() && *n < count {
                    *n += 1;
                    if rng.gen_ratio(1, one_in) {
                        arose = Some((*g, before));
                    }
                }
                *n = count;
            }
            before = now;
            matches!(arose, Some((_, at)) if now > at) || fg.done()
        })?;
        Ok(match (end, arose) {
            (RunEnd::Stopped, Some((g, at))) if flushes_on(&disks) > at => Some(g),
            // The group ended with the guard's flush never issued (a
            // failed write poisoned the image): the guard stays armed.
            _ => None,
        })
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
            let crash = ops.iter().any(|(_, op)| matches!(op, Op::Crash));
            let flushes_before = self.disk.flushes();
            // The image after the group (None if a crash cut a snapshot
            // operation short and it went with it), and whether the power
            // goes now.
            let (live, crashed) =
                if let Some(&(n, op)) = ops.iter().find(|(_, op)| op.is_snapshot()) {
                    let until = if crash {
                        SnapshotUntil::PowerFails
                    } else {
                        SnapshotUntil::End
                    };
                    let Some(back) = self.run_snapshot_group(live, g, n, op, until) else {
                        return;
                    };
                    (back.map(Rc::new), crash)
                } else {
                    let end = self.run_group_armed(&live, g, ops, crash, !crash);
                    if end == GroupEnd::Hung {
                        return;
                    }
                    (Some(live), crash || end == GroupEnd::GuardCrash)
                };
            self.group_flushes
                .push(self.disk.flushes() - flushes_before);
            if !crashed {
                img = Some(live.expect("a group run to its end gives the image back"));
                continue;
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
        }
    }

    /// The disks that crash together: the image's and the data file's.
    fn crashing_disks(&self) -> Vec<SimDisk> {
        std::iter::once(&self.disk)
            .chain(&self.data)
            .cloned()
            .collect()
    }

    /// Off, or back to what each disk's case options say (`true` never
    /// turns on the faults of a case whose `faults.enabled` is false: the
    /// shrinker's "no faults" step relies on it).
    fn set_faults_enabled(&self, on: bool) {
        for d in self.crashing_disks() {
            d.set_faults_enabled(on && d.options().faults.enabled);
        }
    }

    /// The request counts of the image's disk and the data file's, together.
    fn disk_counters(&self) -> DiskCounters {
        self.crashing_disks()
            .iter()
            .fold(DiskCounters::default(), |sum, d| sum.plus(&d.counters()))
    }

    fn faults_so_far(&self) -> u64 {
        self.gone.faults() + faults_on(&self.crashing_disks())
    }

    /// The disk guest data lives on: the data file's, or the image's.
    fn data_disk(&self) -> SimDisk {
        self.data.clone().unwrap_or_else(|| self.disk.clone())
    }

    /// Read `sectors` sectors from `first` through the image, faults off.
    ///
    /// The buffer is the last one given back, resized, its old bytes left
    /// in place: a read that fails to fill part of it returns another
    /// read's data there, which the model rejects, where zeroes could
    /// have passed for unwritten sectors.
    fn read_all(&self, img: &Rc<Img>, first: u64, sectors: u64) -> Result<Vec<u8>, Failure> {
        let i = img.clone();
        let ss = SECTOR_SIZE as u64;
        let mut buf = self.spare.take();
        buf.resize((sectors * ss) as usize, 0);
        let r = self.block(&format!("whole-disk read at sector {first}"), async move {
            i.read(first * ss, &mut buf).await.map(|_| buf)
        })?;
        r.map_err(|e| Failure::Engine {
            what: format!("whole-disk read at sector {first} failed with faults off: {e}"),
        })
    }

    /// Keep `buf` for the next `read_all`.
    fn give_back(&self, buf: Vec<u8>) {
        *self.spare.borrow_mut() = buf;
    }

    /// Drive one future (one engine request, `what`) to completion on the
    /// simulation. The executor's budgets follow from the case
    /// (`exec_options`), so running out of them, or a hang, is the
    /// engine's fault: a failure of the run, never a panic of the harness.
    fn block<T: 'static>(
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

#[cfg(test)]
mod tests {
    use super::{excuse, Excuse};
    use engine::dev::IoOp;

    #[test]
    fn an_error_is_excused_only_by_a_fault_it_could_have_met() {
        let eio = engine::Error::OutOfRange {
            offset: 0,
            len: 1,
            size: 0,
        };
        // A fault while it was in flight explains any error, by its kind.
        assert_eq!(
            excuse(&eio, Some(IoOp::Flush), 3),
            Some(Excuse::Fault(IoOp::Flush))
        );
        // Faults elsewhere in the run do not.
        assert_eq!(excuse(&eio, None, 3), None);
        // The poisoned image's refusal is explained by this epoch's faults
        // only.
        assert_eq!(
            excuse(&engine::Error::Poisoned, None, 1),
            Some(Excuse::Poisoned)
        );
        assert_eq!(excuse(&engine::Error::Poisoned, None, 0), None);
        assert_eq!(excuse(&engine::Error::ReadOnly, None, 5), None);
    }

    use super::*;
    use crate::workload::Profile;

    /// An engine request that never completes (a hang, or a spent budget)
    /// is a failure of the run, not a panic of the harness (it was
    /// `expect("a single engine request cannot hang the executor")`).
    #[test]
    fn a_request_that_never_completes_is_a_failure_not_a_panic() {
        let case = Case::generate(1, Profile::Mixed);
        let opts = RunOptions::default();
        let run = Run::fresh(&case, &opts, &crate::driver::EngineDriver);
        match run.block("waiting forever", std::future::pending::<()>()) {
            Err(Failure::Hang { group: 0, message }) => {
                assert!(message.starts_with("waiting forever: hang"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        // The stuck task is gone: the simulation can go on.
        assert_eq!(run.sim.task_count(), 0);
    }
}
