//! `qcsim shrink CASE.json [-o OUT.json] [--driver engine|qcow2-rs]`: the
//! smallest case that still fails the same way (the kind of the
//! original's first failure) on the driver it failed on.

use std::path::PathBuf;

use anyhow::bail;
use anyhow::Context;
use sim::shrink::{shrink_failing_on, CaseSize, ShrinkOptions, DEFAULT_MAX_RUNS, DEFAULT_RESEEDS};

use super::hint::CARGO_QCSIM;
use super::run::{load_case, save_case};

#[derive(clap::Args)]
pub struct Args {
    /// The failing case file.
    pub case: PathBuf,
    /// Where to write the shrunk case (default: CASE.shrunk.json beside it).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Most runs to spend; the smallest case found by then is written.
    #[arg(long, default_value_t = DEFAULT_MAX_RUNS)]
    pub max_runs: u64,
    /// Seeds to try, after the case's own, for each operation left once
    /// nothing else shrinks (the shrunk case may then carry another seed);
    /// 0 keeps the original seed.
    #[arg(long, default_value_t = DEFAULT_RESEEDS)]
    pub reseeds: u64,
    /// No progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// The driver every run is on: an in-process one (engine, qcow2-rs),
    /// whose runs replay bit for bit.
    #[arg(long, value_enum, default_value = "engine")]
    pub driver: super::driver::DriverArg,
}

/// `dir/name.json` becomes `dir/name.shrunk.json`.
pub fn default_output(case: &std::path::Path) -> PathBuf {
    let stem = case
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "case".into());
    case.with_file_name(format!("{stem}.shrunk.json"))
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let Some(kind) = args.driver.in_process() else {
        bail!(
            "--driver {}: shrinking needs runs that replay bit for bit, which only in-process drivers (engine, qcow2-rs) give",
            args.driver.name()
        );
    };
    let case = load_case(&args.case)?;
    let out = args.output.unwrap_or_else(|| default_output(&args.case));
    println!(
        "shrink: {} from {}",
        args.case.display(),
        CaseSize::of(&case)
    );
    let quiet = args.quiet;
    // The run budget bounds the runs; a shrink usually ends before it.
    let bar = crate::progress::bar("shrink", args.max_runs, "runs (budget)", quiet);
    let shrunk = shrink_failing_on(
        &case,
        kind,
        &ShrinkOptions {
            max_runs: args.max_runs,
            reseeds: args.reseeds,
        },
        |p| {
            bar.set_position(p.runs);
            bar.set_message(p.size.to_string());
            if !quiet {
                bar.suspend(|| println!("  run {:>5} {:<12} {}", p.runs, p.pass, p.size));
            }
        },
    );
    bar.finish_and_clear();
    let (shrunk, kind) = shrunk.with_context(|| format!("shrinking {}", args.case.display()))?;
    save_case(&shrunk.case, &out)?;
    println!(
        "shrink: still fails ({kind}) with {} after {} runs ({} steps{}); written to {}",
        CaseSize::of(&shrunk.case),
        shrunk.runs,
        shrunk.steps,
        if shrunk.budget_exhausted {
            ", run budget exhausted"
        } else {
            ""
        },
        out.display()
    );
    println!(
        "replay with: {} replay{} {}",
        CARGO_QCSIM,
        args.driver.flag(),
        out.display()
    );
    Ok(0)
}
