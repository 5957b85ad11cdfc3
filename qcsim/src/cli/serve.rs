//! `qcsim serve`: the guest view of an image exported over NBD (the `nbd`
//! crate's server, on a Unix socket or TCP), so that QEMU, the kernel's
//! NBD client or anything else that speaks NBD uses the image through the
//! engine. The image is opened (and locked) first, then the socket is
//! made, so a socket that exists is one that answers. SIGINT or SIGTERM
//! stops the server: requests already started finish and are answered,
//! then the image gets the clean close every command gives it (flush,
//! refcounts written back, dirty bit cleared) and a Unix socket's file is
//! removed; the engine's counts of the clients' requests (FUA ones among
//! them) are printed first. With `--record TRACE`, every request clients
//! send is written to a trace (`serve::record`).

mod image;
mod record;
pub mod sim;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use nbd::{Export, Limits, Listener, Server};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use tools::files::{open_image, Format, OpenOptions};

use image::ImageExport;
use record::Recording;

#[derive(clap::Args)]
pub struct Args {
    /// Listen on this Unix socket (it must not exist; removed at exit).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["port", "bind"])]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP port (0: one the system picks, printed).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// The address to listen on with --port.
    #[arg(
        long,
        value_name = "ADDR",
        requires = "port",
        default_value = "127.0.0.1"
    )]
    pub bind: String,
    /// Export the image read-only (opened read-only).
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// Image format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    pub format: Option<String>,
    /// Bypass the host page cache (O_DIRECT), as qemu-img's `-t none`.
    #[arg(short = 'n', long = "nocache")]
    pub nocache: bool,
    /// Write every request clients send to this trace file.
    #[arg(long, value_name = "TRACE")]
    pub record: Option<PathBuf>,
    /// Export a simulated disk (volatile cache, Linux flush and FUA rules)
    /// whose content FILE holds, raw, instead of an image's guest view:
    /// storage for a driver that runs on NBD (QEMU's qcow2 driver with
    /// `file.driver=nbd`). FILE is read at the start and written with the
    /// disk's content at a clean shutdown; with --record, the request log
    /// that replays the session without its client is written.
    #[arg(long, conflicts_with_all = ["format", "nocache"])]
    pub sim: bool,
    /// With --sim: create FILE with this many bytes of zeroes if it does
    /// not exist (a number with an optional K, M, G or T suffix).
    #[arg(long, value_name = "SIZE", requires = "sim", value_parser = parse_size)]
    pub sim_size: Option<u64>,
    /// With --sim: the simulation's seed (latencies, completion order).
    #[arg(long, value_name = "N", requires = "sim", default_value_t = 0)]
    pub sim_seed: u64,
    /// With --sim: the most bytes of completed writes the disk's volatile
    /// cache holds before it writes the oldest back (K, M, G suffixes).
    #[arg(long, value_name = "SIZE", requires = "sim", default_value = "256M", value_parser = parse_size)]
    pub sim_cache: u64,
    /// With --sim: a deliberately broken disk whose flushes (and FUA
    /// writes) complete without making anything durable.
    #[arg(long, requires = "sim")]
    pub disk_ignores_flush: bool,
    /// Image file (with --sim: the simulated disk's content, raw).
    pub file: PathBuf,
}

/// A size: a number with an optional K, M, G or T suffix (powers of 1024),
/// not 0.
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{s:?}: unknown unit {c:?} (K, M, G or T)")),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number of bytes, e.g. 64M"))?;
    let v = n
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?}: too large"))?;
    if v == 0 {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(v)
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.socket.is_none() && args.port.is_none() {
        bail!("say where to listen: --socket PATH or --port N");
    }
    if args.sim {
        return run_sim(args);
    }
    let format = args
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let opts = OpenOptions {
        format,
        read_only: args.read_only,
        direct: args.nocache,
        ..OpenOptions::default()
    };
    // Before anything can be served: a signal from now on stops the server
    // cleanly instead of killing the process with the image open.
    let signals = Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    // The trace file first: a bad path fails before the image is opened.
    let trace = match &args.record {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("{}: cannot write the trace", path.display()))?,
        ),
        None => None,
    };
    let disk = futures::executor::block_on(open_image(&args.file, &opts))?;
    let export = ImageExport::new(disk, args.file.clone(), args.read_only);
    let listener = match listen(&args) {
        Ok(l) => l,
        Err(e) => {
            close(export, &args)?;
            return Err(e.into());
        }
    };
    let info = export.info();
    eprintln!(
        "qcsim serve: {} ({} bytes{}) on {}",
        args.file.display(),
        info.size,
        if info.read_only { ", read-only" } else { "" },
        listener.describe()
    );
    let (server, watcher) = server_and_watcher(listener, signals);

    // The image is closed however serving ends.
    let (export, served) = match (&args.record, trace) {
        (None, _) | (_, None) => {
            let (export, served) = server.run(export);
            (export, served.map_err(anyhow::Error::new))
        }
        (Some(path), Some(trace)) => {
            let header = vec![format!(
                "recorded by qcsim serve from {} ({} bytes)",
                args.file.display(),
                info.size
            )];
            match Recording::start(export, trace, path, &header) {
                Err((export, e)) => (
                    export,
                    Err(anyhow::Error::new(e)
                        .context(format!("{}: cannot write the trace", path.display()))),
                ),
                Ok(recording) => {
                    let (recording, served) = server.run(recording);
                    let (export, written) = recording.finish();
                    let result = served.map_err(anyhow::Error::new).and_then(|()| {
                        written.map_err(|(path, e)| {
                            anyhow::anyhow!("{}: writing the trace: {e}", path.display())
                        })
                    });
                    (export, result)
                }
            }
        }
    };
    watcher.stop();
    // What the clients asked of the engine (FUA requests among them),
    // before the close adds requests of its own.
    if let Some(counts) = export.summary() {
        eprintln!("qcsim serve: engine: {counts}");
    }
    let closed = close(export, &args);
    served?;
    closed?;
    eprintln!("qcsim serve: {} closed", args.file.display());
    Ok(0)
}

