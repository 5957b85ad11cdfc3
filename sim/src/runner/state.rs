//! A run's state: the options, the shared counters and model, the `Run`
//! itself and the small types its parts pass around. Below every module
//! of the runner (`mod.rs`'s loop, `ops`, `faults`, `recovery`, `judge`,
//! `explain`, `setup`, `enumerate`), which import it and never each other
//! back; it also hands them the imports they all use.

pub(super) use std::cell::{Cell, RefCell};
pub(super) use std::collections::BTreeSet;
pub(super) use std::path::{Path, PathBuf};
pub(super) use std::rc::Rc;

pub(super) use engine::dev::IoOp;
pub(super) use engine::Guard;

pub(super) use crate::driver::{Driver, DriverKind, EngineDriver};
pub(super) use oracle::check::FindingKind;
pub(super) use oracle::data::{
    decode, fill_compressible_buffer, write_buffer, WriteId, SECTOR_SIZE,
};
pub(super) use oracle::model::{Model, OpId, SectorRange, Status, Value, Violation, WriteKind};
pub(super) use rand::Rng;
pub(super) use rand_chacha::ChaCha8Rng;

pub(super) use super::report::{to_hex, AllowedValue, Failure, RunReport, RunStats, WrongSector};
pub(super) use super::snapshots::{Presence, Snapshots};
pub(super) use crate::budget::CRASH_HORIZON_NS;
pub(super) use crate::case::{BackingSpec, Case, Op};
pub(super) use crate::disk::{
    DiskCounters, FaultCounts, HeldRequest, NthRequest, SimDisk, SparseStore, AT_FLUSH_MAX, PPM,
};
pub(super) use crate::exec::{ExecError, JoinHandle, RunEnd, Sim};
pub(super) use crate::rng::{self, Stream};

/// What a run does besides running.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Write every post-crash image and the final image, with the
    /// checker's and the model's verdicts, under `DIR/seed-N/`.
    pub export: Option<PathBuf>,
}

/// Crash states beyond the one a run goes on from that a crash at a flush
/// has the checker judge (`Run::judge_more_states`).
pub(super) const EXTRA_STATES_AT_FLUSH: u32 = 3;
/// At a crash at a flush with at most this many pending writes, the extra
/// states are all 2^n whole-write states instead.
pub(super) const EXHAUSTIVE_PENDING_AT_FLUSH: usize = 4;

/// The image under test, behind the driver interface (`crate::driver`).
pub(super) type Img = Box<dyn Driver>;

/// State shared by the op tasks of a run.
pub(super) struct Shared {
    pub(super) model: RefCell<Model>,
    pub(super) failures: RefCell<Vec<Failure>>,
    pub(super) stats: RefCell<RunStats>,
    /// The internal snapshots the workload took.
    pub(super) snapshots: RefCell<Snapshots>,
    /// A snapshot operation on a version 2 image failed partway (an I/O
    /// error, which poisons the image): as after a crash inside one, its
    /// COPIED flags may lag its refcounts until the next crash state is
    /// repaired (`Run::crash`).
    pub(super) flags_in_doubt: Cell<bool>,
    /// The image is version 2 now: the case's version until an amend
    /// changes it (set when the amend returns, or from the header of the
    /// image a crash left).
    pub(super) v2: Cell<bool>,
    /// The amend that just ran returned (changed the image or refused):
    /// the run closes and reopens the image (`Run::reopen_after_amend`).
    pub(super) amend_done: Cell<bool>,
    /// The guest disk's size now, in sectors: the case's until a resize
    /// or the apply of a snapshot of another size changes it (set when
    /// it returns, or from the header of the image a crash left).
    pub(super) sectors: Cell<u64>,
    /// A grow in flight: its operation's number and the size it grows to.
    /// A crash that leaves that size in the header finds the grow done
    /// (its range zeroed first, the size last), so the model is told it
    /// completed (`Run::crash`).
    pub(super) growing: Cell<Option<(u64, u64)>>,
}

/// What an operation that runs alone (a snapshot operation, an amend)
/// will do, decided by the runner before it hands the image to the
/// operation's task.
pub(super) enum AlonePlan {
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
    /// Amend the image's format options.
    Amend(crate::case::Amend),
    /// Resize the guest disk to `to` sectors; `values` are
    /// what the sectors between hold once it is done (a grow: zeroes) or
    /// while it is cut short (a shrink: unallocated, reading as
    /// unwritten), each sector the model has a record of or the backing
    /// file has data in.
    Resize {
        to: u64,
        values: Vec<(u64, Value)>,
    },
}

