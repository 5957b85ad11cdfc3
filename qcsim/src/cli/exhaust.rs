//! `qcsim exhaust`: every workload of up to three guest operations from a
//! small vocabulary, with a flush after every subset of them, on a few
//! geometries and switch sets; every crash state of every crash point,
//! checked once each (see `sim::exhaust`). Prints the counts; saves a case
//! for each of the first failures to `corpus/failing/`, with the commands
//! that check it again.

use std::path::PathBuf;

use anyhow::{bail, Context};
use engine::Switches;
use sim::campaign::SwitchPlan;
use sim::exhaust::{run_exhaust, slices, ExhaustOptions, Geometry, Point, VocabOp, MAX_OPS};
use sim::runner::{EnumerateOptions, Granularity};

use super::campaign::{parse_jobs, parse_switches, MAX_JOBS};
use super::enumerate::GranularityArg;
use super::hint::CARGO_QCSIM;
use super::run::save_case;
use super::run::BrokenArg;

#[derive(clap::Args)]
pub struct Args {
    /// Most guest operations per workload, 1 to 3, on every geometry and
    /// switch set (default: 3 with 4 KiB clusters, 2 with 64 KiB ones).
    #[arg(long)]
    pub ops: Option<usize>,
    /// Geometries, comma-separated (default: all): 4k, 4k-backing, 64k,
    /// 64k-backing, 64k-extl2, 64k-extl2-backing, 4k-v2 (a version 2
    /// image), 4k-v2-backing, 4k-rc1 and 4k-rc64 (1- and 64-bit
    /// refcounts).
    #[arg(long, value_delimiter = ',')]
    pub geometry: Vec<String>,
    /// Operations of the vocabulary, comma-separated (default: the 12 of
    /// W (aligned write), U (unaligned write), Z (write zeroes) and D
    /// (discard), each over A (cluster 0), B (cluster 1) or AB (both), as
    /// W(A),D(AB)). Also: C (compressed write of each cluster) over an
    /// extent; S (internal snapshot), R (apply the first snapshot), X
    /// (delete it); `default` for the 12, `extra` for C(A), C(B), C(AB),
    /// S, R and X; FW, FU and FZ (W, U and Z flagged FUA) over an
    /// extent, `fua` for the nine of them.
    #[arg(long, value_delimiter = ',')]
    pub vocabulary: Vec<String>,
    /// Switch sets, comma-separated, each run on every geometry: `all`,
    /// `none` or a 5-bit mask 0..31 (bit 0 multi_cluster, 1
    /// delayed_metadata, 2 zero_cow, 3 merge_cow, 4 delayed_cow). Default:
    /// all on, on every geometry, then all on but delayed_metadata (29) and
    /// all on but delayed_cow (15) on the 4 KiB ones, up to 3 operations.
    #[arg(long, value_delimiter = ',')]
    pub switches: Vec<String>,
    /// Most crash states checked per crash point.
    #[arg(long, default_value_t = sim::exhaust::DEFAULT_CAP)]
    pub cap: u64,
    /// sector (each sector on its own), write (each device write whole or
    /// not at all), or auto (sector when every state fits under the cap).
    #[arg(long, value_enum, default_value = "auto")]
    pub granularity: GranularityArg,
    /// Worker threads, 1 to 1024 (default: all cores).
    #[arg(long, value_parser = parse_jobs)]
    pub jobs: Option<usize>,
    /// Where the cases of failing workloads are saved.
    #[arg(long, default_value = "corpus/failing")]
    pub corpus: PathBuf,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub broken: BrokenArg,
}

fn options(args: &Args) -> anyhow::Result<ExhaustOptions> {
    let mut o = ExhaustOptions::default();
    if let Some(n) = args.ops.filter(|n| !(1..=MAX_OPS).contains(n)) {
        bail!("--ops {n}: a workload has 1 to {MAX_OPS} operations");
    }
    if !args.switches.is_empty() {
        let sets = args
            .switches
            .iter()
            // A campaign's per-case plans (cycle, as-generated) name no
            // one set, so they are refused here.
            .map(|s| match parse_switches(s.trim()) {
                Ok(SwitchPlan::Fixed(s)) => Ok(s),
                _ => bail!("--switches {s:?}: expected all, none or a mask 0..31"),
            })
            .collect::<anyhow::Result<Vec<Switches>>>()?;
        o.slices = slices(&sets, &Geometry::all(), None);
    }
    if !args.geometry.is_empty() {
        let geometries = args
            .geometry
            .iter()
            .map(|g| {
                Geometry::parse(g.trim()).with_context(|| {
                    let all: Vec<String> = Geometry::all().iter().map(Geometry::name).collect();
                    format!("--geometry {g:?}: expected one of {}", all.join(", "))
                })
            })
            .collect::<anyhow::Result<Vec<Geometry>>>()?;
        o.slices.retain(|s| geometries.contains(&s.geometry));
    }
    if let Some(n) = args.ops {
        for s in &mut o.slices {
            s.max_ops = n;
        }
    }
    if !args.vocabulary.is_empty() {
        let mut vocabulary: Vec<VocabOp> = Vec::new();
        for v in &args.vocabulary {
            let ops = match v.trim() {
                "default" => VocabOp::all(),
                "extra" => VocabOp::extra(),
                "fua" => VocabOp::fua(),
                name => vec![VocabOp::parse(name).with_context(|| {
                    format!(
                        "--vocabulary {v:?}: expected W, U, Z, D, C, FW, FU or FZ over A, B or \
                         AB (as W(A)), S, R, X, default, extra or fua"
                    )
                })?],
            };
            for op in ops {
                // Named twice, it would only repeat workloads.
                if !vocabulary.contains(&op) {
                    vocabulary.push(op);
                }
            }
        }
        o.vocabulary = vocabulary;
    }
    o.enumerate = EnumerateOptions {
        granularity: match args.granularity {
            GranularityArg::Auto => Granularity::Auto,
            GranularityArg::Sector => Granularity::Sector,
            GranularityArg::Write => Granularity::Write,
        },
        cap: args.cap,
    };
    o.jobs = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_JOBS))
    });
    {
        o.broken = args.broken.variant();
    }
    Ok(o)
}

