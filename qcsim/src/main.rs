//! The `qcsim` command line: seeded simulation campaigns over the engine,
//! and the engine on real image files in the manner of qemu-img and qemu-io.
//!
//! ## What it holds
//!
//! the `qcsim` binary, the only crate that uses `anyhow`: one module per
//! subcommand in `cli/`, each parsing its arguments with clap, calling `sim` or
//! `tools`, printing and mapping the result to the exit code (`create`, `info`,
//! `check`, `convert`, `dump` and `bench FILE` are only that; `bench --sim`
//! calls `sim::bench`; `serve` joins `tools` and `nbd`: `serve::image` is the
//! image's guest view as an `nbd::Export`, `serve::record` an export that
//! writes a `sim::iotrace` trace of what it is asked and passes it on;
//! `serve::sim` a simulated disk as an export, over `sim::served`, and
//! `disk-replay` its request log run again; `qemu/` is `--driver qemu`, a case
//! on QEMU's qcow2 driver (`qemu::disk` an epoch's simulated disk, the image's
//! or a data file's, on a thread of its own, `qemu::run` the case), and
//! `cli::driver` the flag and what it prints); `findings` is the ledger of
//! other drivers' defects (`corpus/findings.json`) and `cli::findings` its
//! replay; `dropin/` is the drop-in layer
//! (see "The drop-in tools" below): qcsim as `qemu-img` and `qemu-io`; `output`
//! is every command's standard output: the crate's `print!`/`println!` (defined
//! in `main.rs`, shadowing std's, which panic on a failed write) and qemu-io's
//! writer go through it, the first failed write is recorded and later ones fail
//! at once, the command finishes (an image is still closed, a campaign report
//! still written) and `main` exits 141 with no message when the reader had gone
//! (`\| head -1`; the status of a program killed by SIGPIPE) or 1 with `writing
//! standard output: ...` on another error; SIGPIPE stays ignored (the Rust
//! runtime's default), so a write to a closed pipe or socket is an `EPIPE`
//! error, never a signal, and sockets need no `MSG_NOSIGNAL`; `build.rs`
//! records the git revision that campaign reports carry; `progress` is every
//! long command's progress bar (rate, time left; hidden when standard error is
//! not a terminal); `report/` is the campaign report directory, everything but
//! `summary::build` working on the summary's JSON so that a merged report
//! renders alike and new totals fields need no change: `summary`
//! (`summary.json`: `campaign`, the deterministic `result`, the wall-clock
//! `timing` apart), `merge` (`qcsim report merge`: inputs checked to be
//! disjoint parts of one campaign, totals added field by field, the trace hash
//! recombined from `case_hashes` with `sim::campaign::combined_trace_hash`),
//! `explain` (a failure in words, with the hex diff of a wrong read),
//! `sections` (the tables both renderings show), `markdown`, `html` and `svg`
//! (inline charts, no script), `files` (temporary files renamed into place, so
//! a failed command destroys no report)

// Before `mod cli`, so that every command's `print!` and `println!` are
// these: standard output through `output`, where a failed write (a reader
// gone: `| head -1`) is recorded instead of panicking, and `main` exits 141
// quietly (see `output`).
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::output::print_fmt(format_args!($($arg)*))
    };
}

macro_rules! println {
    () => {
        $crate::output::print_fmt(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::print_fmt(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod output;

mod findings;
mod progress;
mod qemu;
mod report;

mod cli;
mod dropin;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "qcsim",
    version,
    about = "qcow2 engine and crash-consistency simulator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run many seeded cases on all cores.
    Campaign(cli::campaign::Args),
    /// Benchmarks: simulated (--sim), or on an image file as qemu-img bench.
    Bench(cli::bench::Args),
    /// Run one simulated case from a seed.
    Run(cli::run::Args),
    /// Replay a saved case.
    Replay(cli::replay::Args),
    /// Shrink a failing case to the smallest that fails the same way.
    Shrink(cli::shrink::Args),
    /// Check every crash state of a small workload.
    Enumerate(cli::enumerate::Args),
    /// Check every crash state of every workload of up to 3 operations.
    Exhaust(cli::exhaust::Args),
    /// Campaign reports: merge shards' reports into one.
    Report(cli::report::Args),
    /// Guest I/O traces: import recordings, replay them with crashes.
    Trace(cli::trace::Args),
    /// Create a qcow2 image (as qemu-img create).
    Create(cli::create::Args),
    /// Show information about an image (as qemu-img info).
    Info(cli::info::Args),
    /// Check an image for consistency (as qemu-img check).
    Check(cli::check::Args),
    /// Convert an image to raw or qcow2 (as qemu-img convert).
    Convert(cli::convert::Args),
    /// Deterministic text dump of header, L1, L2 and refcount state.
    Dump(cli::dump::Args),
    /// qemu-io: its options and commands on an image (as qcsim invoked as
    /// `qemu-io`).
    Io(ToolArgs),
    /// qemu-img: its create, check and info (as qcsim invoked as
    /// `qemu-img`).
    Img(ToolArgs),
    /// Export an image's guest view over NBD.
    Serve(cli::serve::Args),
    /// Replay a simulated disk's request log (`serve --sim --record`).
    DiskReplay(cli::disk_replay::Args),
    /// Replay every defect of the findings ledger on its driver: still
    /// present, or gone (docs/findings.md).
    Findings(cli::findings::Args),
}

/// The command line of a drop-in tool, passed on as it is.
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
struct ToolArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

fn main() {
    // Invoked as qemu-img or qemu-io (a symlink), or as `qcsim img` and
    // `qcsim io`: the tool's own command line, scanned as the tool scans it.
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let tool = match (args.first(), args.get(1).map(String::as_str)) {
        (Some(argv0), _) if dropin::tool_of_argv0(argv0).is_some() => {
            dropin::tool_of_argv0(argv0).map(|t| (t, 1))
        }
        (_, Some("img")) => Some((dropin::Tool::Img, 2)),
        (_, Some("io")) => Some((dropin::Tool::Io, 2)),
        _ => None,
    };
    if let Some((tool, skip)) = tool {
        let code = dropin::run(tool, &args[skip..]);
        std::process::exit(output::exit_code(code));
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Campaign(a) => cli::campaign::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::Run(a) => cli::run::run(a),
        Command::Replay(a) => cli::replay::run(a),
        Command::Shrink(a) => cli::shrink::run(a),
        Command::Enumerate(a) => cli::enumerate::run(a),
        Command::Exhaust(a) => cli::exhaust::run(a),
        Command::Report(a) => cli::report::run(a),
        Command::Trace(a) => cli::trace::run(a),
        Command::Create(a) => cli::create::run(a),
        Command::Info(a) => cli::info::run(a),
        Command::Check(a) => cli::check::run(a),
        Command::Convert(a) => cli::convert::run(a),
        Command::Dump(a) => cli::dump::run(a),
        Command::Io(a) => Ok(dropin::run(dropin::Tool::Io, &a.args)),
        Command::Img(a) => Ok(dropin::run(dropin::Tool::Img, &a.args)),
        Command::Serve(a) => cli::serve::run(a),
        Command::DiskReplay(a) => cli::disk_replay::run(a),
        Command::Findings(a) => cli::findings::run(a),
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            // After standard output failed, the error is (most likely) that
            // failure, already dealt with by `output`.
            if !output::has_failed() {
                eprintln!("qcsim: {e:#}");
            }
            1
        }
    };
    std::process::exit(output::exit_code(code));
}
