//! Campaigns: many seeded cases on all cores. Each worker thread builds
//! and runs its cases alone (a run is single-threaded and deterministic);
//! results come back in any order and are summed, and every failing case
//! is run a second time to prove it replays to the same trace hash.

use std::collections::BTreeMap;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

use engine::Switches;
use serde::Serialize;

use crate::case::Case;
use crate::driver::{DriverKind, EngineDriver};
use crate::exec::ScheduleMode;
use crate::runner::{run_case_on, Failure, RunOptions, RunReport, RunStats};
use crate::workload::Profile;

/// Which switch combination each case runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SwitchPlan {
    /// The case generator's choice (all on unless the case says otherwise).
    AsGenerated,
    /// One combination for every case.
    Fixed(Switches),
    /// Combination `seed % 32`: every combination, in turn.
    Cycle,
}

impl SwitchPlan {
    pub fn apply(&self, case: &mut Case) {
        match *self {
            SwitchPlan::AsGenerated => {}
            SwitchPlan::Fixed(s) => case.engine.switches = s,
            SwitchPlan::Cycle => case.engine.switches = Switches::from_mask((case.seed % 32) as u8),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CampaignPlan {
    pub seeds: Range<u64>,
    pub profile: Profile,
    pub switches: SwitchPlan,
    /// Run only seeds with `seed % shard.1 == shard.0`.
    pub shard: (u64, u64),
    pub jobs: usize,
    /// Draw every case's device in harsh mode (torn sectors, lost and
    /// misdirected writes may be on): only panics and hangs fail.
    pub harsh: bool,
    /// Run every case on a deliberately broken disk whose flushes and FUA
    /// make nothing durable (`FaultOptions::ignores_flush`): the campaign
    /// must fail, which shows it sees lost writes.
    pub disk_ignores_flush: bool,
    /// Run every case with this deliberately broken engine variant, to see
    /// how soon the campaign catches it.
    pub broken: Option<engine::options::Broken>,
    /// Debug builds assert the crash rules in the engine
    /// (`EngineOptions::rule_checks`), so a broken variant panics naming
    /// its rule; off, the harness must catch it alone (its own tests).
    pub rule_checks: bool,
}

impl CampaignPlan {
    /// The default campaign over `seeds` (`qcsim campaign --seeds S` with
    /// no other flag) on one job: change fields with struct update syntax
    /// (`CampaignPlan { broken, ..CampaignPlan::new(0..500) }`).
    pub fn new(seeds: Range<u64>) -> Self {
        CampaignPlan {
            seeds,
            profile: Profile::Mixed,
            switches: SwitchPlan::AsGenerated,
            shard: (0, 1),
            jobs: 1,
            harsh: false,
            disk_ignores_flush: false,
            broken: None,
            rule_checks: true,
        }
    }
}

/// One failing case, with its verdict and whether it replayed.
#[derive(Debug, Clone, Serialize)]
pub struct CaseFailure {
    pub case: Case,
    pub report: RunReport,
    /// The second run's trace hash equals the first's.
    pub deterministic: bool,
}

/// The sum of a campaign.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CampaignSummary {
    pub cases: u64,
    pub passed: u64,
    pub failed: u64,
    /// Cases not run because the driver under test cannot run their
    /// image at all (`DriverKind::refuses`), counted in `cases` but in
    /// neither `passed` nor `failed`; by reason in `skipped_by_reason`.
    pub skipped: u64,
    pub skipped_by_reason: BTreeMap<String, u64>,
    /// Every case's trace hash combined in seed order ([`combined_trace_hash`]):
    /// two campaigns over the same seeds with equal hashes ran every case
    /// alike, which is how a refactor proves it changed no behaviour.
    #[serde(serialize_with = "hex_u64")]
    pub trace_hash: u64,
    pub totals: Totals,
    /// The same counts by the profile that generated each case (a mixed
    /// campaign's cases by the profile the seed chose), by name.
    pub per_profile: BTreeMap<String, Slice>,
    /// The same counts by switch combination, by its 5-bit mask as two
    /// digits (`00` all off .. `31` all on), so keys sort as numbers.
    pub per_switches: BTreeMap<String, Slice>,
    #[serde(skip)]
    pub failures: Vec<CaseFailure>,
    /// Every case's `(seed, trace hash)`, in seed order: what
    /// [`combined_trace_hash`] was taken over, kept so that reports of
    /// shards merge into the hash of one campaign over the whole range.
    #[serde(skip)]
    pub case_hashes: Vec<(u64, u64)>,
}

/// A part of a campaign: its cases' verdicts and counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Slice {
    pub cases: u64,
    pub passed: u64,
    pub failed: u64,
    pub totals: Totals,
}

impl Slice {
    fn add(&mut self, case: &Case, report: &RunReport) {
        self.cases += 1;
        if report.passed() {
            self.passed += 1;
        } else {
            self.failed += 1;
        }
        self.totals.add_case(case, report);
    }
}

/// The key of a switch combination in [`CampaignSummary::per_switches`].
pub fn switches_key(s: Switches) -> String {
    format!("{:02}", s.mask())
}

fn hex_u64<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{v:016x}"))
}