/// A switch set in words: `all on`, `none`, the switches off when most
/// are on, else the switches on.
fn switch_set_name(s: Switches) -> String {
    let (on, off): (Vec<_>, Vec<_>) = s.iter().partition(|(_, v)| *v);
    let names = |v: Vec<(&str, bool)>| v.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    match (on.len(), off.len()) {
        (_, 0) => "all on".to_string(),
        (0, _) => "none".to_string(),
        (a, b) if a >= b => format!("all on but {}", names(off)),
        _ => format!("only {}", names(on)),
    }
}

/// As `--granularity` spells it.
fn granularity_name(g: Granularity) -> &'static str {
    match g {
        Granularity::Auto => "auto",
        Granularity::Sector => "sector",
        Granularity::Write => "write",
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let o = options(&args)?;
    let bar = crate::progress::bar("exhaust", o.workload_count(), "workloads", args.quiet);
    let report = run_exhaust(&o, &|done, _, failed| {
        bar.set_position(done);
        bar.set_message(format!("{failed} failed"));
    })?;
    bar.finish_and_clear();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(if report.passed() { 0 } else { 1 });
    }
    let c = &report.counts;
    println!(
        "exhaust: {} slices, {} operations ({}), a flush after any of them; crash states by {}, at most {} per crash point ({} jobs)",
        report.slices.len(),
        report.vocabulary.len(),
        report.vocabulary.join(" "),
        granularity_name(report.granularity),
        report.cap,
        o.jobs,
    );
    // Each switch set once, in the order of the slices.
    let mut sets: Vec<u8> = Vec::new();
    for s in &report.slices {
        if !sets.contains(&s.switches) {
            sets.push(s.switches);
        }
    }
    for mask in sets {
        let on: Vec<String> = report
            .slices
            .iter()
            .filter(|s| s.switches == mask)
            .map(|s| format!("{} up to {} ops", s.geometry, s.max_ops))
            .collect();
        println!(
            "switches {mask:05b} ({}): {}",
            switch_set_name(Switches::from_mask(mask)),
            on.join(", ")
        );
    }
    println!(
        "workloads: {}, crash-free runs failed: {}",
        c.workloads, c.crash_free_failed
    );
    println!(
        "crash points: {} ({} after the last step, {} at a device flush in it; {} by sector, {} capped)",
        c.crash_points,
        c.crash_points - c.device_flush_points,
        c.device_flush_points,
        c.by_sector_points,
        c.capped_points
    );
    println!(
        "crash states: built {}, deduplicated {}, checked {}, failed {}",
        c.built, c.duplicates, c.checked, c.failed
    );
    for s in &report.slices {
        let g = &s.counts;
        println!(
            "  {:05b} {}: {} workloads, {} crash points, built {}, deduplicated {}, checked {}, failed {}",
            s.switches, s.geometry, g.workloads, g.crash_points, g.built, g.duplicates, g.checked, g.failed
        );
    }
    if !report.failures.is_empty() {
        std::fs::create_dir_all(&args.corpus)
            .with_context(|| format!("creating {}", args.corpus.display()))?;
    }
    let granularity = granularity_name(report.granularity);
    for (k, f) in report.failures.iter().enumerate() {
        let path = args.corpus.join(format!("exhaust-{k}.json"));
        save_case(&f.case, &path)?;
        let (place, again) = match f.point {
            None => ("in its crash-free run".to_string(), String::new()),
            Some(p) => {
                let at = match p {
                    Point::DeviceFlush(n) => format!(" --at-flush {n}"),
                    Point::AfterStep => String::new(),
                };
                (
                    format!(
                        "{p}: {} failing states, the first state {}",
                        f.failing_states,
                        f.first_state
                            .map_or("(the run before the crash failed)".into(), |s| s
                                .to_string())
                    ),
                    format!(
                        "; every state again: {} enumerate --case {}{at} --granularity {granularity} --cap {}",
                        CARGO_QCSIM,
                        path.display(),
                        report.cap
                    ),
                )
            }
        };
        println!(
            "FAIL {:05b} {} {}: {place}",
            f.switches, f.geometry, f.workload
        );
        println!(
            "  replay with: {} replay {}{again}",
            CARGO_QCSIM,
            path.display()
        );
        for fail in f.failures.iter().take(2) {
            for line in fail.to_string().lines().take(8) {
                println!("    {line}");
            }
        }
    }
    if c.failed_points + c.crash_free_failed > report.failures.len() as u64 {
        println!(
            "({} failures in {} workloads; the first {} shown and saved)",
            c.failed_points + c.crash_free_failed,
            c.failed_workloads,
            report.failures.len()
        );
    }
    println!("{}", if report.passed() { "PASS" } else { "FAIL" });
    Ok(if report.passed() { 0 } else { 1 })
}
