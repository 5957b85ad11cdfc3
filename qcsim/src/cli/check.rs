//! `qcsim check`: the image checker on a real file, with `qemu-img
//! check`'s flags, output and exit codes (0 clean, 1 check errors or a
//! failed check, 2 corruptions, 3 leaks only).

use anyhow::Context;
use engine::dev::LockRequest;
use oracle::check::{self, RepairMode};
use tools::files::open_locked;

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
    let path = &args.file;
    let repair = args.repair.is_some();
    if repair && args.force_share {
        anyhow::bail!(
            "Could not open '{}': force-share (-U) is only for read-only opens, and repair (-r) writes the image",
            path.display()
        );
    }
    // QEMU's locks, as qemu-img check takes them: a check reads (and keeps
    // writers out, unless -U), a repair writes, so nobody else may have
    // the image open for writing or reading while it runs: an image QEMU
    // is writing is refused, not repaired under it.
    let req = LockRequest::qcow2_file(!repair, args.force_share);
    let mut locked = open_locked(path, repair, req)
        .with_context(|| format!("Could not open '{}'", path.display()))?;
    let file = &mut locked.file;
    let mut report = match args.repair {
        None => check::check(&*file),
        Some(r) => {
            let mode = match r {
                Repair::Leaks => RepairMode::Leaks,
                Repair::All => RepairMode::All,
            };
            check::repair(file, mode)
                .with_context(|| format!("Could not open '{}'", path.display()))?
        }
    };
    report.filename = path.display().to_string();
    for f in &report.findings {
        eprintln!("{}", f.message);
    }
    if let Some(msg) = &report.failure {
        eprintln!("qcsim: {msg}");
        eprintln!("qcsim: Check failed");
        return Ok(1);
    }
    match args.output {
        Output::Human => {
            if !args.quiet {
                print!("{}", report.human());
            }
        }
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    if report.check_errors != 0 {
        eprintln!("qcsim: Check failed");
    }
    Ok(report.exit_code())
}