/// One hash over `(seed, trace hash)` pairs, taken in seed order whatever
/// order the workers finished in, so the figure depends only on what each
/// case did. A case that panicked contributes hash 0, as its report says.
pub fn combined_trace_hash(per_case: &mut [(u64, u64)]) -> u64 {
    per_case.sort_unstable();
    let mut h = crate::trace::TraceHasher::new();
    h.event("campaign");
    for &(seed, hash) in per_case.iter() {
        h.write_u64(seed);
        h.write_u64(hash);
    }
    h.finish()
}

/// Counts summed over every case.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Totals {
    /// The runs' plain counts, summed (flattened into the JSON under their
    /// own names).
    #[serde(flatten)]
    pub counts: crate::runner::RunCounts,
    /// The failed operations by the fault (or poisoned image) that
    /// explains each.
    pub excused: crate::runner::ExcusedErrors,
    /// How often each of the engine's rare paths ran, over every case.
    pub rare_paths: engine::RarePaths,
    /// How many cases ran each rare path at least once.
    pub rare_path_cases: engine::RarePaths,
    /// How often each of the engine's guards had its condition arise, over
    /// every case: a guard at 0 is one no case tested.
    pub guards: engine::GuardCounts,
    /// How many cases had each guard's condition arise at least once.
    pub guard_cases: engine::GuardCounts,
    /// The crashes that cut a multi-step metadata operation, by operation
    /// and step, apart by the image's version: a step at 0 is a boundary
    /// no crash tested.
    pub crash_points: crate::runner::CrashPointsByVersion,
    /// Cases with at least one such crash.
    pub crash_point_cases: u64,
    /// The injected faults by kind.
    pub fault_kinds: crate::disk::FaultCounts,
    /// How many cases met each fault kind at least once.
    pub fault_kind_cases: crate::disk::FaultCounts,
    /// What the seeds' optimisations did, from each case's last epoch
    /// (open to close, or to its last crash).
    pub optimisations: engine::Optimisations,
    /// Cases run in harsh mode.
    pub harsh_cases: u64,
    /// Cases whose image keeps its data in an external data file.
    pub data_file_cases: u64,
    /// Cases by the schedule policy they ran under (`Case::schedule`).
    pub schedule_cases: ScheduleCases,
    /// Cases whose disks may hold requests (latency outliers).
    pub outlier_cases: u64,
    /// Cases that ran a snapshot operation.
    pub snapshot_cases: u64,
    /// Cases that issued a compressed write.
    pub compressed_cases: u64,
    /// Cases that issued a FUA request.
    pub fua_cases: u64,
}