/// One case's run: its simulation, disks and model, and what the
/// runner's steps share (see the module documentation).
pub struct Run<'a> {
    pub(super) case: &'a Case,
    pub(super) opts: &'a RunOptions,
    /// The driver under test.
    pub(super) driver: &'a dyn DriverKind,
    /// The simulation the run's tasks and disks live on.
    pub sim: Sim,
    /// The group running (0 during setup, the last one at the end): where
    /// a hang or livelock is reported.
    pub(super) group: usize,
    pub(super) shared: Rc<Shared>,
    pub(super) disk: SimDisk,
    /// The external data file's disk, when the case has one: faults,
    /// reordering and crashes apply to it as to `disk`.
    pub(super) data: Option<SimDisk>,
    pub(super) backing: Option<BackingDisk>,
    pub(super) crash_rng: ChaCha8Rng,
    /// Crash states of the data file's disk: a stream of its own, so that
    /// the image disk's crash states are drawn as without a data file.
    pub(super) data_crash_rng: ChaCha8Rng,
    pub(super) crashes: u32,
    /// What the disks replaced at a crash injected and held.
    pub(super) gone: GoneDisks,
    /// The image's disk as it was when the power went, until the crash
    /// state is judged: a failed check shows the metadata dump's diff.
    pub(super) before_crash: Option<SimDisk>,
    /// The data file's disk as it was when the power went, until the
    /// crash's wrong reads are described: its log holds the writes made
    /// before the crash, which the new disk's log does not.
    pub(super) data_before_crash: Option<SimDisk>,
    /// The image as the last crash's check judged it (`None` before any
    /// crash): the clusters it leaked, counting those past its end that a
    /// refcount still claims, are the only leaks a crash-free epoch may
    /// end with. Kept as the image (its chunks shared, so cheap) and
    /// checked again only when the final check finds a leak at all, which
    /// few runs do: a checker pass after every crash was a few per cent of
    /// a campaign's time.
    pub(super) last_crash_image: Option<SparseStore>,
    /// The disk's counts when the current epoch's guest requests began.
    pub(super) epoch_start: DiskCounters,
    /// The device flushes each group ran so far issued on the image's disk:
    /// where `CrashAt::DeviceFlush` can put a crash.
    pub(super) group_flushes: Vec<u64>,
    /// The crash about to be taken came the moment a flush reached the
    /// disk (`CrashOptions::at_flush_ppm`, or a guard's).
    pub(super) at_flush: bool,
    /// The multi-step metadata operation the power cut, and its step, as
    /// the probe showed it when the power went (`engine::steps`).
    pub(super) crashed_in: Option<(engine::MetaOp, engine::Step)>,
    /// Where the step crash about to be taken landed
    /// (`StepWatch::landed`).
    pub(super) step_crash: Option<super::step_watch::StepCrash>,
    /// While the crash states of a version 2 image cut inside a snapshot
    /// operation are judged: COPIED flags missing on clusters of refcount
    /// 1 are not corruption there (`Run::crash`).
    pub(super) copied_excused: bool,
    /// The case's armed guards that have not yet taken the power with
    /// them (`CrashOptions::at_guards`).
    pub(super) armed: Vec<Guard>,
    /// Background reads of earlier groups, perhaps still in flight.
    pub(super) background: Vec<JoinHandle<()>>,
    /// Draws whether an armed guard's condition takes the power with it.
    pub(super) guard_rng: ChaCha8Rng,
    /// The case's step crash, until it lands (`CrashOptions::at_steps`).
    pub(super) step_watch: Option<super::step_watch::StepWatch>,
    /// The sweeps' read buffer, handed back after each read
    /// (`Run::read_all`, `Run::give_back`): a fresh zeroed megabyte per
    /// read was a twentieth of a campaign's time.
    pub(super) spare: RefCell<Vec<u8>>,
}

/// How a group's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum GroupEnd {
    /// Its operations ran (to completion, or to its own crash).
    Ran,
    /// An armed crash (a guard's condition arose, or an operation reached
    /// its drawn step) took the power at the next device flush, in a
    /// group with no crash of its own (`armed`).
    ArmedCrash,
    /// The executor could not go on (a hang, recorded).
    Hung,
}

