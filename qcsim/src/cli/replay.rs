//! `qcsim replay CASE.json`: one saved case, bit for bit as it first ran.

use std::path::PathBuf;

use sim::runner::{run_case, RunOptions};

use super::run::{load_case, prepare_export, print_report, report_export};

#[derive(clap::Args)]
pub struct Args {
    /// The case file.
    pub case: PathBuf,
    /// Write each post-crash image and the final image, with verdicts, here.
    #[arg(long)]
    pub export: Option<PathBuf>,
    /// Print the run's counts as JSON.
    #[arg(long)]
    pub json: bool,
    /// The qcow2 driver: qcsim's engine or qcow2-rs (bit for bit), or
    /// QEMU's or imago (the same workload and crash choices; their
    /// scheduling is their own).
    #[arg(long, value_enum, default_value = "engine")]
    pub driver: super::driver::DriverArg,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let case = load_case(&args.case)?;
    if let Some(engine) = args.driver.external() {
        let corpus = std::path::Path::new("corpus/failing");
        let report = super::driver::run_qemu(&case, corpus, engine)?;
        super::driver::print_qemu_report(&report, engine);
        return Ok(if report.passed() { 0 } else { 1 });
    }
    let export = prepare_export(args.export.as_deref())?;
    let opts = RunOptions {
        export: args.export,
    };
    let report = match args.driver {
        super::driver::DriverArg::Engine => run_case(&case, &opts),
        d => super::run::run_in_process(&case, &opts, d),
    };
    print_report(&report, args.json);
    report_export(export.as_ref(), &case, args.json);
    Ok(if report.passed() { 0 } else { 1 })
}
