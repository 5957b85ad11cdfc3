//! `qcsim run --seed N [--profile P]`: one case from a seed; prints the
//! verdict and the trace hash, and saves the case when it fails.

use std::path::{Path, PathBuf};

use anyhow::Context;
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
    /// Run on a deliberately broken disk whose flushes (and FUA writes)
    /// complete without making anything durable.
    #[arg(long)]
    pub disk_ignores_flush: bool,
    /// The qcow2 driver the case runs on: qcsim's engine, or QEMU's
    /// (qemu-nbd on the simulated disk over NBD; see the README for what
    /// differs).
    #[arg(long, value_enum, default_value = "engine")]
    pub driver: super::driver::DriverArg,
    /// With --driver qemu: where a failing case's directory is kept.
    #[arg(long, default_value = "corpus/failing")]
    pub corpus: PathBuf,
    #[command(flatten)]
    pub broken: BrokenArg,
}

/// `--broken VARIANT`: run with one of the engine's deliberately broken
/// variants.
#[derive(clap::Args, Default)]
pub struct BrokenArg {
    /// Run with this deliberately broken engine variant, one per guard of
    /// the engine (ARCHITECTURE.md, "Guards"), e.g. reuse-before-durable,
    /// to see the harness catch it; an unknown name is refused with the
    /// list of them all.
    #[arg(long, value_name = "VARIANT")]
    pub broken: Option<engine::options::Broken>,
}

impl BrokenArg {
    /// The variant asked for.
    pub fn variant(&self) -> Option<engine::options::Broken> {
        self.broken
    }

    /// Put the variant into `case`.
    pub fn apply(&self, case: &mut Case) {
        sim::campaign::set_broken(case, self.broken);
    }
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
    let mut case = Case::generate(args.seed, args.profile.into());
    args.broken.apply(&mut case);
    if args.disk_ignores_flush {
        case.disk.faults.ignores_flush = true;
    }
    if let Some(p) = &args.save {
        save_case(&case, p)?;
    }
    if let Some(engine) = args.driver.external() {
        let report = super::driver::run_qemu(&case, &args.corpus, engine)?;
        super::driver::print_qemu_report(&report, engine);
        return Ok(if report.passed() { 0 } else { 1 });
    }
    let export = prepare_export(args.export.as_deref())?;
    let opts = RunOptions {
        export: args.export.clone(),
    };
    let report = match args.driver {
        super::driver::DriverArg::Engine => run_case(&case, &opts),
        d => run_in_process(&case, &opts, d),
    };
    print_report(&report, args.json);
    report_export(export.as_ref(), &case, args.json);
    Ok(if report.passed() { 0 } else { 1 })
}

/// `case` on in-process driver `d` other than the engine, a panic inside
/// it caught as the case's failure (the engine's runs are not guarded, so
/// that a panic of the engine shows its backtrace).
pub fn run_in_process(
    case: &Case,
    opts: &RunOptions,
    d: super::driver::DriverArg,
) -> sim::runner::RunReport {
    let kind = d
        .in_process()
        .expect("out-of-process drivers are run before this");
    sim::campaign::run_guarded_with(case, opts, kind)
}

/// Write `case` to `path`, saying so if it cannot be written. (The case
/// type's own `save` reports a failure as "reading case file", and repeats
/// the OS error.)
pub fn save_case(case: &Case, path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, case.to_json())
        .with_context(|| format!("could not write the case to {}", path.display()))
}

/// Read and validate the case saved at `path`.
pub fn load_case(path: &Path) -> anyhow::Result<Case> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("could not read the case from {}", path.display()))?;
    // The error's own text, not a chain: the case errors repeat their
    // source in their message.
    Case::from_json(&text)
        .map_err(|e| anyhow::anyhow!("{}: not a usable case: {e}", path.display()))
}

/// Where `--export` goes, made before the run.
pub struct Export {
    dir: PathBuf,
    created: bool,
}

