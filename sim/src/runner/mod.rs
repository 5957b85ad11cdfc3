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

mod enumerate;
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
/// Violations reported in full per check (the rest are counted).
const VIOLATIONS_SHOWN: usize = 8;

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

/// An image as the checker reads it: the disk's store itself, not a flat
/// copy (an image grown by the leaks of many crashes is held once, not
/// two or three times), possibly seen as longer than it is, reading zeroes
/// past its end: a crash may leave refcounts for clusters past the end of
/// the file (their data never landed), leaks `qemu-img check` cannot see
/// until the file grows over them.
struct Padded<'a> {
    store: &'a SparseStore,
    len: u64,
}

impl<'a> Padded<'a> {
    /// The image exactly as long as it is.
    fn exact(store: &'a SparseStore) -> Self {
        Padded {
            store,
            len: store.len(),
        }
    }
}

impl oracle::check::ImageSource for Padded<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        // Past the store's length it reads zeroes, as a byte slice does.
        self.store.read(off, buf);
        Ok(())
    }
}

/// Whether the image in `store` has its dirty bit set (a version 3
/// header's incompatible feature bit 0; `header::dirty_in`).
fn dirty_bit(store: &SparseStore) -> bool {
    let mut h = [0u8; 80];
    let n = (store.len() as usize).min(h.len());
    store.read(0, &mut h[..n]);
    engine::format::header::dirty_in(&h[..n])
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

/// How far past a crash image's end leaks are looked for.
const HIDDEN_LEAK_SPAN: u64 = 64 << 20;

/// The executor's limits for a run of `case`: a step budget that follows
/// from the case's work (`steps_budget`), and a time budget that follows
/// from it and from the case's devices, so that neither a heavy workload
/// nor a slow device is taken for a livelocked engine.
///
/// Simulated time passes only while a device request is pending (the
/// engine and the runner never sleep otherwise), but for the crash
/// horizons. While a request waits for the bus or a channel, others hold
/// it, so the time that passes is at most the sum over requests of each
/// one's own worst case (`LatencyOptions::worst_request` of the longest
/// request the engine issues, `MAX_REQUEST_BYTES`). Each request that
/// takes time costs its task a poll when it completes (the engine awaits
/// its requests one at a time), so at most `steps_max` of them complete,
/// and at most as many more as the case has operations (counted as at
/// least `CUT_SHORT_LEAST`, the bound of operations when the budget was
/// set) are cut short by crashes; a write_zeroes
/// refused as not supported completes at once but holds the bus or a
/// channel for its transfer, and the engine follows each refusal with a
/// timed request of the same task: at most as many again. A run within
/// the step budget therefore stays within this time budget; only the step
/// budget, never the device's speed, can end a run as a livelock.
///
/// Both budgets are at least the defaults, so a run that fitted the
/// default budgets is unchanged; validation bounds latencies, bandwidth
/// and work (`disk::MAX_LATENCY_NS`, `disk::MIN_BANDWIDTH`,
/// `case::MAX_WORK`) and refuses a case whose time budget would not fit in
/// u64 nanoseconds (it saturates rather than overflows regardless).
pub fn exec_options(case: &Case) -> ExecOptions {
    ExecOptions {
        steps_max: steps_budget(case),
        time_max: time_budget(case).unwrap_or(Nanos::MAX),
        policy: case.schedule,
    }
}

/// Least count of operations cut short by crashes `time_budget` allows
/// for (what `case::MAX_OPS` was when the budget was set, so that budgets
/// are unchanged for every case that bound allowed).
const CUT_SHORT_LEAST: u64 = 4096;

/// Polls allowed per unit of `Case::work`. Generated cases take at most
/// about 6 (the fixed costs of small cases) and request-heavy ones about 2
/// (measured over 600 generated cases with every switch on, off and as
/// generated, and over 512-byte-cluster cases of 2 MiB writes and of
/// hundreds of crashes): ten times that.
const STEPS_PER_WORK: u64 = 64;

/// The step budget of a run of `case`: the default, or more for a case
/// whose work needs more, so that a heavy case is never taken for a
/// livelock. It was the default whatever the case: a valid case of 400
/// crashes on a 64 MiB disk of 512-byte clusters spent it in its
/// whole-disk reads and was called a livelock of the engine.
fn steps_budget(case: &Case) -> u64 {
    let default = ExecOptions::default().steps_max;
    default.max(case.work().saturating_mul(STEPS_PER_WORK))
}

/// The longest one request of `case` can take, on its disks or on the
/// backing file's.
pub(crate) fn worst_request(case: &Case) -> Nanos {
    let hold = case
        .workload
        .iter()
        .flatten()
        .map(|op| match op {
            Op::BackgroundRead { hold, .. } => *hold,
            _ => 1,
        })
        .max()
        .unwrap_or(1);
    case.disk
        .latency
        .worst_request_held(MAX_REQUEST_BYTES, hold)
        .max(
            setup::backing_disk(case)
                .latency
                .worst_request(MAX_REQUEST_BYTES),
        )
}

/// The time budget of a run of `case` (see `exec_options`); `None` when it
/// does not fit in u64 ns, which validation refuses.
pub(crate) fn time_budget(case: &Case) -> Option<Nanos> {
    let ops: usize = case.workload.iter().map(Vec::len).sum();
    let requests = 2 * (steps_budget(case) + CUT_SHORT_LEAST.max(ops as u64));
    let horizons = case.crashes() as u64 * CRASH_HORIZON_NS;
    let budget = requests
        .checked_mul(worst_request(case))?
        .checked_add(horizons)?;
    Some(budget.max(ExecOptions::default().time_max))
}

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

    /// Spawn guest operation number `n` as a task.
    fn spawn_op(&self, img: &Rc<Img>, n: u64, op: Op) -> JoinHandle<()> {
        self.spawn_op_marked(img, n, op, None)
    }

    /// `spawn_op`, setting `started` at the task's first poll (a group
    /// waits for its background reads to start, not to end).
    fn spawn_op_marked(
        &self,
        img: &Rc<Img>,
        n: u64,
        op: Op,
        started: Option<Rc<Cell<bool>>>,
    ) -> JoinHandle<()> {
        let img = img.clone();
        let shared = self.shared.clone();
        let disk = self.data_disk();
        let disks = self.crashing_disks();
        let faults_before = self.gone.faults();
        let name = format!("op {n} {op:?}");
        self.sim.spawn_named(name, async move {
            if let Some(s) = started {
                s.set(true);
            }
            let id = OpId(n);
            let ss = SECTOR_SIZE as u64;
            // This epoch's faults so far: one injected from here until the
            // operation ends is what may explain its error.
            let faults_at_issue: Vec<usize> = disks.iter().map(SimDisk::fault_count).collect();
            let result = match op {
                Op::Write { sector, sectors } => {
                    let buf = write_buffer(WriteId(n), sector, sectors);
                    let range = SectorRange::new(sector, sectors);
                    shared
                        .model
                        .borrow_mut()
                        .write_issued(id, range, WriteKind::Data(WriteId(n)));
                    let r = img.write(sector * ss, &buf).await;
                    shared.model.borrow_mut().write_completed(id, status(&r));
                    shared.stats.borrow_mut().guest_writes += 1;
                    r
                }
                Op::WriteZeroes {
                    sector,
                    sectors,
                    unmap,
                } => {
                    let range = SectorRange::new(sector, sectors);
                    shared
                        .model
                        .borrow_mut()
                        .write_issued(id, range, WriteKind::Zero);
                    let r = img.write_zeroes(sector * ss, sectors * ss, unmap).await;
                    shared.model.borrow_mut().write_completed(id, status(&r));
                    shared.stats.borrow_mut().guest_writes += 1;
                    r
                }
                Op::Discard { sector, sectors } => {
                    let range = SectorRange::new(sector, sectors);
                    shared
                        .model
                        .borrow_mut()
                        .write_issued(id, range, WriteKind::Discard);
                    let r = img.discard(sector * ss, sectors * ss).await;
                    shared.model.borrow_mut().write_completed(id, status(&r));
                    r
                }
                Op::Flush => {
                    shared.model.borrow_mut().flush_issued(id);
                    let r = img.flush().await;
                    shared.model.borrow_mut().flush_completed(id, status(&r));
                    shared.stats.borrow_mut().guest_flushes += 1;
                    r
                }
                Op::Read { sector, sectors }
                | Op::BackgroundRead {
                    sector, sectors, ..
                } => {
                    let mut buf = vec![0u8; (sectors * ss) as usize];
                    shared
                        .model
                        .borrow_mut()
                        .read_issued(id, SectorRange::new(sector, sectors));
                    let r = img.read(sector * ss, &mut buf).await;
                    shared.stats.borrow_mut().guest_reads += 1;
                    match &r {
                        Ok(()) => {
                            let v = shared.model.borrow_mut().read_completed(id, &buf);
                            if let Err(vs) = v {
                                let (text, sectors) =
                                    describe_violations(&img, &disk, None, &vs).await;
                                shared
                                    .failures
                                    .borrow_mut()
                                    .push(Failure::Model { text, sectors });
                            }
                        }
                        Err(_) => shared.model.borrow_mut().read_failed(id),
                    }
                    r
                }
                Op::WriteCompressed { sector, sectors } => {
                    let mut buf = vec![0u8; (sectors * ss) as usize];
                    fill_compressible_buffer(&mut buf, WriteId(n), sector);
                    let values = Model::compressible_values(WriteId(n), sector, sectors);
                    shared
                        .model
                        .borrow_mut()
                        .write_issued_values(id, Some(WriteId(n)), &values);
                    let r = img.write_compressed(sector * ss, &buf).await;
                    // A cluster with a host cluster already is refused, as
                    // QEMU's driver refuses it: no failure, but the model
                    // is promised nothing of its content.
                    let refused = matches!(
                        r,
                        Err(engine::Error::Compressed(
                            engine::CompressedWriteError::Allocated { .. }
                        ))
                    );
                    let st = if refused { Status::Failed } else { status(&r) };
                    shared.model.borrow_mut().write_completed(id, st);
                    let mut stats = shared.stats.borrow_mut();
                    stats.guest_writes += 1;
                    stats.compressed_writes += 1;
                    stats.compressed_refused += u64::from(refused);
                    if refused {
                        Ok(())
                    } else {
                        r
                    }
                }
                Op::SnapshotCreate | Op::SnapshotApply { .. } | Op::SnapshotDelete { .. } => {
                    unreachable!("snapshot operations run alone (run_snapshot_group)")
                }
                Op::Crash => unreachable!("crashes are not spawned"),
            };
            account(
                &shared,
                &disks,
                &faults_at_issue,
                faults_before,
                n,
                &op,
                result,
            );
        })
    }

    /// Run snapshot operation `op` (number `n`) of group `g`, alone: every
    /// request in flight (background reads too) ends first, as QEMU drains
    /// the disk before one. A create first reads the guest disk back,
    /// checked by the model, to know what the snapshot holds. `until`
    /// says when the group stops: at its end, or when the power goes
    /// (perhaps in the middle of the operation). Returns the image (None
    /// if the power went before the operation ended and it went with it),
    /// or None outright if the run cannot go on (a failure is recorded).
    pub(super) fn run_snapshot_group(
        &mut self,
        live: Rc<Img>,
        g: usize,
        n: u64,
        op: Op,
        until: SnapshotUntil,
    ) -> Option<Option<Img>> {
        self.group = g;
        // Counted from before the drain, as `go` counts a group's flushes.
        let flush_target = match until {
            SnapshotUntil::DeviceFlush(k) => self.disk.flushes().saturating_add(k),
            _ => u64::MAX,
        };
        if let Err(e) = self.sim.run() {
            self.sim.abort_all();
            self.fail(Failure::Hang {
                group: g,
                message: e.to_string(),
            });
            return None;
        }
        self.background.clear();
        let plan = match op {
            Op::SnapshotCreate => match self.capture(&live, n) {
                Ok(values) => SnapshotPlan::Create(
                    self.shared
                        .snapshots
                        .borrow_mut()
                        .taking(Snapshots::name_of(n), values),
                ),
                Err(f) => {
                    self.fail(f);
                    return None;
                }
            },
            Op::SnapshotApply { pick } => {
                let known = self.shared.snapshots.borrow();
                match known.pick(pick) {
                    Some(i) => SnapshotPlan::Apply {
                        snapshot: i,
                        values: self.values_after_apply(&known.get(i).values),
                    },
                    None => SnapshotPlan::Skip,
                }
            }
            Op::SnapshotDelete { pick } => {
                let mut known = self.shared.snapshots.borrow_mut();
                match known.pick(pick) {
                    Some(i) => {
                        // Cut short, it may have happened or not.
                        known.set(i, Presence::Maybe);
                        SnapshotPlan::Delete(i)
                    }
                    None => SnapshotPlan::Skip,
                }
            }
            _ => unreachable!("run_snapshot_group runs snapshot operations"),
        };
        let Ok(owned) = Rc::try_unwrap(live) else {
            self.fail(Failure::Engine {
                what: "the image is still shared after every request ended".into(),
            });
            return None;
        };
        let slot: Rc<RefCell<Option<Img>>> = Rc::new(RefCell::new(None));
        self.spawn_snapshot_op(owned, n, op, plan, slot.clone());
        let ran = match until {
            SnapshotUntil::End => self.sim.run().map(|_| ()),
            SnapshotUntil::PowerFails => self.run_until_power_fails(),
            SnapshotUntil::DeviceFlush(_) => {
                let disk = self.disk.clone();
                self.sim
                    .run_until(|| disk.flushes() >= flush_target)
                    .map(|_| ())
            }
        };
        if let Err(e) = ran {
            self.sim.abort_all();
            self.fail(Failure::Hang {
                group: g,
                message: e.to_string(),
            });
            return None;
        }
        let back = slot.borrow_mut().take();
        Some(back)
    }

    /// What applying a snapshot holding `taken` puts in each sector whose
    /// value may change: those the model has a record of and those the
    /// snapshot holds written data in (an unwritten sector reads the same
    /// in both).
    fn values_after_apply(&self, taken: &[(u64, Value)]) -> Vec<(u64, Value)> {
        let model = self.shared.model.borrow();
        let mut sectors = model.recorded_sectors();
        sectors.extend(taken.iter().map(|&(s, _)| s));
        let mut taken = taken.iter().peekable();
        sectors
            .into_iter()
            .map(|s| {
                while taken.next_if(|&&(t, _)| t < s).is_some() {}
                let v = taken
                    .next_if(|&&(t, _)| t == s)
                    .map_or_else(|| model.unwritten(s), |&(_, v)| v);
                (s, v)
            })
            .collect()
    }

    /// The guest disk read back (faults off) and checked by the model as
    /// a read, as the values of the sectors that differ from unwritten
    /// ones, in order: what a snapshot taken now holds.
    fn capture(&mut self, img: &Rc<Img>, n: u64) -> Result<Vec<(u64, Value)>, Failure> {
        self.set_faults_enabled(false);
        let reads = sweep::plan(self.case, &self.shared.model.borrow(), &self.disk);
        let mut values = Vec::new();
        for (first, count) in reads {
            let buf = self.read_all(img, first, count)?;
            let checked = self
                .shared
                .model
                .borrow_mut()
                .check_read(OpId(n), first, &buf);
            if let Err(vs) = checked {
                let (text, sectors) = self.block(
                    "describing the violations of a snapshot's read",
                    describe_owned(img.clone(), self.data_disk(), None, vs),
                )?;
                self.fail(Failure::Model { text, sectors });
            }
            let model = self.shared.model.borrow();
            for (s, chunk) in (first..).zip(buf.chunks_exact(SECTOR_SIZE)) {
                let v = Value::of_content(decode(chunk), s).unwrap_or(Value::Garbage);
                if v != model.unwritten(s) {
                    values.push((s, v));
                }
            }
            drop(model);
            self.give_back(buf);
        }
        self.set_faults_enabled(true);
        Ok(values)
    }

    /// Spawn the task that runs snapshot operation `op` (number `n`) as
    /// `plan` says, on the image it owns meanwhile, and puts the image in
    /// `slot` when done.
    fn spawn_snapshot_op(
        &self,
        owned: Img,
        n: u64,
        op: Op,
        plan: SnapshotPlan,
        slot: Rc<RefCell<Option<Img>>>,
    ) {
        let shared = self.shared.clone();
        let disks = self.crashing_disks();
        let faults_before = self.gone.faults();
        let name = format!("op {n} {op:?}");
        self.sim.spawn_named(name, async move {
            let mut img = owned;
            let id = OpId(n);
            let faults_at_issue: Vec<usize> = disks.iter().map(SimDisk::fault_count).collect();
            let name_of = |i: usize| shared.snapshots.borrow().get(i).name.clone();
            let skipped = matches!(plan, SnapshotPlan::Skip);
            // Each operation first makes everything written before it
            // durable, as a flush does, and is durable once it returns.
            let result = match plan {
                SnapshotPlan::Create(i) => {
                    let name = name_of(i);
                    shared.model.borrow_mut().flush_issued(id);
                    let r = img.snapshot_create(&name).await;
                    shared.model.borrow_mut().flush_completed(id, status(&r));
                    if r.is_ok() {
                        shared.snapshots.borrow_mut().set(i, Presence::Exists);
                    }
                    r
                }
                SnapshotPlan::Apply { snapshot, values } => {
                    let name = name_of(snapshot);
                    {
                        let mut m = shared.model.borrow_mut();
                        m.flush_issued(id);
                        m.write_issued_values(id, None, &values);
                    }
                    let r = img.snapshot_apply(&name).await;
                    let st = status(&r);
                    let mut m = shared.model.borrow_mut();
                    m.write_completed(id, st);
                    m.flush_completed(id, st);
                    if st == Status::Ok {
                        m.flush_issued(id);
                        m.flush_completed(id, Status::Ok);
                    }
                    r
                }
                SnapshotPlan::Delete(i) => {
                    let name = name_of(i);
                    shared.model.borrow_mut().flush_issued(id);
                    let r = img.snapshot_delete(&name).await;
                    shared.model.borrow_mut().flush_completed(id, status(&r));
                    if r.is_ok() {
                        shared.snapshots.borrow_mut().set(i, Presence::Deleted);
                    }
                    r
                }
                SnapshotPlan::Skip => Ok(()),
            };
            *slot.borrow_mut() = Some(img);
            // Narrow refcounts cannot count a cluster shared once more:
            // the engine refuses before changing anything, as QEMU does.
            // The model took the refusal for a failure, which promises
            // nothing.
            let refused = matches!(
                result,
                Err(engine::Error::Snapshot(
                    engine::SnapshotError::RefcountOverflow { .. }
                ))
            );
            let result = if refused { Ok(()) } else { result };
            {
                let mut stats = shared.stats.borrow_mut();
                stats.snapshot_ops += 1;
                stats.snapshot_ops_skipped += u64::from(skipped);
                stats.snapshot_ops_refused += u64::from(refused);
            }
            account(
                &shared,
                &disks,
                &faults_at_issue,
                faults_before,
                n,
                &op,
                result,
            );
        });
    }

    /// Hold the run's snapshots against those the image lists (after a
    /// crash's recovery, and at the end); a run that took none asks
    /// nothing.
    fn settle_snapshots(&self, img: &Rc<Img>, label: &str, reopened: bool) -> Result<(), Failure> {
        if self.shared.snapshots.borrow().is_empty() {
            return Ok(());
        }
        let i = img.clone();
        let names = self.block(&format!("listing the snapshots {label}"), async move {
            i.snapshot_names().await
        })?;
        let names = names.map_err(|e| Failure::Engine {
            what: format!("listing the snapshots {label} failed with faults off: {e}"),
        })?;
        if let Err(wrong) = self.shared.snapshots.borrow_mut().settle(&names, reopened) {
            self.fail(Failure::Engine {
                what: format!("snapshots {label}: {wrong}"),
            });
        }
        Ok(())
    }

    /// The power goes: take a crash image, reopen it, check it.
    fn crash(&mut self) -> Result<Rc<Img>, Failure> {
        self.crashes += 1;
        let image = self
            .disk
            .crash_image(&mut self.crash_rng)
            .map_err(|e| Failure::Engine {
                what: format!("crash image: {e}"),
            })?;
        // The data file's disk loses power at the same moment.
        let data_image = match &self.data {
            Some(d) => {
                Some(
                    d.crash_image(&mut self.data_crash_rng)
                        .map_err(|e| Failure::Engine {
                            what: format!("crash image of the data file: {e}"),
                        })?,
                )
            }
            None => None,
        };
        if std::mem::take(&mut self.at_flush) {
            self.judge_more_states()?;
        }
        let torn = image.summary().torn_writes
            + data_image.as_ref().map_or(0, |i| i.summary().torn_writes);
        self.shared.stats.borrow_mut().torn_writes += torn;
        self.shared.model.borrow_mut().crash();
        self.gone.add(&self.crashing_disks());
        let next = self.disk.reopen(image.content);
        self.before_crash = Some(std::mem::replace(&mut self.disk, next));
        if let (Some(d), Some(i)) = (&self.data, data_image) {
            let next = d.reopen(i.content);
            self.data_before_crash = self.data.replace(next);
        }
        self.recover(&format!("crash-{}", self.crashes))
    }

    /// Reopen the image on `self.disk` after a crash (or a failed close),
    /// check it, read it whole against the model.
    /// At a crash at a flush, the moment with the most pending metadata:
    /// [`EXTRA_STATES_AT_FLUSH`] more of its crash states of the image's
    /// disk, each judged by the checker alone (no reopen, no read-back),
    /// so that an ordering bug inside a writeback, whose window is a
    /// single flush, is not left to one draw. Images left dirty are
    /// skipped: their refcounts are stale by design until the engine's
    /// repair on open. Drawn after the state the run goes on from, so
    /// that state is the one it would be without these.
    fn judge_more_states(&mut self) -> Result<(), Failure> {
        let point = self.disk.crash_point().map_err(|e| Failure::Engine {
            what: format!("crash image: {e}"),
        })?;
        // Few pending writes (a writeback's last steps, a table growth's
        // header switch): every whole-write state, instead of a draw that
        // misses the one a missing flush between two of them spoils.
        let extras: Vec<_> = if point.pending().len() <= EXHAUSTIVE_PENDING_AT_FLUSH {
            point
                .states_by_write(1 << EXHAUSTIVE_PENDING_AT_FLUSH)
                .collect()
        } else {
            (0..EXTRA_STATES_AT_FLUSH)
                .map(|_| point.sample(&mut self.crash_rng))
                .collect()
        };
        for (k, extra) in (1..).zip(extras) {
            if !dirty_bit(&extra.content) {
                let label = format!("crash-{} (extra state {k})", self.crashes);
                // A failure's dump diff is against the disk as the power
                // went, which is still `self.disk` here.
                let before = self.before_crash.replace(self.disk.clone());
                self.judge(&label, &extra.content, None);
                self.before_crash = before;
                self.shared.stats.borrow_mut().crash_states_checked += 1;
            }
        }
        Ok(())
    }

    fn recover(&mut self, label: &str) -> Result<Rc<Img>, Failure> {
        self.set_faults_enabled(false);
        // A snapshot (chunks are shared and copied on write): the engine's
        // repair on open does not change it.
        let raw = self.disk.volatile();
        let dirty = dirty_bit(&raw);
        let img = self
            .open_image(&format!("reopen after {label}"))?
            .map_err(|e| Failure::Engine {
                what: format!("reopen after {label} failed: {e}"),
            })?;
        // A dirty image's refcounts are stale by design: judge it after the
        // engine's repair; a clean one exactly as the crash left it.
        let judged = if dirty { self.disk.volatile() } else { raw };
        // A crash may leak clusters (allocated, never linked).
        let leaks = self.judge(label, &judged, None);
        // Judged: a later check (the final one) is not of this crash. The
        // disk as the power went stays for describing wrong reads: its log
        // has the writes before the crash.
        let image_before = self.before_crash.take();
        let data_before = self.data_before_crash.take();
        let disk_before = if self.data.is_some() {
            data_before
        } else {
            image_before
        };
        self.shared.stats.borrow_mut().leaked_clusters += leaks;
        self.last_crash_image = Some(judged);
        self.shared.stats.borrow_mut().crash_states_checked += 1;
        let img = Rc::new(img);
        let sectors = self.case.sectors();
        let reads = sweep::plan(self.case, &self.shared.model.borrow(), &self.disk);
        let mut violations = Vec::new();
        let mut next = 0;
        for (first, n) in reads {
            if first > next {
                let mut model = self.shared.model.borrow_mut();
                model.skip_recovered(next, first - next);
            }
            let buf = self.read_all(&img, first, n)?;
            violations.extend(self.shared.model.borrow_mut().check_recovered(first, &buf));
            self.give_back(buf);
            next = first + n;
        }
        if next < sectors {
            let mut model = self.shared.model.borrow_mut();
            model.skip_recovered(next, sectors - next);
        }
        self.shared.model.borrow_mut().finish_recovery();
        if !violations.is_empty() {
            let (text, sectors) = self.block(
                &format!("describing the violations after {label}"),
                describe_owned(img.clone(), self.data_disk(), disk_before, violations),
            )?;
            self.fail(Failure::Model { text, sectors });
        }
        self.settle_snapshots(&img, &format!("after {label}"), true)?;
        self.set_faults_enabled(true);
        Ok(img)
    }

    /// The checker's verdict on `bytes`: no corruption, and no leak but
    /// those `leaks_allowed` says: any with `None`; with `Some(image)`,
    /// those `image` leaked, and none with `Some(None)`. Returns the leaks
    /// found.
    fn judge(
        &self,
        label: &str,
        image: &SparseStore,
        leaks_allowed: Option<Option<&SparseStore>>,
    ) -> u64 {
        let report = oracle::check::check(&Padded::exact(image));
        if let Some(dir) = self.export_dir() {
            let data = self.data.as_ref().map(|d| d.volatile().to_bytes());
            export(&dir, label, &image.to_bytes(), data.as_deref(), &report);
        }
        let leaks = leak_offsets(&report);
        let new_leaks: Vec<u64> = match leaks_allowed {
            None => Vec::new(),
            Some(_) if leaks.is_empty() => Vec::new(),
            Some(None) => leaks.into_iter().collect(),
            Some(Some(before)) => leaks.difference(&leaked_by(before)).copied().collect(),
        };
        // A checker that could not even open the image judged nothing.
        if report.corruptions > 0
            || report.check_errors > 0
            || report.failure.is_some()
            || !new_leaks.is_empty()
        {
            let mut summary = report.human();
            if let Some(f) = &report.failure {
                summary.push_str(&format!("the checker could not check the image: {f}\n"));
            }
            for f in report
                .findings
                .iter()
                .filter(|f| f.kind != FindingKind::Leak)
                .take(VIOLATIONS_SHOWN)
            {
                summary.push_str(&format!("{}\n", f.message));
            }
            if !new_leaks.is_empty() {
                summary.push_str(&format!("leaked since the last crash: {new_leaks:x?}\n"));
            }
            let dump_diff = self
                .before_crash
                .as_ref()
                .map(|d| dump_diff(&d.volatile(), image));
            self.fail(Failure::Check {
                label: label.to_string(),
                summary,
                dump_diff,
            });
        }
        report.leaks
    }

    fn export_dir(&self) -> Option<PathBuf> {
        self.opts
            .export
            .as_ref()
            .map(|d| d.join(format!("seed-{}", self.case.seed)))
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

    /// The end of a run without a crash: read everything, close cleanly,
    /// and find neither corruption nor leak.
    fn finish(&mut self, img: Rc<Img>) {
        self.set_faults_enabled(false);
        let reads = sweep::plan(self.case, &self.shared.model.borrow(), &self.disk);
        // Op ids the workload never uses, which violations name as the
        // read-back (`oracle::model::READ_BACK_OPS`).
        for (op, (first, n)) in (oracle::model::READ_BACK_OPS..).zip(reads) {
            self.shared
                .model
                .borrow_mut()
                .read_issued(OpId(op), SectorRange::new(first, n));
            match self.read_all(&img, first, n) {
                Ok(buf) => {
                    if let Err(vs) = self
                        .shared
                        .model
                        .borrow_mut()
                        .read_completed(OpId(op), &buf)
                    {
                        match self.block(
                            "describing the violations of the final read",
                            describe_owned(img.clone(), self.data_disk(), None, vs),
                        ) {
                            Ok((text, sectors)) => self.fail(Failure::Model { text, sectors }),
                            Err(f) => return self.fail(f),
                        }
                    }
                    self.give_back(buf);
                }
                Err(f) => {
                    self.shared.model.borrow_mut().read_failed(OpId(op));
                    return self.fail(f);
                }
            }
        }
        if let Err(f) = self.settle_snapshots(&img, "at the end", false) {
            return self.fail(f);
        }
        let img = match Rc::try_unwrap(img) {
            Ok(i) => i,
            Err(_) => {
                return self.fail(Failure::Engine {
                    what: "image still shared at the end".into(),
                })
            }
        };
        self.shared.stats.borrow_mut().engine = img.counters();
        self.shared.stats.borrow_mut().epoch_disk = self.disk_counters().since(&self.epoch_start);
        // Drops during the close itself are not counted: close consumes
        // the image.
        self.shared.stats.borrow_mut().add_epoch(&img.counters());
        let closed = match self.block("close", async move { img.close().await }) {
            Ok(closed) => closed,
            Err(f) => return self.fail(f),
        };
        self.shared.stats.borrow_mut().disk = self.disk_counters();
        match closed {
            Ok(_) => {
                let image = self.disk.volatile();
                // No new leak since the last crash, unless an injected
                // fault explains it.
                let allowed = (self.faults_so_far() == 0).then_some(self.last_crash_image.as_ref());
                self.judge("final", &image, allowed);
            }
            Err(_) if self.faults_so_far() > 0 => {
                // An injected fault poisoned the image: treat the close as
                // a crash; what is on disk must still be sound.
                if let Err(f) = self.crash() {
                    self.fail(f);
                }
            }
            Err(e) => self.fail(Failure::Engine {
                what: format!("close failed with no fault injected: {e}"),
            }),
        }
    }
}

/// Count guest operation `n`'s end and judge its error: legitimate only
/// as the echo of an injected fault, one that met a request while the
/// operation was in flight (its own, or metadata I/O it waited for), or
/// the failed metadata write that poisoned the image earlier in this
/// epoch. `faults_at_issue` are the disks' fault counts when it was
/// issued, `faults_before` those of the epochs before.
fn account(
    shared: &Shared,
    disks: &[SimDisk],
    faults_at_issue: &[usize],
    faults_before: u64,
    n: u64,
    op: &Op,
    result: Result<(), engine::Error>,
) {
    shared.stats.borrow_mut().guest_ops += 1;
    let Err(e) = result else {
        return;
    };
    shared.stats.borrow_mut().failed_ops += 1;
    let during = first_fault_since(disks, faults_at_issue);
    let mut stats = shared.stats.borrow_mut();
    match excuse(&e, during, faults_on(disks)) {
        Some(Excuse::Fault(op)) => stats.excused.by_fault(op),
        Some(Excuse::Poisoned) => stats.excused.poisoned += 1,
        None => {
            let why = if faults_before + faults_on(disks) == 0 {
                "no fault injected".to_string()
            } else {
                format!(
                    "no fault injected while it was in flight ({} before it, \
                     none since it was issued)",
                    faults_before + faults_at_issue.iter().sum::<usize>() as u64
                )
            };
            shared.failures.borrow_mut().push(Failure::Engine {
                what: format!("op {n} ({op}) failed with {why}: {e}"),
            });
        }
    }
}

/// What explains a guest operation's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Excuse {
    /// A fault met a request of this kind while the operation was in flight.
    Fault(IoOp),
    /// The image was poisoned by a failed metadata write this epoch.
    Poisoned,
}

