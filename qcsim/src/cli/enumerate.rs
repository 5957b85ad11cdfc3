//! `qcsim enumerate [--seed N] [--cap K] [--case FILE] [--at-flush N]`:
//! every crash state of a small workload's crash point, each reopened,
//! checked and read whole against the model.

use std::path::PathBuf;

use sim::case::{Case, Op};
use sim::runner::{enumerate_crash_states_at, CrashAt, EnumerateOptions, Granularity};

use super::run::{load_case, save_case, ProfileArg};

#[derive(clap::Args)]
pub struct Args {
    /// Seed of the generated workload (ignored with --case).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Workload profile of the generated case.
    #[arg(long, value_enum, default_value = "random")]
    pub profile: ProfileArg,
    /// Concurrency groups the generated case keeps; the crash comes during
    /// the last of them.
    #[arg(long, default_value_t = 3)]
    pub groups: usize,
    /// A saved case instead: its first crash point is enumerated.
    #[arg(long)]
    pub case: Option<PathBuf>,
    /// Most crash states checked.
    #[arg(long, default_value_t = 256)]
    pub cap: u64,
    /// sector (each sector on its own), write (each device write whole or
    /// not at all), or auto (sector when every state fits under the cap).
    #[arg(long, value_enum, default_value = "auto")]
    pub granularity: GranularityArg,
    /// Crash just after the crash group's N-th device flush was issued
    /// (from 1), instead of at the time the case's crash stream draws: the
    /// crash points `qcsim exhaust` names.
    #[arg(long)]
    pub at_flush: Option<u64>,
    /// Save the enumerated case as JSON here.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum GranularityArg {
    Auto,
    Sector,
    Write,
}

/// A small case from a seed: the profile's first `groups` groups with its
/// crash points and injected faults removed, and one crash during the last
/// group, so that the only thing enumerated is the crash itself.
pub fn small_case(seed: u64, profile: ProfileArg, groups: usize) -> Case {
    let mut case = Case::generate(seed, profile.into());
    case.disk.faults.enabled = false;
    for ops in &mut case.workload {
        ops.retain(|op| !matches!(op, Op::Crash));
    }
    case.workload.retain(|ops| !ops.is_empty());
    case.workload.truncate(groups.max(1));
    match case.workload.last_mut() {
        Some(last) => last.push(Op::Crash),
        None => case.workload.push(vec![Op::Crash]),
    }
    case
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let case = match &args.case {
        Some(p) => load_case(p)?,
        None => small_case(args.seed, args.profile, args.groups),
    };
    case.validate()?;
    if let Some(p) = &args.save {
        save_case(&case, p)?;
    }
    let granularity = match args.granularity {
        GranularityArg::Auto => Granularity::Auto,
        GranularityArg::Sector => Granularity::Sector,
        GranularityArg::Write => Granularity::Write,
    };
    let at = args.at_flush.map_or(CrashAt::Drawn, CrashAt::DeviceFlush);
    // The states' number is known only once the crash point is reached;
    // the cap bounds it.
    let bar = crate::progress::bar("enumerate", args.cap, "crash states (at most)", false);
    let report = enumerate_crash_states_at(
        &case,
        at,
        &EnumerateOptions {
            granularity,
            cap: args.cap,
        },
        &mut |_| {
            bar.inc(1);
            true
        },
    );
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(if report.passed() { 0 } else { 1 });
    }
    println!("enumerate: {}", case.summary());
    for f in &report.prefix_failures {
        println!("  before the crash point: {f}");
    }
    let total = report
        .total
        .map_or_else(|| "more than 2^64".to_string(), |t| t.to_string());
    println!(
        "crash point in group {}: {} pending device writes over {} sectors; {total} states by {:?}",
        report.group, report.pending_writes, report.touched_sectors, report.granularity
    );
    println!(
        "checked {} crash states{} ({} recovered sectors): {} failed",
        report.checked,
        if report.is_truncated() {
            format!(" (capped at {}: not exhaustive)", args.cap)
        } else {
            " (exhaustive)".to_string()
        },
        report.recovered_sectors_checked,
        report.failing.len()
    );
    for s in report.failing.iter().take(5) {
        println!("  state {}:", s.index);
        for f in &s.failures {
            for line in f.to_string().lines().take(12) {
                println!("    {line}");
            }
        }
    }
    Ok(if report.passed() { 0 } else { 1 })
}