/// Make the `--export` directory (and its parents) before the run, as a
/// user asking for files there expects, so that one that cannot be made
/// (a file stands in the way, no permission) is an error before anything
/// runs, not a warning per image afterwards.
pub fn prepare_export(dir: Option<&Path>) -> anyhow::Result<Option<Export>> {
    let Some(dir) = dir else {
        return Ok(None);
    };
    if dir.exists() && !dir.is_dir() {
        anyhow::bail!(
            "--export {}: it exists and is not a directory",
            dir.display()
        );
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--export {}: cannot make the directory", dir.display()))?;
    Ok(Some(Export {
        dir: dir.to_owned(),
        created,
    }))
}

/// Say where the run's images went: the runner writes them into a
/// directory of the case's seed under the export directory. On standard
/// error with `--json`, so standard output stays one JSON document.
pub fn report_export(export: Option<&Export>, case: &Case, json: bool) {
    let Some(e) = export else {
        return;
    };
    // The runner's naming (sim::runner, `export_dir`).
    let seed_dir = e.dir.join(format!("seed-{}", case.seed));
    let images = std::fs::read_dir(&seed_dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|f| f.path().extension().is_some_and(|x| x == "qcow2"))
                .count()
        })
        .unwrap_or(0);
    let mut line = String::new();
    if e.created {
        line.push_str(&format!("export: created {}; ", e.dir.display()));
    } else {
        line.push_str("export: ");
    }
    line.push_str(&format!(
        "{images} images with their verdicts in {}",
        seed_dir.display()
    ));
    if json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// The verdict, the counts and the trace hash, as `run` and `replay` print
/// them.
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
        if let Some(why) = &report.skipped {
            let _ = writeln!(
                out,
                "seed {} ({profile}): SKIPPED: the driver does not run cases with {why}",
                report.seed
            );
            let _ = crate::output::stdout().write_all(out.as_bytes());
            return;
        }
        let verdict = if report.passed() { "PASS" } else { "FAIL" };
        let _ = writeln!(out, "seed {} ({profile}): {verdict}", report.seed);
        let skips = report.driver_skips();
        if !skips.is_empty() {
            let list: Vec<String> = skips.iter().map(|(k, n)| format!("{k} {n}")).collect();
            let _ = writeln!(
                out,
                "  not sent, the driver does not do them: {}",
                list.join(", ")
            );
        }
        let _ = writeln!(
            out,
            "  ops {} (writes {}, reads {}, flushes {}, failed {}), faults injected {}",
            s.counts.guest_ops,
            s.counts.guest_writes,
            s.counts.guest_reads,
            s.counts.guest_flushes,
            s.counts.failed_ops,
            s.counts.faults_injected
        );
        if s.counts.failed_ops > 0 {
            let _ = writeln!(
                out,
                "  failed ops excused by the fault that explains each: {}",
                s.excused
            );
        }
        let _ = writeln!(
            out,
            "  checked: {} read sectors, {} crash states ({} of {} crashes at a flush, {} at an armed guard's, {} inside a metadata operation at its drawn step), {} recovered sectors; leaked clusters {}",
            s.counts.read_sectors_checked,
            s.counts.crash_states_checked,
            s.counts.crashes_at_flush,
            s.counts.crashes,
            s.counts.crashes_at_guard,
            s.counts.crashes_at_step,
            s.counts.recovered_sectors_checked,
            s.counts.leaked_clusters
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
            s.counts.allocs_dropped,
        );
        let _ = writeln!(out, "  rare paths: {}", s.rare_paths);
        let _ = writeln!(out, "  guards whose condition arose: {}", s.guards);
        let _ = writeln!(
            out,
            "  schedule: {}; requests held long (latency outliers): {}",
            report.schedule, s.counts.held_requests
        );
        out.push_str(&failures_text(report));
        let _ = writeln!(out, "trace hash: {:016x}", report.trace_hash);
    }
    let _ = crate::output::stdout().write_all(out.as_bytes());
}

/// A run's failures as `print_report` prints them: each one's words, then
/// its evidence (the wrong sectors' hex diff, a failed check's dump diff).
pub fn failures_text(report: &RunReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for f in &report.failures {
        // The failure's first line names it; the lines after it (the
        // wrong sectors, a check's findings) stand under it.
        let text = f.to_string();
        let mut lines = text.lines();
        if let Some(first) = lines.next() {
            let _ = writeln!(out, "  {first}");
        }
        for line in lines {
            let _ = writeln!(out, "    {line}");
        }
        // The wrong sectors' hex diff, a failed check's dump diff.
        if let Ok(v) = serde_json::to_value(f) {
            for line in crate::report::explain::evidence(&v).lines() {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
    out
}