/// When a group that runs one operation alone stops
/// (`Run::run_alone_group`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AloneUntil {
    /// At the operation's end.
    End,
    /// At its end, or with a step crash armed (`CrashOptions::at_steps`)
    /// at the flush after the step drawn for it.
    Armed,
    /// When the power goes: a time drawn from the crash stream, as any
    /// crash group's.
    PowerFails,
    /// Right after the group issued its n-th device flush on the image's
    /// disk, counting from 1 (`CrashAt::DeviceFlush`); at its end if it
    /// issued fewer.
    DeviceFlush(u64),
}

/// Flushes issued on `disks` so far, together.
pub(super) fn flushes_on(disks: &[SimDisk]) -> u64 {
    disks.iter().map(SimDisk::flushes).sum()
}

/// Requests that change what a disk holds (writes, zeroings, discards,
/// truncations) and flushes issued so far on `disks`: what a crash drawn
/// at an operation's start waits for (`StepWatch::at_request`).
pub(super) fn changes_on(disks: &[SimDisk]) -> u64 {
    disks.iter().map(SimDisk::changes).sum()
}

/// What a group waits for: its operations but background reads, and the
/// start of those.
pub(super) struct Foreground {
    pub(super) tasks: Vec<JoinHandle<()>>,
    pub(super) starts: Vec<Rc<Cell<bool>>>,
}

impl Foreground {
    pub(super) fn done(&self) -> bool {
        self.tasks.iter().all(|h| h.is_finished()) && self.starts.iter().all(|s| s.get())
    }
}

/// The crash substream of the data file's disk (the image disk's is 0);
/// `--driver qemu` draws its data file's crash states from it too.
pub const DATA_CRASH_STREAM: u32 = 1;
/// The substream of the crash stream that draws crashes at armed guards.
pub(super) const GUARD_CRASH_STREAM: u32 = 2;

/// What disks replaced at a crash injected and held, kept for the run's
/// report (a crash replaces each crashing disk with a new one).
#[derive(Debug, Clone, Default)]
pub(super) struct GoneDisks {
    /// The faults injected, by kind.
    pub(super) fault_kinds: FaultCounts,
    /// The requests held long (latency outliers), by rank.
    pub(super) held: Vec<HeldRequest>,
    /// The requests failed with EIO, by rank.
    pub(super) failed: Vec<NthRequest>,
    /// Device writes and write_zeroes flagged FUA.
    pub(super) fua_writes: u64,
}

impl GoneDisks {
    pub(super) fn add(&mut self, disks: &[SimDisk]) {
        self.fault_kinds.add(&fault_kinds_on(disks));
        for d in disks {
            self.held.extend(d.held_list());
            self.failed.extend(d.failed_by_rank());
            self.fua_writes += d.counters().fua_writes;
        }
    }

    /// Every fault injected: each is counted under exactly one kind.
    pub(super) fn faults(&self) -> u64 {
        self.fault_kinds.named().iter().map(|(_, n)| n).sum()
    }
}

/// The faults injected on `disks`, by kind.
pub(super) fn fault_kinds_on(disks: &[SimDisk]) -> FaultCounts {
    let mut c = FaultCounts::default();
    for d in disks {
        for f in d.injected_faults() {
            c.count(&f);
        }
    }
    c
}

/// The backing file of a run: its disk (never crashed) and its format.
pub(super) struct BackingDisk {
    pub(super) disk: SimDisk,
    pub(super) spec: BackingSpec,
}

impl BackingDisk {
    pub(super) fn disk(&self) -> &SimDisk {
        &self.disk
    }
}

impl Run<'_> {
    /// The report of a run that has ended.
    pub(super) fn report(&self) -> RunReport {
        let case = self.case;
        let trace_hash = self.sim.trace_hash();
        let mut stats = *self.shared.stats.borrow();
        let m = self.shared.model.borrow().stats();
        stats.counts.read_sectors_checked = m.read_sectors;
        stats.counts.recovered_sectors_checked = m.recovered_sectors;
        stats.counts.crashes = m.crashes;
        let mut all = self.gone.clone();
        all.add(&self.crashing_disks());
        if let Some(b) = &self.backing {
            all.held.extend(b.disk().held_list());
            all.failed.extend(b.disk().failed_by_rank());
        }
        stats.counts.faults_injected = all.faults();
        stats.fault_kinds = all.fault_kinds;
        stats.counts.held_requests = all.held.len() as u64;
        stats.counts.disk_fua_writes = all.fua_writes;
        stats.counts.polls = self.sim.steps();
        let mut failures = self.shared.failures.take();
        if case.harsh() {
            // Lost, misdirected or torn writes are beyond what qcow2 can
            // survive without checksums: only a panic or a hang is a failure;
            // what the model and the checker saw is counted, not judged.
            let before = failures.len();
            failures.retain(|f| matches!(f, Failure::Hang { .. } | Failure::Panic { .. }));
            stats.counts.harsh_findings = (before - failures.len()) as u64;
        }
        RunReport {
            seed: case.seed,
            profile: case.profile,
            schedule: case.schedule,
            failures,
            skipped: None,
            trace_hash,
            stats,
            held: all.held,
            failed: all.failed,
        }
    }
}

