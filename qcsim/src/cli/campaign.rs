//! `qcsim campaign`: many seeded cases on all cores, with a progress bar,
//! a summary, a report directory (`summary.json`, `report.md`,
//! `report.html`: see `crate::report`) under `reports/` (git-ignored) or
//! `--report DIR`, and every failing case saved to `corpus/` with the
//! command that replays it. The wall-clock progress the report charts is
//! sampled here: the harness reads no clock.

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Mutex;

use anyhow::{bail, Context};
use engine::Switches;
use sim::campaign::{run_campaign_on, CampaignPlan, SwitchPlan};

use crate::report;

use super::hint::CARGO_QCSIM;
use super::run::{save_case, BrokenArg, ProfileArg};

#[derive(clap::Args)]
pub struct Args {
    /// Seed range, as A..B (B excluded).
    #[arg(long, conflicts_with = "time")]
    pub seeds: Option<String>,
    /// Run new seeds from 0 for this long (not with --seeds): 30s, 10m,
    /// 2h.
    #[arg(long)]
    pub time: Option<String>,
    /// Worker threads, 1 to 1024 (default: all cores).
    #[arg(long, value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    #[arg(long, value_enum, default_value = "mixed")]
    pub profile: ProfileArg,
    /// Switch combination: `all`, `none`, `cycle` (seed % 32), a 5-bit
    /// mask 0..31 (bit 0 multi_cluster, 1 delayed_metadata, 2 zero_cow,
    /// 3 merge_cow, 4 delayed_cow), or `as-generated`.
    #[arg(long, default_value = "as-generated")]
    pub switches: String,
    /// Run only shard I of N (seeds with seed % N == I): I/N.
    #[arg(long, default_value = "0/1")]
    pub shard: String,
    /// Where failing cases are saved.
    #[arg(long, default_value = "corpus/failing")]
    pub corpus: PathBuf,
    /// Where the campaign's report directory is made, named for its range
    /// and shard (`campaign-A-B[-shard-I-of-N]`), unless --report names it.
    #[arg(long, default_value = "reports")]
    pub reports: PathBuf,
    /// The report directory itself: summary.json, report.md, report.html.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// A `qcsim bench --sim` JSON output to chart in the report (default:
    /// REPORTS/bench-sim.json, where `qcsim bench --sim` writes it, if it
    /// is there).
    #[arg(long, value_name = "FILE")]
    pub bench_json: Option<PathBuf>,
    /// Harsh mode: devices may tear sectors and lose or misdirect writes;
    /// only panics and hangs fail, what the judges see is counted.
    #[arg(long)]
    pub harsh: bool,
    /// Run every case on a deliberately broken disk whose flushes (and
    /// FUA writes) complete without making anything durable: the campaign
    /// must fail, which shows it can see a lost write.
    #[arg(long)]
    pub disk_ignores_flush: bool,
    /// The qcow2 driver the cases run on: qcsim's engine, or QEMU's
    /// (qemu-nbd on the simulated disk over NBD; no report directory).
    #[arg(long, value_enum, default_value = "engine")]
    pub driver: super::driver::DriverArg,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Shrink each failing case (`qcsim shrink`) before saving it.
    #[arg(long)]
    pub shrink: bool,
    #[command(flatten)]
    pub broken: BrokenArg,
}

fn parse_range(s: &str) -> anyhow::Result<std::ops::Range<u64>> {
    let (a, b) = s
        .split_once("..")
        .with_context(|| format!("--seeds {s:?}: expected A..B"))?;
    let a: u64 = a
        .trim()
        .parse()
        .with_context(|| format!("--seeds {s:?}: bad start"))?;
    let b: u64 = b
        .trim()
        .parse()
        .with_context(|| format!("--seeds {s:?}: bad end"))?;
    if a >= b {
        bail!("--seeds {s:?}: the range is empty");
    }
    Ok(a..b)
}

/// Most `--jobs`. Cases are CPU-bound (no I/O, no waiting), so jobs
/// beyond the cores only add memory (every job holds a case's simulated
/// disks) and threads; the cap is far above any core count worth using
/// and the same on every machine, so a command line that works on one
/// works on all, and it turns a typo such as 100000 into an error instead
/// of as many threads.
pub const MAX_JOBS: usize = 1024;

