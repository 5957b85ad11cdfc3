//! `qcsim campaign`: many seeded cases on all cores, with a progress bar,
//! a summary, a report under `reports/` (git-ignored), and every failing case saved to
//! `corpus/` with the command that replays it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use engine::Switches;
use indicatif::{ProgressBar, ProgressStyle};
use sim::campaign::{run_campaign, CampaignPlan, SwitchPlan};

use super::run::{cargo_qcsim, save_case, BrokenArg, ProfileArg};

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
    /// Where the campaign report (JSON) is written.
    #[arg(long, default_value = "reports")]
    pub reports: PathBuf,
    /// Harsh mode: devices may tear sectors and lose or misdirect writes;
    /// only panics and hangs fail, what the judges see is counted.
    #[arg(long)]
    pub harsh: bool,
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
        #[cfg(feature = "broken")]
        broken: args.broken.variant(),
    };
    let broken = args.broken.variant();
    let bar = if args.quiet || time_limit.is_some() {
        ProgressBar::hidden()
    } else {
        let n = (seeds.end - seeds.start).div_ceil(plan.shard.1);
        ProgressBar::new(n)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} cases, {msg} [{elapsed_precise}, eta {eta}]",
        )
        .expect("valid template"),
    );
    let started = std::time::Instant::now();
    let out_of_time = || time_limit.is_some_and(|t| started.elapsed() >= t);
    let summary = run_campaign(&plan, &out_of_time, &|done, failed| {
        bar.set_position(done);
        bar.set_message(format!("{failed} failed"));
    });
    bar.finish_and_clear();

    let t = &summary.totals;
    println!(
        "campaign: {} cases, {} passed, {} failed ({} jobs)",
        summary.cases, summary.passed, summary.failed, jobs
    );
    if let Some(b) = broken {
        println!("broken engine variant: {b} (failures are the point)");
    }
    println!(
        "checked: {} guest ops ({} failed by injected faults), {} read sectors, {} crash states, {} recovered sectors; {} faults injected, {} clusters leaked by crashes",
        t.guest_ops, t.failed_ops, t.read_sectors_checked, t.crash_states_checked, t.recovered_sectors_checked,
        t.faults_injected, t.leaked_clusters
    );
    if t.failed_ops > 0 {
        println!(
            "failed guest ops, each excused by a fault injected while it was in flight (by the request kind that met it) or by the image a failed metadata write poisoned: {}",
            t.excused
        );
    }
    println!(
        "crash states kept {} multi-sector device writes in part (torn at sector granularity); the engine gave up {} allocations after I/O errors and grew image files ahead of allocation {} times",
        t.torn_writes, t.allocs_dropped, t.grow_requests
    );
    println!("rare paths: {}", t.rare_paths);
    println!("rare paths, cases reaching each: {}", t.rare_path_cases);
    println!(
        "schedules, cases under each: {}; latency outliers in {} cases, {} requests held long",
        t.schedule_cases, t.outlier_cases, t.held_requests
    );
    if t.data_file_cases > 0 {
        println!(
            "{} cases kept guest data in an external data file",
            t.data_file_cases
        );
    }
    if t.harsh_cases > 0 {
        println!(
            "harsh mode: {} cases with torn, lost or misdirected writes; {} model or checker findings there (counted, not failures)",
            t.harsh_cases, t.harsh_findings
        );
    }
    if !summary.failures.is_empty() {
        std::fs::create_dir_all(&args.corpus)
            .with_context(|| format!("creating {}", args.corpus.display()))?;
    }
    for f in &summary.failures {
        let path = args.corpus.join(format!("seed-{}.json", f.case.seed));
        let shrunk = args.shrink.then(|| {
            sim::shrink::shrink_failing(&f.case, &Default::default(), |_| {}).map(|(s, _)| s.case)
        });
        match shrunk {
            Some(Ok(case)) => save_case(&case, &path)?,
            _ => save_case(&f.case, &path)?,
        }
        println!(
            "FAIL seed {}{}: replay with: {} replay {}",
            f.case.seed,
            if f.deterministic {
                ""
            } else {
                " (NOT DETERMINISTIC: a second run differed)"
            },
            cargo_qcsim(broken.is_some()),
            path.display()
        );
        for fail in f.report.failures.iter().take(3) {
            for line in fail.to_string().lines().take(12) {
                println!("    {line}");
            }
        }
    }
    println!("trace hash: {:016x}", summary.trace_hash);
    let end = if time_limit.is_some() {
        timed_end(&seeds, summary.cases, plan.shard.1)
    } else {
        seeds.end
    };
    let report = serde_json::json!({
        "revision": env!("QCSIM_REVISION"),
        "seeds": [seeds.start, end],
        "profile": plan.profile.name(),
        "switches": args.switches,
        "harsh": plan.harsh,
        "broken": broken.map(|b| b.name()),
        "shard": [plan.shard.0, plan.shard.1],
        "trace_hash": format!("{:016x}", summary.trace_hash),
        "summary": summary,
        "failing_seeds": summary.failures.iter().map(|f| f.case.seed).collect::<Vec<_>>(),
    });
    // The name says the range and shard, so shards of one range do not
    // overwrite each other's reports.
    let shard = if plan.shard.1 > 1 {
        format!("-shard-{}-of-{}", plan.shard.0, plan.shard.1)
    } else {
        String::new()
    };
    let rpath = args
        .reports
        .join(format!("campaign-{}-{end}{shard}.json", seeds.start));
    std::fs::create_dir_all(&args.reports)
        .with_context(|| format!("creating the report directory {}", args.reports.display()))?;
    std::fs::write(&rpath, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing the campaign report {}", rpath.display()))?;
    println!("report: {}", rpath.display());
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