impl<'a> Run<'a> {
    /// A run of `case`, not yet started.
    pub fn fresh(case: &'a Case, opts: &'a RunOptions, driver: &'a dyn DriverKind) -> Run<'a> {
        // The case's schedule policy (uniform for a case saved before
        // cases recorded one, as `Sim::new`), and budgets that no run that
        // stays within them can observe.
        let sim = Sim::with_options(case.seed, case.exec_options());
        let shared = Rc::new(Shared {
            model: RefCell::new(case.model()),
            failures: RefCell::new(Vec::new()),
            stats: RefCell::new(RunStats::default()),
            snapshots: RefCell::new(Snapshots::default()),
            flags_in_doubt: Cell::new(false),
            v2: Cell::new(case.image.create.compat == engine::Compat::V2),
            amend_done: Cell::new(false),
            sectors: Cell::new(case.sectors()),
            growing: Cell::new(None),
        });
        Run {
            case,
            opts,
            driver,
            disk: SimDisk::new(&sim, crate::devices::quiet_disk())
                .expect("quiet disk options are valid"),
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
            crashed_in: None,
            step_crash: None,
            copied_excused: false,
            armed: case.disk.crash.at_guards.clone(),
            background: Vec::new(),
            guard_rng: rng::substream(case.seed, Stream::Crash, GUARD_CRASH_STREAM),
            step_watch: case.disk.crash.at_steps.then(|| {
                let v2 = case.image.create.compat == engine::Compat::V2;
                super::step_watch::StepWatch::new(case.seed, v2)
            }),
            spare: RefCell::new(Vec::new()),
        }
    }

    /// The disks that crash together: the image's and the data file's.
    pub(super) fn crashing_disks(&self) -> Vec<SimDisk> {
        std::iter::once(&self.disk)
            .chain(&self.data)
            .cloned()
            .collect()
    }

    /// Off, or back to what each disk's case options say (`true` never
    /// turns on the faults of a case whose `faults.enabled` is false: the
    /// shrinker's "no faults" step relies on it).
    pub(super) fn set_faults_enabled(&self, on: bool) {
        for d in self.crashing_disks() {
            d.set_faults_enabled(on && d.options().faults.enabled);
        }
    }

    /// The request counts of the image's disk and the data file's, together.
    pub(super) fn disk_counters(&self) -> DiskCounters {
        self.crashing_disks()
            .iter()
            .fold(DiskCounters::default(), |sum, d| sum.plus(&d.counters()))
    }

    pub(super) fn faults_so_far(&self) -> u64 {
        self.gone.faults() + faults_on(&self.crashing_disks())
    }

    /// The disk guest data lives on: the data file's, or the image's.
    pub(super) fn data_disk(&self) -> SimDisk {
        self.data.clone().unwrap_or_else(|| self.disk.clone())
    }

    /// Read `sectors` sectors from `first` through the image, faults off.
    ///
    /// The buffer is the last one given back, resized, its old bytes left
    /// in place: a read that fails to fill part of it returns another
    /// read's data there, which the model rejects, where zeroes could
    /// have passed for unwritten sectors.
    pub(super) fn read_all(
        &self,
        img: &Rc<Img>,
        first: u64,
        sectors: u64,
    ) -> Result<Vec<u8>, Failure> {
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
    pub(super) fn give_back(&self, buf: Vec<u8>) {
        *self.spare.borrow_mut() = buf;
    }
}

/// Faults injected so far on `disks`.
pub(super) fn faults_on(disks: &[SimDisk]) -> u64 {
    disks.iter().map(|d| d.fault_count() as u64).sum()
}