/// Whether an operation's error `e` is explained: by `during`, the first
/// fault injected while it was in flight, or (for the poisoned image's
/// error) by any of the epoch's `epoch_faults`. None: an engine failure,
/// however many faults the run injected elsewhere.
fn excuse(e: &engine::Error, during: Option<IoOp>, epoch_faults: u64) -> Option<Excuse> {
    match (e, during) {
        (_, Some(op)) => Some(Excuse::Fault(op)),
        (engine::Error::Poisoned, None) if epoch_faults > 0 => Some(Excuse::Poisoned),
        _ => None,
    }
}

/// The kind of request that met the first fault injected on `disks` since
/// each held `since[i]` faults, if any.
fn first_fault_since(disks: &[SimDisk], since: &[usize]) -> Option<IoOp> {
    disks
        .iter()
        .zip(since)
        .filter_map(|(d, &n)| d.injected_fault(n).map(|f| (f.at, f.op)))
        .min_by_key(|&(at, _)| at)
        .map(|(_, op)| op)
}

/// Faults injected so far on `disks`.
fn faults_on(disks: &[SimDisk]) -> u64 {
    disks.iter().map(|d| d.fault_count() as u64).sum()
}

/// What disks replaced at a crash injected and held, kept for the run's
/// report (a crash replaces each crashing disk with a new one).
#[derive(Debug, Clone, Default)]
struct GoneDisks {
    /// The faults injected, by kind.
    fault_kinds: FaultCounts,
    /// The requests held long (latency outliers), by rank.
    held: Vec<HeldRequest>,
    /// The requests failed with EIO, by rank.
    failed: Vec<NthRequest>,
}

