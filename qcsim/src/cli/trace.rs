//! `qcsim trace import strace|blkparse FILE -o TRACE`: a recording as a
//! trace; `qcsim trace run TRACE --size SIZE ...`: a trace replayed through
//! the engine on the simulated disk, with crashes, checked as campaign
//! cases are (the trace becomes a case: `sim::iotrace::plan`). Both read
//! their input plain or zstd- or gzip-compressed (by magic bytes).

use std::fs::File;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context};
use engine::Switches;
use sim::iotrace::blkparse::{self, Action, BlkparseOptions};
use sim::iotrace::plan::{plan_case, TraceCase, TracePlan, DEFAULT_DEPTH};
use sim::iotrace::strace::{self, StraceOptions};
use sim::iotrace::{compressed, format, Import, Problem, Trace, TraceError};
use sim::runner::{run_case_with_progress, Failure, RunOptions};
use tools::qemu_args::{parse_size, ImageOpts};

use super::run::{prepare_export, print_report, report_export};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::Subcommand)]
pub enum Command {
    /// Convert a recording (strace or blkparse output) into a trace.
    Import(ImportArgs),
    /// Replay a trace through the engine on the simulated disk, with
    /// crashes, checking every read and crash state.
    Run(RunArgs),
}

/// The recordings `trace import` reads.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Recording {
    /// `strace -e trace=pwrite64,pwritev,pwritev2,fsync,fdatasync,fallocate,
    /// open,openat,openat2,creat,dup,dup2,dup3,fcntl,close,close_range` of a
    /// program writing a raw image file (the descriptor calls tell which
    /// writes are FUA: through O_DSYNC or O_SYNC).
    Strace,
    /// blkparse's default text output.
    Blkparse,
}

/// blkparse events, as the command line spells them.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EventArg {
    /// Queued (Q).
    Q,
    /// Completed (C).
    C,
}

#[derive(clap::Args)]
pub struct ImportArgs {
    /// What the recording is.
    #[arg(value_enum)]
    pub format: Recording,
    /// The recording.
    pub file: PathBuf,
    /// The trace to write (replaced only once it is complete).
    #[arg(short = 'o', long = "output", value_name = "TRACE")]
    pub output: PathBuf,
    /// strace: the image file's descriptor (default: the only one written).
    #[arg(long)]
    pub fd: Option<u64>,
    /// blkparse: the device, as MAJ,MIN (default: the only one recorded).
    #[arg(long, value_name = "MAJ,MIN")]
    pub device: Option<String>,
    /// blkparse: the events that become requests.
    #[arg(long, value_enum)]
    pub event: Option<EventArg>,
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// The trace.
    pub trace: PathBuf,
    /// Virtual disk size (at most 1 TiB), with an optional k, M, G, T suffix.
    #[arg(long)]
    pub size: String,
    /// Image options as key=value,... (as `qcsim create -o`).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// The case seed: scheduling, latencies, where and how it crashes.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Crash points drawn from the seed.
    #[arg(long, default_value_t = 0)]
    pub crashes: usize,
    /// Crash after every flush too.
    #[arg(long)]
    pub crash_after_flush: bool,
    /// Requests in flight at once (1 to 64); a flush is a barrier.
    #[arg(long, default_value_t = DEFAULT_DEPTH)]
    pub depth: usize,
    /// Engine switches: `all`, `none` or a 5-bit mask 0..31 (bit 0
    /// multi_cluster, 1 delayed_metadata, 2 zero_cow, 3 merge_cow, 4
    /// delayed_cow).
    #[arg(long, default_value = "all")]
    pub switches: String,
    /// Save the case as JSON (whatever the verdict): `qcsim replay` runs it
    /// again bit for bit.
    #[arg(long, value_name = "CASE.json")]
    pub save: Option<PathBuf>,
    /// Write each post-crash image and the final image, with verdicts, here.
    #[arg(long)]
    pub export: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Command::Import(a) => import(a),
        Command::Run(a) => run_trace(a),
    }
}

