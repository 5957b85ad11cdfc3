//! `qcsim bench`: two benchmarks under one command.
//!
//! - `qcsim bench --sim [--json] [--size 256M] [--workload W] [--hdd]
//!   [--extra]`: the simulated benchmarks, each optimisation on and off (see
//!   `sim::bench`).
//! - `qcsim bench [-c COUNT] [-d DEPTH] [-f FMT] [-n] [-o OFFSET]
//!   [-s BUFFER_SIZE] [-S STEP_SIZE] [-t CACHE] [-w] [--pattern N]
//!   [--flush-interval N] [--no-drain] [--compare-qemu] FILENAME`: the
//!   engine on a real image file, with `qemu-img bench`'s flags and
//!   output; `--compare-qemu` then runs `qemu-img bench` with the same flags
//!   on a fresh copy of the image and prints both side by side.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};

use sim::bench::{render_table, run_all, Workload};
use tools::bench::{run_file_bench, CacheMode, FileBenchOptions, FileBenchReport};
use tools::files::Format;
use tools::qemu_args::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Run the simulated benchmarks instead of benchmarking FILENAME.
    #[arg(long)]
    pub sim: bool,
    /// --sim: one JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// --sim: bytes written per job (suffixes K, M, G as qemu-img takes them).
    #[arg(long, default_value = "256M")]
    pub size: String,
    /// --sim: which job to run.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: WorkloadArg,
    /// --sim: also time each job on the HDD model (runs every job twice).
    #[arg(long)]
    pub hdd: bool,
    /// --sim: add rows with delayed_cow off and then zero_cow and merge_cow
    /// off, where those two switches show their worth, and the seq256k job
    /// (multi-cluster requests), where multi_cluster shows its worth.
    #[arg(long)]
    pub extra: bool,

    /// Number of I/O requests to perform (default 75000).
    #[arg(short = 'c', long = "count", value_name = "COUNT")]
    pub count: Option<String>,
    /// Number of requests in flight at once (default 64).
    #[arg(short = 'd', long = "depth", value_name = "DEPTH")]
    pub depth: Option<String>,
    /// Image format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    pub format: Option<String>,
    /// Cache mode: none (O_DIRECT) or writeback (the default).
    #[arg(short = 't', long = "cache", value_name = "CACHE")]
    pub cache: Option<String>,
    /// Bytes per request (default 4K).
    #[arg(short = 's', long = "buffer-size", value_name = "BUFFER_SIZE")]
    pub buffer_size: Option<String>,
    /// Offset of the first request (default 0).
    #[arg(short = 'o', long = "offset", value_name = "OFFSET")]
    pub offset: Option<String>,
    /// Offset increment from one request to the next (default: the buffer
    /// size).
    #[arg(short = 'S', long = "step-size", value_name = "STEP_SIZE")]
    pub step: Option<String>,
    /// Asynchronous I/O backend: threads, native or io_uring. All run on the
    /// engine's thread pool; accepted for qemu-img compatibility.
    #[arg(short = 'i', long = "aio", value_name = "AIO")]
    pub aio: Option<String>,
    /// Native AIO; accepted and run on the thread pool.
    #[arg(short = 'n', long = "native")]
    pub native: bool,
    /// Write instead of read.
    #[arg(short = 'w', long = "write")]
    pub write: bool,
    /// Byte to write (0 to 255: decimal, 0x hex or 0-prefixed octal); on
    /// reads, the byte every read must return (qemu-img ignores it there).
    #[arg(long = "pattern", value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// Flush after this many requests (writes only).
    #[arg(long = "flush-interval", value_name = "N")]
    pub flush_interval: Option<String>,
    /// Do not wait for requests in flight before a flush.
    #[arg(long = "no-drain")]
    pub no_drain: bool,
    /// Print nothing but errors.
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,
    /// Force sharing: read an image other processes have open, even for
    /// writing, without keeping them from writing it. A write benchmark
    /// takes the write locks whatever this says.
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Turn an engine optimisation off (qcow2; repeatable): multi_cluster,
    /// delayed_metadata, zero_cow, merge_cow or delayed_cow.
    #[arg(long = "off", value_name = "SWITCH")]
    pub off: Vec<String>,
    /// Then run `qemu-img bench` with the same flags on a fresh copy of the
    /// image (made before this run) and print both results side by side.
    #[arg(long = "compare-qemu")]
    pub compare_qemu: bool,
    /// The image to benchmark.
    pub filename: Option<PathBuf>,
}

/// Workloads as the command line spells them.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum WorkloadArg {
    #[value(name = "seq4k")]
    Seq4k,
    #[value(name = "seq4k-backing")]
    Seq4kBacking,
    /// 256 KiB sequential writes (also added by --extra).
    #[value(name = "seq256k")]
    Seq256k,
    All,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if a.sim {
        if let Some(f) = &a.filename {
            bail!("bench --sim takes no file name (got '{}')", f.display());
        }
        return run_sim(&a);
    }
    let Some(path) = a.filename.clone() else {
        bail!("bench: expecting one image file name (or --sim for the simulated benchmarks)");
    };
    let opts = file_options(&a)?;
    run_file(&a, &path, &opts)
}

