//! `qcsim bench --sim [--json] [--size 256M] [--workload W] [--hdd] [--extra]`: the
//! simulated benchmarks, each optimisation on and off (see `sim::bench`).

use anyhow::{bail, Context};

use sim::bench::{render_table, run_all, Workload};

use super::qemu_args::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Run the simulated benchmarks (the only kind so far).
    #[arg(long)]
    pub sim: bool,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Bytes written per job (suffixes K, M, G as qemu-img takes them).
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// Which job to run.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: WorkloadArg,
    /// Also time each job on the HDD model (runs every job twice).
    #[arg(long)]
    pub hdd: bool,
    /// Add rows with delayed_cow off and then zero_cow and merge_cow off,
    /// where those two switches show their worth.
    #[arg(long)]
    pub extra: bool,
}

/// Workloads as the command line spells them.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WorkloadArg {
    #[value(name = "seq4k")]
    Seq4k,
    #[value(name = "seq4k-backing")]
    Seq4kBacking,
    All,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if !a.sim {
        bail!("only simulated benchmarks exist so far: pass --sim");
    }
    let size = parse_size(&a.size).with_context(|| format!("--size {}", a.size))?;
    let workloads: Vec<Workload> = match a.workload {
        WorkloadArg::Seq4k => vec![Workload::Seq4k],
        WorkloadArg::Seq4kBacking => vec![Workload::Seq4kBacking],
        WorkloadArg::All => Workload::ALL.to_vec(),
    };
    let rows = run_all(&workloads, size, a.hdd, a.extra)?;
    if a.json {
        for r in &rows {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", render_table(&rows));
    }
    Ok(0)
}