/// A trace or recording, decompressed if it is zstd or gzip (recognised by
/// its magic bytes, whatever its name), to at most
/// [`compressed::MAX_DECOMPRESSED`] bytes.
fn open(path: &Path) -> anyhow::Result<Box<dyn BufRead>> {
    let f = File::open(path).with_context(|| format!("could not open {}", path.display()))?;
    let (_, r) = compressed::reader(f, compressed::MAX_DECOMPRESSED)
        .with_context(|| format!("could not read {}", path.display()))?;
    Ok(r)
}

fn import(args: ImportArgs) -> anyhow::Result<i32> {
    let input = open(&args.file)?;
    let name = args.file.display();
    let imported: Import = match args.format {
        Recording::Strace => {
            if args.device.is_some() || args.event.is_some() {
                bail!("--device and --event are for blkparse recordings");
            }
            strace::import(input, &StraceOptions { fd: args.fd })
        }
        Recording::Blkparse => {
            if args.fd.is_some() {
                bail!("--fd is for strace recordings");
            }
            let device = args.device.as_deref().map(parse_device).transpose()?;
            let action = match args.event {
                None | Some(EventArg::Q) => Action::Queued,
                Some(EventArg::C) => Action::Completed,
            };
            blkparse::import(input, &BlkparseOptions { action, device })
        }
    }
    .map_err(|e| anyhow!("{name}: {e}"))?;
    if args.output.exists() && same_file(&args.file, &args.output) {
        bail!("-o {}: that is the recording itself", args.output.display());
    }
    let format_name = match args.format {
        Recording::Strace => "strace",
        Recording::Blkparse => "blkparse",
    };
    let t = &imported.trace;
    let mut header = vec![
        format!(
            "qcsim trace import {format_name} {}: {} lines, {} requests",
            file_name(&args.file),
            imported.summary.lines,
            t.entries.len()
        ),
        t.counts().to_string(),
    ];
    header.extend(imported.summary.describe());
    let mut text = Vec::new();
    let requests: Vec<_> = t.requests().collect();
    format::write(&mut text, &header, &requests).expect("writing to memory cannot fail");
    write_replacing(&args.output, &text)?;
    say(&format!(
        "{name}: {} lines read, {} requests written to {}",
        imported.summary.lines,
        t.entries.len(),
        args.output.display()
    ));
    say(&format!("  {}", t.counts()));
    for l in imported.summary.describe() {
        say(&format!("  {l}"));
    }
    if t.entries.is_empty() {
        say("  (no request: is it the right recording, descriptor or device?)");
    }
    Ok(0)
}

/// A line on standard output (through `crate::output`, like every print).
fn say(line: &str) {
    println!("{line}");
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// `MAJ,MIN`.
fn parse_device(s: &str) -> anyhow::Result<(u32, u32)> {
    let bad = || anyhow!("--device {s:?}: expected MAJ,MIN such as 8,0");
    let (a, b) = s.split_once(',').ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}

/// Write `bytes` to `path` through a temporary file in the same directory,
/// renamed over `path` only once complete: a command that fails leaves any
/// file already at `path` as it was.
pub fn write_replacing(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(
        ".{}.qcsim-{}.tmp",
        file_name(path),
        std::process::id()
    ));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(anyhow!("could not write {}: {e}", path.display()));
    }
    Ok(())
}

fn parse_switches(s: &str) -> anyhow::Result<Switches> {
    Ok(match s {
        "all" => Switches::ALL_ON,
        "none" => Switches::ALL_OFF,
        m => match m.parse::<u8>() {
            Ok(v) if v < 32 => Switches::from_mask(v),
            _ => bail!("--switches {m:?}: expected all, none or a mask 0..31"),
        },
    })
}

/// The trace file, parsed.
fn load_trace(path: &Path) -> anyhow::Result<Trace> {
    format::parse(open(path)?).map_err(|e| {
        let hint = match &e {
            TraceError::Line {
                problem: Problem::UnknownRequest(_),
                ..
            } => " (a recording? `qcsim trace import strace|blkparse` makes a trace of it)",
            _ => "",
        };
        anyhow!("{}: {e}{hint}", path.display())
    })
}