fn run_sim(a: &Args) -> anyhow::Result<i32> {
    let size = parse_size(&a.size).with_context(|| format!("--size {}", a.size))?;
    let workloads: Vec<Workload> = match a.workload {
        WorkloadArg::Seq4k => vec![Workload::Seq4k],
        WorkloadArg::Seq4kBacking => vec![Workload::Seq4kBacking],
        WorkloadArg::Seq256k => vec![Workload::Seq256k],
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

/// A numeric flag with qemu's size syntax, named in the error.
fn number(flag: &str, value: &Option<String>, default: u64) -> anyhow::Result<u64> {
    match value {
        None => Ok(default),
        Some(v) => parse_size(v).with_context(|| format!("{flag} {v}")),
    }
}

/// A pattern byte: decimal, 0x hex or 0 octal, as qemu's strtoul with
/// base 0.
fn pattern_byte(s: &str) -> anyhow::Result<u8> {
    let parsed = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8)
    } else {
        s.parse::<u64>()
    };
    match parsed {
        Ok(v) if v <= 0xff => Ok(v as u8),
        _ => bail!("invalid pattern byte '{s}': expected a number from 0 to 255"),
    }
}

/// The benchmark's options from the flags, every value checked.
pub fn file_options(a: &Args) -> anyhow::Result<FileBenchOptions> {
    if a.json || a.hdd || a.extra {
        bail!("--json, --hdd and --extra belong to the simulated benchmarks (--sim)");
    }
    let d = FileBenchOptions::default();
    let format = a.format.as_deref().map(str::parse::<Format>).transpose()?;
    let cache = match &a.cache {
        None => d.cache,
        Some(c) => c.parse::<CacheMode>()?,
    };
    if let Some(aio) = &a.aio {
        if !matches!(aio.as_str(), "threads" | "native" | "io_uring") {
            bail!("invalid aio option '{aio}' (threads, native or io_uring)");
        }
    }
    let mut switches = d.switches;
    for name in &a.off {
        switches = switches.with(name, false).with_context(|| {
            format!(
                "--off {name}: unknown switch (known: {})",
                engine::Switches::NAMES.join(", ")
            )
        })?;
    }
    let opts = FileBenchOptions {
        format,
        cache,
        count: number("-c", &a.count, d.count)?,
        depth: number("-d", &a.depth, d.depth)?,
        buffer_size: number("-s", &a.buffer_size, d.buffer_size)?,
        offset: number("-o", &a.offset, d.offset)?,
        step: number("-S", &a.step, d.step)?,
        write: a.write,
        pattern: a.pattern.as_deref().map(pattern_byte).transpose()?,
        flush_interval: number("--flush-interval", &a.flush_interval, 0)?,
        drain: !a.no_drain,
        switches,
        force_share: a.force_share,
    };
    opts.validate()?;
    Ok(opts)
}

fn run_file(a: &Args, path: &Path, opts: &FileBenchOptions) -> anyhow::Result<i32> {
    if !path.exists() {
        bail!("{}: no such file", path.display());
    }
    let copy = if a.compare_qemu {
        let copy = TempFile(compare_copy_path(path));
        std::fs::copy(path, &copy.0).with_context(|| {
            format!(
                "copying {} to {} for qemu-img",
                path.display(),
                copy.0.display()
            )
        })?;
        // The fresh copy's pages are dirty in the page cache; written back
        // now, they cannot slow down qemu-img's O_DIRECT requests later.
        std::fs::File::open(&copy.0)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("syncing {}", copy.0.display()))?;
        Some(copy)
    } else {
        None
    };
    if a.force_share && opts.write {
        // qemu-img refuses -U with -w; this tool accepted it before it
        // locked at all, so it stays accepted, and says what it does.
        eprintln!(
            "qcsim: bench: -U has no effect on a write benchmark: {} is locked for writing",
            path.display()
        );
    }
    if !a.quiet {
        println!("{}", opts.header_line());
    }
    let report = run_file_bench(path, opts)?;
    if !a.quiet {
        print_report(&report);
    }
    if let Some(copy) = copy {
        let qemu_secs = run_qemu_bench(a, &copy.0, opts)?;
        print_comparison(&report, qemu_secs);
    }
    Ok(0)
}