/// `--jobs N`: 1 to [`MAX_JOBS`].
pub fn parse_jobs(s: &str) -> Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|_| {
        format!("--jobs {s:?}: expected a number of worker threads, 1 to {MAX_JOBS}")
    })?;
    if n == 0 {
        return Err("--jobs 0: a campaign needs at least 1 worker thread".into());
    }
    if n > MAX_JOBS {
        return Err(format!(
            "--jobs {n}: at most {MAX_JOBS} worker threads (cases are CPU-bound: more jobs than cores only costs memory)"
        ));
    }
    Ok(n)
}

/// `--time`: a number and a unit (s, the default, m or h), longer than 0;
/// one whose seconds do not fit in 64 bits is refused, not wrapped.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let per_unit: u64 = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => bail!("--time {s:?}: the unit must be s, m or h"),
    };
    if num.is_empty() {
        bail!("--time {s:?}: expected a number and s, m or h (30s, 10m, 2h)");
    }
    let too_long = || anyhow::anyhow!("--time {s:?}: too long (at most {} seconds)", u64::MAX);
    let n: u64 = num.parse().map_err(|_| too_long())?;
    let secs = n.checked_mul(per_unit).ok_or_else(too_long)?;
    if secs == 0 {
        bail!("--time {s:?}: a timed campaign must run for longer than 0 seconds");
    }
    Ok(Duration::from_secs(secs))
}

pub fn parse_switches(s: &str) -> anyhow::Result<SwitchPlan> {
    Ok(match s {
        "as-generated" => SwitchPlan::AsGenerated,
        "all" => SwitchPlan::Fixed(Switches::ALL_ON),
        "none" => SwitchPlan::Fixed(Switches::ALL_OFF),
        "cycle" => SwitchPlan::Cycle,
        m => match m.parse::<u8>() {
            Ok(v) if v < 32 => SwitchPlan::Fixed(Switches::from_mask(v)),
            _ => bail!("--switches {m:?}: expected all, none, cycle, as-generated or a mask 0..31"),
        },
    })
}

/// Seconds between the progress samples a report's rate chart is drawn
/// from.
const PROGRESS_EVERY: f64 = 0.25;

/// Failing cases explained in the terminal, and lines of each: the report
/// holds them all, whole.
const FAILURES_EXPLAINED: usize = 3;
const EXPLAIN_LINES: usize = 60;

/// `--switches` as the report names it: the word given, or the mask as a
/// number (`07`, `7` and `31` are all masks; the report says `7`).
pub fn switches_name(arg: &str) -> String {
    match arg.parse::<u8>() {
        Ok(m) => m.to_string(),
        Err(_) => arg.to_string(),
    }
}

/// `--shard I/N`: shard I of N, 0 <= I < N; an error says which part is
/// wrong.
fn parse_shard(s: &str) -> anyhow::Result<(u64, u64)> {
    const EXPECTED: &str = "expected I/N, shard I of N with 0 <= I < N, such as 0/4";
    let Some((i, n)) = s.split_once('/') else {
        bail!("--shard {s:?}: {EXPECTED}");
    };
    let i: u64 = i.trim().parse().map_err(|_| {
        anyhow::anyhow!("--shard {s:?}: the shard index {i:?} is not a number; {EXPECTED}")
    })?;
    let n: u64 = n.trim().parse().map_err(|_| {
        anyhow::anyhow!("--shard {s:?}: the shard count {n:?} is not a number; {EXPECTED}")
    })?;
    if n == 0 {
        bail!("--shard {s:?}: the shard count 0 must be at least 1; {EXPECTED}");
    }
    if i >= n {
        bail!("--shard {s:?}: the shard index {i} must be below the count {n}; {EXPECTED}");
    }
    Ok((i, n))
}