/// The case the trace runs as.
fn plan(args: &RunArgs, trace: &Trace) -> anyhow::Result<TraceCase> {
    let size = parse_size(&args.size).map_err(|e| anyhow!("--size: {e}"))?;
    let mut opts = ImageOpts::default();
    for list in &args.options {
        opts.apply_list(list).context("-o")?;
    }
    if opts.size.is_some_and(|s| s != size) {
        bail!("-o size= and --size disagree: give the size once, with --size");
    }
    let create = opts.to_create_options(size).context("-o")?;
    let mut plan = TracePlan::new(args.seed, create);
    plan.engine.switches = parse_switches(&args.switches)?;
    plan.depth = args.depth;
    plan.crashes = args.crashes;
    plan.crash_after_flush = args.crash_after_flush;
    plan_case(trace, &plan).map_err(|e| anyhow!("{}: {e}", args.trace.display()))
}

fn run_trace(args: RunArgs) -> anyhow::Result<i32> {
    let trace = load_trace(&args.trace)?;
    let tc = plan(&args, &trace)?;
    if let Some(p) = &args.save {
        write_replacing(p, tc.case.to_json().as_bytes())?;
    }
    let export = prepare_export(args.export.as_deref())?;
    let s = &tc.stats;
    say(&format!(
        "trace {}: {} requests ({})",
        args.trace.display(),
        s.requests,
        trace.counts()
    ));
    let mut shape = format!(
        "  replayed as {} operations in {} groups, depth {}, on a {}-byte image; {} crashes \
         drawn from seed {}",
        s.ops, s.groups, args.depth, tc.case.image.create.size, s.crashes, args.seed
    );
    if args.crash_after_flush {
        shape.push_str(&format!(", {} after flushes", s.crashes_after_flush));
    }
    if s.split > 0 || s.rounded > 0 {
        shape.push_str(&format!(
            "; {} requests split at 2 MiB, {} rounded out to whole sectors",
            s.split, s.rounded
        ));
    }
    say(&shape);

    let bar = crate::progress::bar("trace run", s.groups, "groups", false);
    let started = Instant::now();
    let report = run_case_with_progress(
        &tc.case,
        &RunOptions {
            export: args.export.clone(),
        },
        &mut |done, _| bar.set_position(done as u64),
    );
    let wall = started.elapsed();
    bar.finish_and_clear();

    print_report(&report, false);
    // FUA requests the engine returned from (the runner counts one when
    // its FUA entry point returns, so one a crash cut off in flight is not
    // counted), against those the case holds: a FUA request of the trace
    // split at 2 MiB is one FUA operation a piece.
    say(&format!(
        "FUA requests: {} returned of {} in the case (from {} FUA requests of the trace); \
         the simulated disks saw {} FUA writes",
        report.stats.counts.guest_fua_requests,
        s.fua_ops,
        s.fua,
        report.stats.counts.disk_fua_writes
    ));
    for f in &report.failures {
        if let Failure::Hang { group, .. } = f {
            if let Some((a, b)) = tc.group_lines(*group) {
                say(&format!("  group {group} holds trace lines {a} to {b}"));
            }
        }
    }
    let rss = peak_rss_kib();
    say(&format!(
        "time: {:.3} s wall; peak memory {}",
        wall.as_secs_f64(),
        rss.map_or("unknown".to_string(), |k| format!(
            "{:.1} MiB (maxrss)",
            k as f64 / 1024.0
        ))
    ));
    if let Some(p) = &args.save {
        say(&format!(
            "case saved to {}: qcsim replay {} runs it again",
            p.display(),
            p.display()
        ));
    }
    report_export(export.as_ref(), &tc.case, false);
    Ok(if report.passed() { 0 } else { 1 })
}

/// The process's peak resident set, in KiB (getrusage's `ru_maxrss`,
/// which Linux counts in KiB).
fn peak_rss_kib() -> Option<u64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole `rusage` into the pointer it is
    // given, which points at one; it reads nothing from it.
    let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: getrusage succeeded, so it filled the struct (and zeroed()
    // made every byte initialised before).
    let usage = unsafe { usage.assume_init() };
    u64::try_from(usage.ru_maxrss).ok()
}
