//! `qcsim check`: `qemu-img check [-r leaks|all]` on an image file
//! (`tools::check`), with its flags, output and exit codes (0 clean, 1
//! check errors or a failed check, 2 corruptions, 3 leaks only). A front
//! end of `tools::check`, as the drop-in `qemu-img check` is; this one
//! takes qcow2 only (the drop-in probes the format and answers 63 for
//! one without checks) and prefixes its lines `qcsim: `.

use tools::check::{check_file, CheckOptions, RepairMode};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Repair {
    /// Free leaked clusters.
    Leaks,
    /// Fix leaks and errors, rebuilding the refcount structure if needed.
    All,
}

#[derive(Clone, Copy, Debug, Default, clap::ValueEnum)]
pub enum Output {
    #[default]
    Human,
    Json,
}

#[derive(clap::Args)]
pub struct Args {
    /// Repair the image (as qemu-img check -r).
    #[arg(short = 'r', long = "repair", value_enum)]
    pub repair: Option<Repair>,
    /// Output format.
    #[arg(long = "output", value_enum, default_value = "human")]
    pub output: Output,
    /// Image format; only qcow2 is supported.
    #[arg(short = 'f', long = "format", default_value = "qcow2")]
    pub format: String,
    /// Suppress the human report.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Force sharing: check an image other processes have open, even for
    /// writing, without keeping them from writing it (qemu-img's -U; the
    /// result may then be inconsistent). Not with -r.
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Image file.
    pub file: std::path::PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.format != "qcow2" {
        anyhow::bail!(
            "unsupported format '{}': only qcow2 can be checked",
            args.format
        );
    }
    let opts = CheckOptions {
        repair: args.repair.map(|r| match r {
            Repair::Leaks => RepairMode::Leaks,
            Repair::All => RepairMode::All,
        }),
        force_share: args.force_share,
    };
    let outcome = check_file(&args.file, &opts)?;
    for message in outcome.finding_messages() {
        eprintln!("{message}");
    }
    if let Some(msg) = outcome.failure() {
        eprintln!("qcsim: {msg}");
        eprintln!("qcsim: Check failed");
        return Ok(outcome.exit_code());
    }
    match args.output {
        Output::Human => {
            if !args.quiet {
                print!("{}", outcome.human());
            }
        }
        Output::Json => println!("{}", outcome.json()),
    }
    if outcome.check_failed() {
        eprintln!("qcsim: Check failed");
    }
    Ok(outcome.exit_code())
}