/// The end (exclusive) of the seeds a timed campaign ran: it ran the first
/// `cases` seeds of its shard (one in `shard_count`) from the start of
/// `seeds`, so they all lie below `start + cases * shard_count`, and the
/// shard's next seed does not. Never past the range's end, which also keeps
/// it from overflowing at the top of the seed space.
fn timed_end(seeds: &std::ops::Range<u64>, cases: u64, shard_count: u64) -> u64 {
    cases
        .checked_mul(shard_count)
        .and_then(|span| seeds.start.checked_add(span))
        .map_or(seeds.end, |end| end.min(seeds.end))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let time_limit = args.time.as_deref().map(parse_duration).transpose()?;
    let seeds = match (&args.seeds, time_limit) {
        (Some(r), _) => parse_range(r)?,
        (None, Some(_)) => 0..u64::MAX,
        (None, None) => bail!("give --seeds A..B or --time DURATION"),
    };
    let jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_JOBS))
    });
    let plan = CampaignPlan {
        seeds: seeds.clone(),
        profile: args.profile.into(),
        switches: parse_switches(&args.switches)?,
        shard: parse_shard(&args.shard)?,
        jobs,
        harsh: args.harsh,
        disk_ignores_flush: args.disk_ignores_flush,
        broken: args.broken.variant(),
        rule_checks: true,
    };
    let broken = args.broken.variant();
    if let Some(engine) = args.driver.external() {
        if args.shrink || args.bench_json.is_some() || args.harsh {
            bail!("--shrink, --bench-json and --harsh are not for --driver qemu|imago (its cases run without injected faults, and its driver's scheduling is not seeded)");
        }
        // A report directory named for the driver too, so it never
        // overwrites the engine's campaign over the same seeds.
        let report_dir = args.report.clone().unwrap_or_else(|| {
            let shard = if plan.shard.1 > 1 {
                format!("-shard-{}-of-{}", plan.shard.0, plan.shard.1)
            } else {
                String::new()
            };
            let end = if time_limit.is_some() {
                "timed".to_string()
            } else {
                seeds.end.to_string()
            };
            args.reports.join(format!(
                "campaign-{}-{}-{end}{shard}",
                engine.name(),
                seeds.start
            ))
        });
        return super::driver::run_qemu_campaign(
            engine,
            &plan,
            &args.corpus,
            &report_dir,
            args.quiet,
            time_limit,
        );
    }
    // Read the bench rows before the cases run: a bad file fails at once.
    let bench_path = args.bench_json.clone().or_else(|| {
        let default = args.reports.join("bench-sim.json");
        default.is_file().then_some(default)
    });
    let bench = bench_path.as_deref().map(report::read_bench).transpose()?;
    // A timed campaign's length is its time: the bar counts up to it.
    let bar = match time_limit {
        Some(t) => crate::progress::bar("campaign", t.as_secs(), "s", args.quiet),
        None => crate::progress::bar(
            "campaign",
            (seeds.end - seeds.start).div_ceil(plan.shard.1),
            "cases",
            args.quiet,
        ),
    };
    let started = std::time::Instant::now();
    let out_of_time = || time_limit.is_some_and(|t| started.elapsed() >= t);
    // Cases done over wall time, for the report's rate chart: a sample at
    // most every PROGRESS_EVERY, and the last case.
    let samples: Mutex<Vec<(f64, u64)>> = Mutex::new(Vec::new());
    let driver = args.driver;
    let kind = driver
        .in_process()
        .expect("out-of-process drivers returned above");
    let summary = run_campaign_on(&plan, kind, &out_of_time, &|done, failed| {
        let now = started.elapsed().as_secs_f64();
        if time_limit.is_some() {
            bar.set_position(now as u64);
            bar.set_message(format!("{done} cases, {failed} failed"));
        } else {
            bar.set_position(done);
            bar.set_message(format!("{failed} failed"));
        }
        let mut s = samples.lock().unwrap_or_else(|e| e.into_inner());
        if s.last().is_none_or(|l| now - l.0 >= PROGRESS_EVERY) {
            s.push((now, done));
        }
    });
    bar.finish_and_clear();
    let wall_seconds = started.elapsed().as_secs_f64();
    let mut progress = samples.into_inner().unwrap_or_else(|e| e.into_inner());
    if progress.last().is_none_or(|l| l.1 != summary.cases) {
        progress.push((wall_seconds, summary.cases));
    }

    let t = &summary.totals;
    if driver == super::driver::DriverArg::Engine {
        println!(
            "campaign: {} cases, {} passed, {} failed ({} jobs)",
            summary.cases, summary.passed, summary.failed, jobs
        );
    } else {
        println!(
            "campaign ({}): {} cases, {} passed, {} failed, {} skipped ({} jobs)",
            driver.name(),
            summary.cases,
            summary.passed,
            summary.failed,
            summary.skipped,
            jobs
        );
        for (why, n) in &summary.skipped_by_reason {
            println!("skipped: {n} cases with {why} (not run on this driver)");
        }
        let skips = t.counts.driver_skips();
        if !skips.is_empty() {
            let list: Vec<String> = skips.iter().map(|(k, n)| format!("{k} {n}")).collect();
            println!(
                "operations not sent, the driver does not do them: {}",
                list.join(", ")
            );
        }
    }
    if let Some(b) = broken {
        println!("broken engine variant: {b} (failures are the point)");
    }
    println!(
        "checked: {} guest ops ({} failed by injected faults), {} read sectors, {} crash states, {} recovered sectors; {} faults injected, {} clusters leaked by crashes",
        t.counts.guest_ops, t.counts.failed_ops, t.counts.read_sectors_checked, t.counts.crash_states_checked, t.counts.recovered_sectors_checked,
        t.counts.faults_injected, t.counts.leaked_clusters
    );
    if t.counts.failed_ops > 0 {
        println!(
            "failed guest ops, each excused by a fault injected while it was in flight (by the request kind that met it) or by the image a failed metadata write poisoned: {}",
            t.excused
        );
    }
    println!(
        "crash states kept {} multi-sector device writes in part (torn at sector granularity); {} of {} crashes came the moment a flush reached the disk ({} of them the flush after an armed guard's condition arose, {} the flush after a multi-step metadata operation reached its drawn step); the engine gave up {} allocations after I/O errors and grew image files ahead of allocation {} times",
        t.counts.torn_writes,
        t.counts.crashes_at_flush,
        t.counts.crashes,
        t.counts.crashes_at_guard,
        t.counts.crashes_at_step,
        t.counts.allocs_dropped,
        t.counts.grow_requests
    );
    println!("rare paths: {}", t.rare_paths);
    println!("rare paths, cases reaching each: {}", t.rare_path_cases);
    println!("guards whose condition arose: {}", t.guards);
    println!(
        "crash points inside multi-step metadata operations: {} on version 2 images, {} on version 3, in {} cases (by operation and step: a step at 0 is a boundary no crash tested)",
        t.crash_points.v2.total(),
        t.crash_points.v3.total(),
        t.crash_point_cases
    );
    println!(
        "  version 2 (n/a: not on version 2 images): {}",
        t.crash_points.v2.show_on(true)
    );
    println!("  version 3: {}", t.crash_points.v3);
    let never = t.guards.never();
    if !never.is_empty() {
        let names: Vec<&str> = never.iter().map(|g| g.name()).collect();
        println!(
            "guards no case tested (their condition never arose): {}",
            names.join(", ")
        );
    }
    println!(
        "schedules, cases under each: {}; latency outliers in {} cases, {} requests held long",
        t.schedule_cases, t.outlier_cases, t.counts.held_requests
    );
    if t.data_file_cases > 0 {
        println!(
            "{} cases kept guest data in an external data file",
            t.data_file_cases
        );
    }
    if t.counts.snapshot_ops > 0 || t.counts.compressed_writes > 0 {
        println!(
            "snapshot operations: {} in {} cases ({} with no snapshot to pick, {} refused for narrow refcounts); compressed writes: {} in {} cases ({} refused, their cluster allocated)",
            t.counts.snapshot_ops,
            t.snapshot_cases,
            t.counts.snapshot_ops_skipped,
            t.counts.snapshot_ops_refused,
            t.counts.compressed_writes,
            t.compressed_cases,
            t.counts.compressed_refused
        );
    }
    if t.counts.resizes > 0 {
        println!(
            "resizes: {} ({} refused as QEMU refuses them); guest requests past the end a resize left, not sent: {}",
            t.counts.resizes, t.counts.resizes_refused, t.counts.ops_past_end
        );
    }
    if t.counts.amends > 0 {
        println!(
            "amends (version, lazy refcounts, refcount width): {} ({} refused as QEMU refuses them)",
            t.counts.amends, t.counts.amends_refused
        );
    }
    println!(
        "FUA requests: {} in {} of {} cases; the simulated disks saw {} FUA writes",
        t.counts.guest_fua_requests, t.fua_cases, summary.cases, t.counts.disk_fua_writes
    );
    if t.harsh_cases > 0 {
        println!(
            "harsh mode: {} cases with torn, lost or misdirected writes; {} model or checker findings there (counted, not failures)",
            t.harsh_cases, t.counts.harsh_findings
        );
    }
    if !summary.failures.is_empty() {
        std::fs::create_dir_all(&args.corpus)
            .with_context(|| format!("creating {}", args.corpus.display()))?;
    }
    let mut entries = Vec::new();
    for f in &summary.failures {
        // A foreign driver's failing cases are named for it, so that they
        // are never taken for the engine's.
        let prefix = match driver {
            super::driver::DriverArg::Engine => String::new(),
            d => format!("{}-", d.name()),
        };
        let path = args
            .corpus
            .join(format!("{prefix}seed-{}.json", f.case.seed));
        let shrunk = args.shrink.then(|| {
            sim::shrink::shrink_failing_on(&f.case, kind, &Default::default(), |_| {})
                .map(|(s, _)| s.case)
        });
        match shrunk {
            Some(Ok(case)) => save_case(&case, &path)?,
            _ => save_case(&f.case, &path)?,
        }
        let replay = format!("{} replay{} {}", CARGO_QCSIM, driver.flag(), path.display());
        println!(
            "FAIL seed {}{}: replay with: {replay}",
            f.case.seed,
            if f.deterministic {
                ""
            } else {
                " (NOT DETERMINISTIC: a second run differed)"
            },
        );
        let entry = report::summary::FailureEntry { failure: f, replay };
        // Each failure explained here (the hex diff of a wrong read, the
        // dump diff of a failed check), the first few of them; the report
        // holds all.
        if entries.len() < FAILURES_EXPLAINED {
            let text = report::explain::explain(&report::summary::failure_json(&entry)?);
            for line in text.lines().skip(1).take(EXPLAIN_LINES) {
                println!("    {line}");
            }
        } else if entries.len() == FAILURES_EXPLAINED {
            println!("    (later failures are explained in the report)");
        }
        entries.push(entry);
    }
    println!("trace hash: {:016x}", summary.trace_hash);
    let end = if time_limit.is_some() {
        timed_end(&seeds, summary.cases, plan.shard.1)
    } else {
        seeds.end
    };
    let campaign = report::summary::campaign_json(
        &plan,
        (seeds.start, end),
        &switches_name(&args.switches),
        broken.map(|b| b.name()),
    );
    let timing = report::summary::Timing {
        jobs,
        wall_seconds,
        progress,
    };
    let mut summary_json = report::summary::build(campaign, &summary, &entries, &timing)?;
    if driver != super::driver::DriverArg::Engine {
        // Only a foreign driver's report says so: the engine's stays as
        // it was.
        summary_json["campaign"]["driver"] = driver.name().into();
        summary_json["result"]["skipped"] = summary.skipped.into();
        summary_json["result"]["skipped_by_reason"] =
            serde_json::to_value(&summary.skipped_by_reason)?;
    }
    // The default directory's name says the range and shard, so shards of
    // one range do not overwrite each other's reports.
    let dir = args.report.clone().unwrap_or_else(|| {
        let shard = if plan.shard.1 > 1 {
            format!("-shard-{}-of-{}", plan.shard.0, plan.shard.1)
        } else {
            String::new()
        };
        let name = match driver {
            super::driver::DriverArg::Engine => String::new(),
            d => format!("{}-", d.name()),
        };
        args.reports
            .join(format!("campaign-{name}{}-{end}{shard}", seeds.start))
    });
    report::write_report(&dir, &summary_json, bench.as_deref())?;
    println!("report: {}", dir.join(report::HTML).display());
    Ok(if summary.failed == 0 { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timed_campaigns_end_stays_in_its_range() {
        assert_eq!(timed_end(&(10..100), 0, 1), 10);
        assert_eq!(timed_end(&(10..100), 5, 1), 15);
        assert_eq!(timed_end(&(10..100), 5, 4), 30);
        assert_eq!(timed_end(&(10..100), 90, 1), 100);
        assert_eq!(timed_end(&(10..100), 30, 4), 100, "clamped to the end");
        let top = u64::MAX - 10..u64::MAX;
        assert_eq!(timed_end(&top, 1, 1000), u64::MAX, "the sum overflows");
        assert_eq!(
            timed_end(&top, u64::MAX, 2),
            u64::MAX,
            "the product overflows"
        );
        assert_eq!(timed_end(&(0..u64::MAX), 3, 1), 3);
    }
}