impl GoneDisks {
    fn add(&mut self, disks: &[SimDisk]) {
        self.fault_kinds.add(&fault_kinds_on(disks));
        for d in disks {
            self.held.extend(d.held_list());
            self.failed.extend(d.failed_by_rank());
        }
    }

    /// Every fault injected: each is counted under exactly one kind.
    fn faults(&self) -> u64 {
        self.fault_kinds.fields().iter().map(|(_, n)| n).sum()
    }
}

/// The faults injected on `disks`, by kind.
fn fault_kinds_on(disks: &[SimDisk]) -> FaultCounts {
    let mut c = FaultCounts::default();
    for d in disks {
        for f in d.injected_faults() {
            c.count(&f);
        }
    }
    c
}

/// Most lines of a failed check's dump diff kept in the failure: the
/// tables that changed, not a whole image's L2 tables.
const DUMP_DIFF_LINES: usize = 120;

/// A failed check's dump diff when the crash lost no metadata write: what
/// the checker misses was never written (still in the engine's caches).
pub const SAME_DUMP: &str = "(none: the crash kept every metadata write issued; what the checker \
     misses had not been written when the power went)\n";

/// A unified diff of the metadata dump of `before` (the image as the
/// power went) against `after` (the crash state judged).
fn dump_diff(before: &SparseStore, after: &SparseStore) -> String {
    let a = oracle::dump::dump(&Padded::exact(before));
    let b = oracle::dump::dump(&Padded::exact(after));
    if a == b {
        return SAME_DUMP.to_string();
    }
    let diff = similar::TextDiff::from_lines(&a, &b);
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header("qcsim dump, before the crash", "qcsim dump, crash state")
        .to_string();
    let total = text.lines().count();
    if total <= DUMP_DIFF_LINES {
        return text;
    }
    let mut kept: String = text
        .lines()
        .take(DUMP_DIFF_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    kept.push_str(&format!(
        "... and {} more lines of the diff\n",
        total - DUMP_DIFF_LINES
    ));
    kept
}

/// The clusters `image` leaks (by host offset), counting those up to
/// [`HIDDEN_LEAK_SPAN`] past its end that a refcount still claims.
fn leaked_by(image: &SparseStore) -> BTreeSet<u64> {
    let padded = Padded {
        store: image,
        len: image.len() + HIDDEN_LEAK_SPAN,
    };
    leak_offsets(&oracle::check::check(&padded))
}

fn leak_offsets(report: &oracle::check::CheckReport) -> BTreeSet<u64> {
    report
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Leak)
        .filter_map(|f| f.offset)
        .collect()
}

