//! `qcsim report merge DIR... -o DIR`: shard reports (each a campaign's
//! report directory, or its summary.json) merged into one report whose
//! totals and trace hash are those of one campaign over their seeds
//! (`crate::report::merge` checks and adds; this module reads and
//! writes). Nothing is written unless every input is read and agrees,
//! and, with `--complete`, they are the whole campaign; a missing shard is
//! named either way.

use std::path::PathBuf;

use anyhow::bail;

use crate::report::{self, merge};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// Merge shard reports into one: summary.json, report.md, report.html.
    Merge(MergeArgs),
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// Report directories (or their summary.json files) to merge.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The merged report's directory.
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: PathBuf,
    /// A `qcsim bench --sim` JSON output to chart in the merged report.
    #[arg(long, value_name = "FILE")]
    pub bench_json: Option<PathBuf>,
    /// Refuse, writing nothing, unless the inputs are the whole campaign:
    /// every seed of their span ran (a missing shard is named either way).
    /// The recipes in deploy/ merge with it, so a lost shard fails the
    /// merge rather than shrinking the campaign.
    #[arg(long)]
    pub complete: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Command::Merge(m) => run_merge(m),
    }
}

fn run_merge(a: MergeArgs) -> anyhow::Result<i32> {
    let bench = a
        .bench_json
        .as_deref()
        .map(report::read_bench)
        .transpose()?;
    let inputs = a
        .inputs
        .iter()
        .map(|p| merge::read_input(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let merged = merge::merge(&inputs)?;
    let missing = merge::missing_shards(&merged);
    let c = &merged["campaign"];
    if a.complete && c["complete"] != true {
        if missing.is_empty() {
            bail!(
                "report merge --complete: not every seed of {}..{} ran ({} cases): the inputs' ranges leave a gap",
                c["seeds"][0],
                c["seeds"][1],
                merged["result"]["cases"]
            );
        }
        bail!(
            "report merge --complete: missing {}; run only that shard again (deploy/README.md says how for each scheduler) and merge again",
            missing.join(", ")
        );
    }
    for m in &missing {
        eprintln!("report merge: missing {m}: the merged report is of the seeds present");
    }
    report::write_report(&a.output, &merged, bench.as_deref())?;
    let r = &merged["result"];
    println!(
        "merged {} reports: seeds {}..{}{}, {} cases, {} passed, {} failed",
        inputs.len(),
        c["seeds"][0],
        c["seeds"][1],
        if c["complete"] == true {
            ""
        } else {
            " (not every seed of the span)"
        },
        r["cases"],
        r["passed"],
        r["failed"]
    );
    println!("trace hash: {}", r["trace_hash"].as_str().unwrap_or("?"));
    println!("report: {}", a.output.join(report::HTML).display());
    Ok(0)
}
