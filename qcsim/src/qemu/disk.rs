//! One epoch's simulated disk for the QEMU driver (the image's, or an
//! external data file's): a thread that serves a
//! `sim::served::ServedDisk` over NBD on a Unix socket (the disk and its
//! simulation are `!Send`, so they live and die on that thread), records
//! its request log, and at the end builds what the caller asks for from
//! the disk as it stands: its content, and at a crash its crash states,
//! written as files, so that nothing `!Send` crosses back.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use nbd::{Limits, Listener, Server, ShutdownHandle};
use sim::disk::{DiskCounters, DiskOptions};
use sim::rng::{substream, Stream};
use sim::served::ServedDisk;

use crate::cli::serve::sim::{load, store, SimExport};

/// What an epoch's disk is.
pub struct DiskPlan {
    /// The disk's content at the start, raw.
    pub content: PathBuf,
    pub seed: u64,
    pub options: DiskOptions,
    pub socket: PathBuf,
    pub log: PathBuf,
}

/// What to build when the epoch ends.
pub enum EndPlan {
    /// A clean end: the content (every completed write) to `out`.
    Clean { out: PathBuf },
    /// A crash: crash states to `dir` as `{name}-K.raw` (see
    /// [`crash_states`]), drawn from substream `stream` of the crash
    /// stream of `crash_seed`.
    Crash {
        dir: PathBuf,
        name: &'static str,
        samples: u32,
        crash_seed: u64,
        stream: u32,
    },
}

/// What the epoch's disk did.
pub struct DiskEnd {
    pub counters: DiskCounters,
    /// The files written: the content, or the crash states in order.
    pub files: Vec<PathBuf>,
}

pub struct DiskThread {
    stop: ShutdownHandle,
    end: mpsc::Sender<EndPlan>,
    thread: JoinHandle<anyhow::Result<DiskEnd>>,
}

/// The crash states a crash of `disk` is judged by: the all-durable state
/// (every pending write lost) first, then `samples` drawn from substream
/// `stream` of the crash stream of `crash_seed` (0 for the image's disk,
/// `sim::runner::DATA_CRASH_STREAM` for a data file's, as in-process runs
/// draw them, so that the two disks' choices are independent). `qcsim
/// disk-replay LOG --samples N --crash-seed S --crash-stream I` builds the
/// same ones from the epoch's request log.
pub fn crash_states(
    disk: &sim::disk::SimDisk,
    samples: u32,
    crash_seed: u64,
    stream: u32,
) -> anyhow::Result<Vec<sim::disk::SparseStore>> {
    let mut out = Vec::new();
    let first = disk
        .crash_states_by_write(1)
        .context("crash states")?
        .next()
        .ok_or_else(|| anyhow!("no crash state"))?;
    out.push(first.content);
    let mut rng = substream(crash_seed, Stream::Crash, stream);
    for _ in 0..samples {
        out.push(disk.crash_image(&mut rng).context("a crash state")?.content);
    }
    Ok(out)
}

impl DiskThread {
    /// Start serving; returns once the socket answers.
    pub fn start(plan: DiskPlan) -> anyhow::Result<DiskThread> {
        let (ready_tx, ready_rx) = mpsc::channel::<anyhow::Result<ShutdownHandle>>();
        let (end_tx, end_rx) = mpsc::channel::<EndPlan>();
        let socket = plan.socket.clone();
        let thread = std::thread::Builder::new()
            .name("sim-disk".into())
            .spawn(move || serve(plan, ready_tx, end_rx))
            .context("starting the disk's thread")?;
        let stop = match ready_rx.recv() {
            Ok(Ok(stop)) => stop,
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(match thread.join() {
                    Ok(Err(e)) => e,
                    _ => anyhow!("the disk's thread ended before serving"),
                })
            }
        };
        wait_for(&socket)?;
        Ok(DiskThread {
            stop,
            end: end_tx,
            thread,
        })
    }

    /// Stop serving (requests started finish) and build what `end` asks.
    pub fn finish(self, end: EndPlan) -> anyhow::Result<DiskEnd> {
        let _ = self.end.send(end);
        self.stop.shutdown();
        match self.thread.join() {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the disk's thread panicked")),
        }
    }
}

/// Wait until `socket` exists (a loaded machine may take a while).
pub fn wait_for(socket: &Path) -> anyhow::Result<()> {
    let start = Instant::now();
    while !socket.exists() {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(anyhow!("{}: no socket after 60 s", socket.display()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn serve(
    plan: DiskPlan,
    ready: mpsc::Sender<anyhow::Result<ShutdownHandle>>,
    end: mpsc::Receiver<EndPlan>,
) -> anyhow::Result<DiskEnd> {
    let started = (|| {
        let content = load(&plan.content, None)?;
        let mut disk = ServedDisk::new(plan.seed, plan.options.clone(), content)
            .context("the simulated disk's options")?;
        let log = std::fs::File::create(&plan.log)
            .with_context(|| format!("{}: cannot write the request log", plan.log.display()))?;
        disk.record(Box::new(log))
            .context("starting the request log")?;
        let listener = Listener::unix(&plan.socket)?;
        // The server's own messages say nothing a run needs.
        let quiet: nbd::Log = Arc::new(|_: &str| {});
        let server = Server::new(listener, Limits::default(), quiet);
        anyhow::Ok((disk, server))
    })();
    let (disk, server) = match started {
        Ok(v) => v,
        Err(e) => {
            let _ = ready.send(Err(anyhow!("{e:#}")));
            return Err(e);
        }
    };
    let _ = ready.send(Ok(server.shutdown_handle()));
    let export = SimExport::new(disk, plan.content.clone(), false);
    let (export, served) = server.run(export);
    let (mut disk, broken) = export.into_disk();
    served?;
    if let Some(why) = broken {
        return Err(anyhow!("the simulated disk stopped serving: {why}"));
    }
    disk.finish_log().context("the request log")?;
    let d = disk.disk();
    let mut files = Vec::new();
    match end.recv().map_err(|_| anyhow!("no end plan"))? {
        EndPlan::Clean { out } => {
            store(&out, &d.volatile())?;
            files.push(out);
        }
        EndPlan::Crash {
            dir,
            name,
            samples,
            crash_seed,
            stream,
        } => {
            for (k, state) in crash_states(d, samples, crash_seed, stream)?
                .iter()
                .enumerate()
            {
                let path = dir.join(format!("{name}-{k}.raw"));
                store(&path, state)?;
                files.push(path);
            }
        }
    }
    Ok(DiskEnd {
        counters: d.counters(),
        files,
    })
}