fn close(export: ImageExport, args: &Args) -> anyhow::Result<()> {
    futures::executor::block_on(export.close())
        .with_context(|| format!("closing {}", args.file.display()))
}

/// The listener the arguments ask for.
fn listen(args: &Args) -> Result<Listener, nbd::ListenError> {
    match &args.socket {
        Some(path) => Listener::unix(path),
        None => {
            let port = args.port.expect("checked by run");
            // An IPv6 address needs brackets before its port.
            let addr = if args.bind.contains(':') && !args.bind.starts_with('[') {
                format!("[{}]:{port}", args.bind)
            } else {
                format!("{}:{port}", args.bind)
            };
            Listener::tcp(&addr)
        }
    }
}

/// The thread that turns the first SIGINT or SIGTERM into a clean stop.
struct Watcher {
    handle: signal_hook::iterator::Handle,
    thread: std::thread::JoinHandle<()>,
}

impl Watcher {
    fn stop(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// A server on `listener`, and the thread that stops it on a signal.
fn server_and_watcher(listener: Listener, mut signals: Signals) -> (Server, Watcher) {
    let log: nbd::Log = Arc::new(|line: &str| eprintln!("qcsim serve: {line}"));
    let server = Server::new(listener, Limits::default(), log);
    let stop = server.shutdown_handle();
    let handle = signals.handle();
    let thread = std::thread::spawn(move || {
        // The first signal stops the server; later ones are taken here too
        // (not killing the process) while the export closes.
        if let Some(sig) = signals.forever().next() {
            eprintln!("qcsim serve: signal {sig}: finishing requests, closing the export");
            stop.shutdown();
        }
    });
    (server, Watcher { handle, thread })
}

/// `qcsim serve --sim`: the simulated disk whose content `args.file` holds.
fn run_sim(args: Args) -> anyhow::Result<i32> {
    let signals = Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    let log_file = match &args.record {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("{}: cannot write the request log", path.display()))?,
        ),
        None => None,
    };
    let content = sim::load(&args.file, args.sim_size)?;
    let mut options = sim::options(args.sim_cache);
    options.faults.ignores_flush = args.disk_ignores_flush;
    let mut disk = ::sim::served::ServedDisk::new(args.sim_seed, options, content)
        .context("the simulated disk's options")?;
    if let (Some(path), Some(f)) = (&args.record, log_file) {
        disk.record(Box::new(f))
            .with_context(|| format!("{}: cannot write the request log", path.display()))?;
    }
    let export = sim::SimExport::new(disk, args.file.clone(), args.read_only);
    let listener = listen(&args)?;
    let info = export.info();
    eprintln!(
        "qcsim serve: simulated disk {} ({} bytes{}, seed {}) on {}",
        args.file.display(),
        info.size,
        if info.read_only { ", read-only" } else { "" },
        args.sim_seed,
        listener.describe()
    );
    let (server, watcher) = server_and_watcher(listener, signals);
    let (export, served) = server.run(export);
    watcher.stop();
    let c = export.counters();
    eprintln!(
        "qcsim serve: simulated disk: {} reads, {} writes ({} FUA), {} write zeroes, {} discards, {} flushes",
        c.reads, c.writes, c.fua_writes, c.write_zeroes, c.discards, c.flushes
    );
    let (mut disk, broken) = export.into_disk();
    served?;
    if let Some(why) = broken {
        bail!("the simulated disk stopped serving: {why}");
    }
    disk.finish_log().context("the request log")?;
    // A clean shutdown: the disk writes its cache back, so the file gets
    // every completed write.
    if !args.read_only {
        sim::store(&args.file, &disk.disk().volatile())?;
    }
    eprintln!("qcsim serve: {} written", args.file.display());
    Ok(0)
}