/// Cases counted by schedule mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ScheduleCases {
    pub random: u64,
    pub pct: u64,
    pub starve: u64,
}

impl ScheduleCases {
    pub fn add(&mut self, mode: ScheduleMode) {
        *self.get_mut(mode) += 1;
    }

    fn get_mut(&mut self, mode: ScheduleMode) -> &mut u64 {
        match mode {
            ScheduleMode::Random => &mut self.random,
            ScheduleMode::Pct => &mut self.pct,
            ScheduleMode::Starve => &mut self.starve,
        }
    }
}

impl std::fmt::Display for ScheduleCases {
    /// `random 700, pct 650, starve 650`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "random {}, pct {}, starve {}",
            self.random, self.pct, self.starve
        )
    }
}

impl Totals {
    /// Add one case: its run's counts and what the case itself says.
    fn add_case(&mut self, case: &Case, report: &RunReport) {
        self.add(&report.stats);
        self.harsh_cases += u64::from(case.harsh());
        self.data_file_cases += u64::from(case.image.data_file.is_some());
        self.schedule_cases.add(case.schedule.mode());
        self.outlier_cases += u64::from(case.disk.latency.outliers.any());
    }

    fn add(&mut self, s: &RunStats) {
        self.counts.add(&s.counts);
        self.snapshot_cases += u64::from(s.counts.snapshot_ops > 0);
        self.compressed_cases += u64::from(s.counts.compressed_writes > 0);
        self.fua_cases += u64::from(s.counts.guest_fua_requests > 0);
        self.excused.add(&s.excused);
        self.rare_paths.add(&s.rare_paths);
        self.rare_path_cases
            .add(&engine::RarePaths::reached(&s.rare_paths));
        self.guards.add(&s.guards);
        self.guard_cases
            .add(&engine::GuardCounts::reached(&s.guards));
        self.crash_points.add(&s.crash_points);
        self.crash_point_cases += u64::from(s.crash_points.total() > 0);
        self.fault_kinds.add(&s.fault_kinds);
        self.fault_kind_cases
            .add(&crate::disk::FaultCounts::reached(&s.fault_kinds));
        self.optimisations.add(&s.engine.optimisations());
    }
}

/// Build the case of `seed` under the plan.
pub fn case_for(plan: &CampaignPlan, seed: u64) -> Case {
    let mut case = Case::generate(seed, plan.profile);
    plan.switches.apply(&mut case);
    if plan.harsh {
        case.disk = crate::disk::DiskOptions::swarm(seed, true);
    }
    if plan.disk_ignores_flush {
        case.disk.faults.ignores_flush = true;
    }
    set_broken(&mut case, plan.broken);
    case.engine.rule_checks = plan.rule_checks;
    case
}

/// Run `case` with broken variant `broken`, if one is given: the one
/// place a campaign's or a single run's `--broken` reaches a case.
pub fn set_broken(case: &mut Case, broken: Option<engine::options::Broken>) {
    if broken.is_some() {
        case.engine.broken = broken;
    }
}

/// Run a case, turning a panic into a failure.
pub fn run_guarded(case: &Case) -> RunReport {
    run_guarded_on(case, &EngineDriver)
}

/// [`run_guarded`] with `driver` in place of qcsim's engine
/// (`crate::driver`): a panic inside the driver is that case's failure.
pub fn run_guarded_on(case: &Case, driver: &dyn DriverKind) -> RunReport {
    run_guarded_with(case, &RunOptions::default(), driver)
}

/// [`run_guarded_on`] with `opts` (an export directory): what `qcsim run`
/// and `replay` run a foreign driver's case with.
pub fn run_guarded_with(case: &Case, opts: &RunOptions, driver: &dyn DriverKind) -> RunReport {
    let run = || run_case_on(case, opts, driver, &mut |_, _| {}).0;
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(r) => r,
        Err(p) => {
            let message = panic_message(p.as_ref());
            RunReport {
                seed: case.seed,
                profile: case.profile,
                schedule: case.schedule,
                failures: vec![Failure::Panic { message }],
                skipped: None,
                trace_hash: 0,
                stats: RunStats::default(),
                held: Vec::new(),
                failed: Vec::new(),
            }
        }
    }
}

