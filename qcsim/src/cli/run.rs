//! `qcsim run --seed N [--profile P]`: one case from a seed; prints the
//! verdict and the trace hash, and saves the case when it fails.

use std::path::PathBuf;

use sim::case::Case;
use sim::runner::{run_case, RunOptions, RunReport};
use sim::workload::Profile;

#[derive(clap::Args)]
pub struct Args {
    /// The case seed.
    #[arg(long)]
    pub seed: u64,
    /// Workload profile.
    #[arg(long, value_enum, default_value = "mixed")]
    pub profile: ProfileArg,
    /// Write each post-crash image and the final image, with verdicts, here.
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// Save the case as JSON to this file (whatever the verdict).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Print the case and the run's counts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Profiles as the command line spells them.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum ProfileArg {
    Mixed,
    Random,
    Sequential,
    Iozone,
    Bench,
    Mkfs,
    Backing,
}

impl From<ProfileArg> for Profile {
    fn from(p: ProfileArg) -> Profile {
        match p {
            ProfileArg::Mixed => Profile::Mixed,
            ProfileArg::Random => Profile::Random,
            ProfileArg::Sequential => Profile::Sequential,
            ProfileArg::Iozone => Profile::Iozone,
            ProfileArg::Bench => Profile::Bench,
            ProfileArg::Mkfs => Profile::Mkfs,
            ProfileArg::Backing => Profile::Backing,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let case = Case::generate(args.seed, args.profile.into());
    if let Some(p) = &args.save {
        case.save(p)?;
    }
    let report = run_case(
        &case,
        &RunOptions {
            export: args.export.clone(),
        },
    );
    print_report(&report, args.json);
    Ok(if report.passed() { 0 } else { 1 })
}

/// The verdict, the counts and the trace hash, as `run` and `replay` print
/// them. A closed stdout (`| head`) is not an error worth a panic.
pub fn print_report(report: &RunReport, json: bool) {
    use std::fmt::Write as _;
    use std::io::Write as _;
    let mut out = String::new();
    if json {
        out = serde_json::to_string_pretty(report).unwrap_or_default();
        out.push('\n');
    } else {
        let s = &report.stats;
        let profile = report.profile.map(|p| p.name()).unwrap_or("custom");
        let verdict = if report.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(out, "seed {} ({profile}): {verdict}", report.seed);
        let _ = writeln!(
            out,
            "  ops {} (writes {}, reads {}, flushes {}, failed {}), faults injected {}",
            s.guest_ops,
            s.guest_writes,
            s.guest_reads,
            s.guest_flushes,
            s.failed_ops,
            s.faults_injected
        );
        let _ = writeln!(
            out,
            "  checked: {} read sectors, {} crash states, {} recovered sectors; leaked clusters {}",
            s.read_sectors_checked,
            s.crash_states_checked,
            s.recovered_sectors_checked,
            s.leaked_clusters
        );
        // What the optimisations did in the last epoch (each crash starts
        // the image and disk afresh), from open to before close.
        let (e, d) = (&s.engine, &s.epoch_disk);
        let per = |a: u64, b: u64| {
            if b == 0 {
                "-".to_string()
            } else {
                format!("{:.3}", a as f64 / b as f64)
            }
        };
        let _ = writeln!(
            out,
            "  last epoch: device writes per guest write {}, device bytes per guest byte {}, device flushes per guest flush {}",
            per(d.writes + d.write_zeroes, e.guest_writes + e.guest_zero_writes),
            per(d.write_bytes, e.guest_bytes_written),
            per(d.flushes, e.guest_flushes),
        );
        let _ = writeln!(
            out,
            "  last epoch: {}; allocations given up {}",
            sim::runner::cow_summary(e),
            s.allocs_dropped,
        );
        for f in &report.failures {
            let _ = writeln!(out, "  {f}");
        }
        let _ = writeln!(out, "trace hash: {:016x}", report.trace_hash);
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}
