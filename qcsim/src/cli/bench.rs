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
//!   on a fresh copy of the image and prints both side by side. The flags,
//!   the job and the qemu-img run are `tools::bench`'s; this module prints
//!   them (the engine's line in `sim::runner::cow_summary`'s words, as
//!   `qcsim run` prints it).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use sim::bench::{render_table, run_all_with, Workload, COLUMN_KEY};
use tools::bench::{FileBench, FileBenchFlags, FileBenchReport};
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
    /// --sim: also time each job on the rotating-disk model (runs every job
    /// twice), and compare write_zeroes with zero buffers as seed 001 did.
    #[arg(long)]
    pub hdd: bool,
    /// --sim: add rows with delayed_cow off and then zero_cow and merge_cow
    /// off, where those two switches show their worth, and the seq256k job
    /// (multi-cluster requests), where multi_cluster shows its worth.
    #[arg(long)]
    pub extra: bool,
    /// --sim: where the rows are written as JSON lines beside the table
    /// (the input of `qcsim campaign --bench-json`); `-` writes none.
    #[arg(long, value_name = "FILE", default_value = "reports/bench-sim.json")]
    pub json_out: PathBuf,

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
    run_file(&a, &path)
}

fn run_sim(a: &Args) -> anyhow::Result<i32> {
    let size = parse_size(&a.size).with_context(|| format!("--size {}", a.size))?;
    let workloads: Vec<Workload> = match a.workload {
        WorkloadArg::Seq4k => vec![Workload::Seq4k],
        WorkloadArg::Seq4kBacking => vec![Workload::Seq4kBacking],
        WorkloadArg::Seq256k => vec![Workload::Seq256k],
        WorkloadArg::All => Workload::ALL.to_vec(),
    };
    let jobs_per_workload = sim::bench::switch_rows().len()
        + if a.extra {
            sim::bench::extra_switch_rows().len()
        } else {
            0
        };
    let workload_count = workloads.len() + if a.extra { Workload::EXTRA.len() } else { 0 };
    let bar = crate::progress::bar(
        "bench",
        (jobs_per_workload * workload_count) as u64,
        "jobs",
        a.quiet,
    );
    let rows = run_all_with(&workloads, size, a.hdd, a.extra, &mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    let rows = rows?;
    let mut lines = String::new();
    for r in &rows {
        lines.push_str(&serde_json::to_string(r)?);
        lines.push('\n');
    }
    if a.json {
        print!("{lines}");
    } else {
        print!("{}", render_table(&rows));
        println!("key:");
        for (column, meaning) in COLUMN_KEY {
            // The HDD column is there only with --hdd.
            if *column != "hdd ms" || a.hdd {
                println!("  {column:<16} {meaning}");
            }
        }
    }
    if !a.json {
        // FUA writes beside write then flush: eight more jobs of the same
        // size (sim::bench::fua).
        println!();
        print!(
            "{}",
            sim::bench::render_fua_table(&sim::bench::run_fua_jobs(size)?)
        );
    }
    if a.hdd && !a.json {
        // Seed 001's HDD figure: write_zeroes against zero buffers, on
        // both disk models (four more jobs of the same size).
        println!();
        print!("{}", sim::bench::seed_001(size)?.render());
    }
    if a.json_out.as_os_str() != "-" {
        write_atomically(&a.json_out, lines.as_bytes())?;
        if !a.json {
            println!("json: {}", a.json_out.display());
        }
    }
    Ok(0)
}

/// Write `bytes` to `path` through a temporary file beside it, so a failed
/// write leaves the old file whole; the directory is made if need be.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory {}", dir.display()))?;
    }
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?;
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", path.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
}

/// The file benchmark's flags, for `tools::bench` to parse.
fn file_flags(a: &Args) -> FileBenchFlags {
    FileBenchFlags {
        count: a.count.clone(),
        depth: a.depth.clone(),
        format: a.format.clone(),
        cache: a.cache.clone(),
        buffer_size: a.buffer_size.clone(),
        offset: a.offset.clone(),
        step: a.step.clone(),
        aio: a.aio.clone(),
        native: a.native,
        write: a.write,
        pattern: a.pattern.clone(),
        flush_interval: a.flush_interval.clone(),
        no_drain: a.no_drain,
        force_share: a.force_share,
        off: a.off.clone(),
    }
}

fn run_file(a: &Args, path: &Path) -> anyhow::Result<i32> {
    if a.json || a.hdd || a.extra {
        bail!("--json, --hdd and --extra belong to the simulated benchmarks (--sim)");
    }
    let opts = file_flags(a).parse()?;
    let bench = FileBench::new(path, &opts, a.compare_qemu)?;
    if opts.force_share_ignored() {
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
    let report = bench.run()?;
    if !a.quiet {
        print_report(&report);
    }
    if let Some(qemu) = bench.run_qemu() {
        let qemu = qemu?;
        if !a.quiet {
            println!();
            println!("{}", qemu.command_line());
            print!("{}", qemu.stdout);
        }
        print_comparison(&report, qemu.elapsed()?.as_secs_f64());
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
        "Device during the run: {} requests ({} reads, {} writes, {} write_zeroes, {} discards, {} flushes); {} bytes read, {} written, {} zeroed; {} of the requests ran alone on the bench's thread, the rest on I/O workers",
        d.requests(),
        d.reads,
        d.writes,
        d.write_zeroes,
        d.discards,
        d.flushes,
        d.bytes_read,
        d.bytes_written,
        d.bytes_zeroed,
        r.alone_runs
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

/// Both runs side by side; `qemu` is qemu-img's time in seconds.
fn print_comparison(r: &FileBenchReport, qemu: f64) {
    let ours = r.elapsed.as_secs_f64();
    let per_sec = |secs: f64| r.iops_over(secs);
    let mib = |secs: f64| r.mib_per_sec_over(secs);
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