fn status<T, E>(r: &Result<T, E>) -> Status {
    if r.is_ok() {
        Status::Ok
    } else {
        Status::Failed
    }
}

/// Violations, each with where the sector lives on the device now and
/// the last device writes that touched it.
/// The violations in words (the first [`VIOLATIONS_SHOWN`]), and the same
/// sectors as data for a report's hex diff: what came back, each value the
/// model allowed with its bytes, and the device writes that last touched
/// the sector.
async fn describe_violations(
    img: &Img,
    disk: &SimDisk,
    before: Option<&SimDisk>,
    vs: &[Violation],
) -> (String, Vec<WrongSector>) {
    let mut text = String::new();
    let mut sectors = Vec::new();
    for v in vs.iter().take(VIOLATIONS_SHOWN) {
        text.push_str(&format!("{v}\n"));
        let mut host_offset = None;
        let mut last_device_writes = Vec::new();
        match img.host_offset(v.sector * SECTOR_SIZE as u64).await {
            Ok(Some(host)) => {
                text.push_str(&format!(
                    "  maps to host offset {host:#x}; last device writes there:\n"
                ));
                for w in disk.writes_touching(host, SECTOR_SIZE as u64, 4) {
                    text.push_str(&format!("    {w}\n"));
                    last_device_writes.push(w.to_string());
                }
                // Each crash reopens the image on a new disk with a new
                // log: after a crash, the writes that made the sector
                // what it is are on the disk as the power went.
                if last_device_writes.is_empty() {
                    if let Some(b) = before {
                        for w in b.writes_touching(host, SECTOR_SIZE as u64, 4) {
                            let w = format!("before the crash: {w}");
                            text.push_str(&format!("    {w}\n"));
                            last_device_writes.push(w);
                        }
                    }
                }
                if last_device_writes.is_empty() {
                    text.push_str(&format!("    {NO_WRITES_LOGGED}\n"));
                }
                host_offset = Some(host);
            }
            Ok(None) => text.push_str("  not mapped to a data cluster now\n"),
            Err(e) => text.push_str(&format!("  mapping unknown: {e}\n")),
        }
        sectors.push(wrong_sector(v, host_offset, last_device_writes));
    }
    if vs.len() > VIOLATIONS_SHOWN {
        text.push_str(&format!(
            "... and {} more sectors\n",
            vs.len() - VIOLATIONS_SHOWN
        ));
    }
    (text, sectors)
}