fn print_report(r: &FileBenchReport) {
    println!("Run completed in {:.3} seconds.", r.elapsed.as_secs_f64());
    println!(
        "{:.0} IOPS, {:.2} MiB/s ({} {}, cache={})",
        r.iops(),
        r.mib_per_sec(),
        r.format,
        if r.write { "write" } else { "read" },
        r.cache
    );
    let d = &r.device;
    println!(
        "Device during the run: {} requests ({} reads, {} writes, {} write_zeroes, {} discards, {} flushes); {} bytes read, {} written, {} zeroed",
        d.requests(),
        d.reads,
        d.writes,
        d.write_zeroes,
        d.discards,
        d.flushes,
        d.bytes_read,
        d.bytes_written,
        d.bytes_zeroed
    );
    let c = &r.device_with_close;
    println!(
        "Close took {:.3} seconds; with it: {} device requests, {} bytes written, {} flushes",
        r.close_elapsed.as_secs_f64(),
        c.requests(),
        c.bytes_written,
        c.flushes
    );
    if let Some(e) = &r.engine {
        println!(
            "Engine during the run: {} guest flushes, {} clusters allocated, {}, {} overlap waits, {} L2 and {} refcount writebacks, {} device flushes",
            e.guest_flushes,
            e.clusters_allocated,
            sim::runner::cow_summary(e),
            e.overlap_waits,
            e.l2_writebacks,
            e.refcount_writebacks,
            e.device_flushes
        );
    }
}

/// A file removed when dropped, whatever happened.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Beside the image, so that both runs use the same file system.
fn compare_copy_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".qemu-bench-{}", std::process::id()));
    path.with_file_name(name)
}

/// The qemu-img bench command line for the same job.
pub fn qemu_bench_args(a: &Args, path: &Path, o: &FileBenchOptions, format: Format) -> Vec<String> {
    let mut v: Vec<String> = vec!["bench".into(), "-f".into(), format.name().into()];
    v.extend(["-t".into(), o.cache.name().into()]);
    v.extend(["-c".into(), o.count.to_string()]);
    v.extend(["-d".into(), o.depth.to_string()]);
    v.extend(["-s".into(), o.buffer_size.to_string()]);
    v.extend(["-o".into(), o.offset.to_string()]);
    v.extend(["-S".into(), o.effective_step().to_string()]);
    if let Some(aio) = &a.aio {
        v.extend(["-i".into(), aio.clone()]);
    }
    if a.native {
        v.push("-n".into());
    }
    if o.write {
        v.push("-w".into());
        if let Some(p) = o.pattern {
            v.push(format!("--pattern={p}"));
        }
        if o.flush_interval != 0 {
            v.push(format!("--flush-interval={}", o.flush_interval));
        }
        if !o.drain {
            v.push("--no-drain".into());
        }
    }
    v.push(path.display().to_string());
    v
}

/// Run qemu-img bench on `copy`; returns its time in seconds.
fn run_qemu_bench(a: &Args, copy: &Path, o: &FileBenchOptions) -> anyhow::Result<f64> {
    let format = match o.format {
        Some(f) => f,
        None => match tools::files::probe_path(copy)? {
            tools::files::Probed::Format(f) => f,
            tools::files::Probed::Foreign(name) => bail!("{}: {name} image", copy.display()),
        },
    };
    let args = qemu_bench_args(a, copy, o, format);
    let out = Command::new("qemu-img")
        .args(&args)
        .output()
        .context("running qemu-img (is it installed?)")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "qemu-img {} failed: {}{}",
            args.join(" "),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if !a.quiet {
        println!();
        println!("qemu-img {}", args.join(" "));
        print!("{stdout}");
    }
    parse_qemu_seconds(&stdout)
        .with_context(|| format!("no 'Run completed in' line in qemu-img's output:\n{stdout}"))
}

/// The seconds of qemu-img bench's "Run completed in X seconds." line.
pub fn parse_qemu_seconds(out: &str) -> Option<f64> {
    out.lines().find_map(|l| {
        l.strip_prefix("Run completed in ")?
            .strip_suffix(" seconds.")?
            .trim()
            .parse()
            .ok()
    })
}

fn print_comparison(r: &FileBenchReport, qemu_secs: f64) {
    let ours = r.elapsed.as_secs_f64();
    let per_sec = |secs: f64| r.requests as f64 / secs.max(1e-9);
    let mib = |secs: f64| per_sec(secs) * r.buffer_size as f64 / (1u64 << 20) as f64;
    let qemu = Duration::from_secs_f64(qemu_secs.max(0.0)).as_secs_f64();
    println!();
    println!(
        "{:<10} {:>10} {:>10} {:>10}",
        "", "seconds", "IOPS", "MiB/s"
    );
    println!(
        "{:<10} {:>10.3} {:>10.0} {:>10.2}",
        "qcsim",
        ours,
        per_sec(ours),
        mib(ours)
    );
    println!(
        "{:<10} {:>10.3} {:>10.0} {:>10.2}",
        "qemu-img",
        qemu,
        per_sec(qemu),
        mib(qemu)
    );
    println!(
        "speed ratio qcsim/qemu-img: {:.2} (above 1: qcsim faster)",
        qemu / ours.max(1e-9)
    );
}