/// The message a caught panic carries.
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Run the plan; `progress` is called after each case with (done, failed).
/// Workers start no new case once `should_stop` says so: that is how a
/// caller bounds a campaign by wall-clock time (a campaign's length, never
/// a case's content), which this crate never reads itself.
pub fn run_campaign(
    plan: &CampaignPlan,
    should_stop: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(u64, u64) + Sync),
) -> CampaignSummary {
    run_campaign_on(plan, &EngineDriver, should_stop, progress)
}

/// [`run_campaign`] with `driver` in place of qcsim's engine: the same
/// cases, schedules, crashes, model and checker, every case on `driver`
/// (shared by the workers, so `Sync`; each case opens its own images).
/// How a driver from outside this repository runs qcsim's campaigns:
/// docs/driver-guide.md.
pub fn run_campaign_on(
    plan: &CampaignPlan,
    driver: &(dyn DriverKind + Sync),
    should_stop: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(u64, u64) + Sync),
) -> CampaignSummary {
    // No seed is in shard `i` of `n` when `i >= n`, and `n == 0` would
    // divide by zero in the workers: such a plan runs nothing, at once,
    // rather than panic or walk the whole range.
    if plan.shard.1 == 0 || plan.shard.0 >= plan.shard.1 {
        return CampaignSummary::default();
    }
    let next = AtomicU64::new(plan.seeds.start);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<(Case, RunReport)>();
    let mut summary = CampaignSummary::default();
    let mut hashes: Vec<(u64, u64)> = Vec::new();
    std::thread::scope(|scope| {
        for _ in 0..plan.jobs.max(1) {
            let tx = tx.clone();
            let (next, stop) = (&next, &stop);
            scope.spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if should_stop() {
                    break;
                }
                // Take the next seed only while one is left: the counter
                // never moves past the range's end, so it cannot wrap
                // (a `fetch_add` past `u64::MAX` went back to 0 and the
                // workers ran seeds outside the range forever).
                let end = plan.seeds.end;
                let Ok(seed) = next.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                    (s < end).then(|| s + 1)
                }) else {
                    break;
                };
                if seed % plan.shard.1 != plan.shard.0 {
                    continue;
                }
                let case = case_for(plan, seed);
                let report = run_guarded_on(&case, driver);
                if tx.send((case, report)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (case, report) in rx {
            summary.cases += 1;
            hashes.push((case.seed, report.trace_hash));
            summary.totals.add_case(&case, &report);
            let profile = case.profile.map_or("none", |p| p.name());
            summary
                .per_profile
                .entry(profile.to_string())
                .or_default()
                .add(&case, &report);
            summary
                .per_switches
                .entry(switches_key(case.engine.switches))
                .or_default()
                .add(&case, &report);
            if let Some(why) = &report.skipped {
                summary.skipped += 1;
                *summary.skipped_by_reason.entry(why.clone()).or_default() += 1;
            } else if report.passed() {
                summary.passed += 1;
            } else {
                summary.failed += 1;
                // A failure must replay: run it again and compare.
                let again = run_guarded_on(&case, driver);
                let deterministic =
                    again.trace_hash == report.trace_hash && again.failures == report.failures;
                summary.failures.push(CaseFailure {
                    case,
                    report,
                    deterministic,
                });
            }
            progress(summary.cases, summary.failed);
        }
        stop.store(true, Ordering::Relaxed);
    });
    summary.failures.sort_by_key(|f| f.case.seed);
    summary.trace_hash = combined_trace_hash(&mut hashes);
    summary.case_hashes = hashes;
    summary
}