/// What a wrong sector's description says when neither the disk's log
/// nor, after a crash, the log of the disk as the power went holds a
/// write to it.
pub const NO_WRITES_LOGGED: &str = "none since the epoch began (each crash starts the disk's log \
     anew): the sector was last written in an earlier epoch, or never";

/// One violation as data, each allowed value with the bytes it stands for
/// (also what a `--driver qemu` run reports of a wrong sector).
pub fn wrong_sector(
    v: &Violation,
    host_offset: Option<u64>,
    last_device_writes: Vec<String>,
) -> WrongSector {
    use oracle::data::Content;
    use oracle::model::Value;
    let mut write_ids = Vec::new();
    let allowed = v
        .allowed
        .iter()
        .map(|value| {
            let mut bytes = vec![0u8; SECTOR_SIZE];
            let (write_id, shown) = match *value {
                Value::Zero => (None, true),
                Value::Backing => {
                    oracle::data::fill_backing(&mut bytes, v.sector);
                    (None, true)
                }
                Value::Data(id) => {
                    oracle::data::fill_written(&mut bytes, id, v.sector);
                    write_ids.push(id.0);
                    (Some(id.0), true)
                }
                Value::Garbage | Value::Unspecified => (None, false),
            };
            AllowedValue {
                value: value.to_string(),
                write_id,
                bytes: if shown { to_hex(&bytes) } else { String::new() },
            }
        })
        .collect();
    if let Content::Written { id, .. } = v.observed {
        write_ids.push(id.0);
    }
    write_ids.sort_unstable();
    write_ids.dedup();
    WrongSector {
        sector: v.sector,
        when: v.when.to_string(),
        observed: v.observed.to_string(),
        got: to_hex(&v.got),
        allowed,
        write_ids,
        host_offset,
        last_device_writes,
        driver: None,
    }
}

async fn describe_owned(
    img: Rc<Img>,
    disk: SimDisk,
    before: Option<SimDisk>,
    vs: Vec<Violation>,
) -> (String, Vec<WrongSector>) {
    describe_violations(&img, &disk, before.as_ref(), &vs).await
}

/// Write `LABEL.qcow2` and its verdict (and the data file as it was then,
/// as `LABEL.data`) under `dir`.
fn export(
    dir: &Path,
    label: &str,
    bytes: &[u8],
    data: Option<&[u8]>,
    report: &oracle::check::CheckReport,
) {
    // Export is a diagnostic: a failure to write it must not change the
    // verdict, but it must not pass silently either.
    let r = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(dir.join(format!("{label}.qcow2")), bytes))
        .and_then(|_| match data {
            Some(d) => std::fs::write(dir.join(format!("{label}.data")), d),
            None => Ok(()),
        })
        .and_then(|_| {
            let j = serde_json::json!({ "label": label, "check": report.to_qemu_json() });
            std::fs::write(
                dir.join(format!("{label}.json")),
                serde_json::to_string_pretty(&j).unwrap_or_default(),
            )
        });
    if let Err(e) = r {
        eprintln!("qcsim: export to {}: {e}", dir.display());
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
