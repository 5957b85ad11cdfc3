//! `qcsim disk-replay LOG`: a request log written by `qcsim serve --sim
//! --record` run again without the client that drove it, on a fresh
//! simulation: the same disk, bit for bit. It prints what the log held and
//! can write the disk's content (what a clean shutdown writes), its durable
//! state (what survives any crash), and its crash states (each pending
//! write landed whole or not at all, the all-durable state first).

use std::path::PathBuf;

use anyhow::Context;
use sim::served::reqlog;

use super::serve::sim::store;

#[derive(clap::Args)]
pub struct Args {
    /// The request log.
    pub log: PathBuf,
    /// Write the disk's content (every completed write) here, raw.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Write the disk's durable state here, raw.
    #[arg(long, value_name = "FILE")]
    pub durable: Option<PathBuf>,
    /// Write the crash states here, as crash-K.raw.
    #[arg(long, value_name = "DIR")]
    pub crash_dir: Option<PathBuf>,
    /// The most crash states --crash-dir gets (each pending write landed
    /// whole or not).
    #[arg(long, value_name = "N", default_value_t = 16, requires = "crash_dir")]
    pub crash_states: u64,
    /// Instead, the states a `--driver qemu` run judged at this crash: the
    /// all-durable one, then N drawn from --crash-seed's crash stream.
    #[arg(long, value_name = "N", requires = "crash_dir")]
    pub samples: Option<u32>,
    /// The seed of --samples (the case's seed plus the epoch's number).
    #[arg(long, value_name = "S", default_value_t = 0, requires = "samples")]
    pub crash_seed: u64,
    /// The substream of --crash-seed's crash stream --samples draws from:
    /// 0 for the image's disk, 1 for an external data file's.
    #[arg(long, value_name = "I", default_value_t = 0, requires = "samples")]
    pub crash_stream: u32,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let file = std::fs::File::open(&args.log)
        .with_context(|| format!("{}: cannot open the request log", args.log.display()))?;
    let replayed =
        reqlog::replay(file).with_context(|| format!("{}: replaying", args.log.display()))?;
    let disk = replayed.disk.disk();
    let c = disk.counters();
    println!(
        "{} requests ({}): {} reads, {} writes ({} FUA), {} write zeroes, {} discards, {} flushes",
        replayed.requests,
        if replayed.closed {
            "the log was closed"
        } else {
            "the log was cut short"
        },
        c.reads,
        c.writes,
        c.fua_writes,
        c.write_zeroes,
        c.discards,
        c.flushes
    );
    println!(
        "{} requests in flight, {} writes not durable; content {:016x}, durable {:016x}",
        replayed.disk.in_flight(),
        disk.pending_count(),
        disk.volatile().content_hash(),
        disk.durable().content_hash()
    );
    if let Some(out) = &args.out {
        store(out, &disk.volatile())?;
    }
    if let Some(out) = &args.durable {
        store(out, &disk.durable())?;
    }
    if let Some(dir) = &args.crash_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot make the directory", dir.display()))?;
        if let Some(samples) = args.samples {
            let states =
                crate::qemu::disk::crash_states(disk, samples, args.crash_seed, args.crash_stream)?;
            for (k, state) in states.iter().enumerate() {
                store(&dir.join(format!("crash-{k}.raw")), state)?;
            }
            println!(
                "{} crash states written to {} (the all-durable one, then {samples} drawn from seed {}, crash stream {})",
                states.len(),
                dir.display(),
                args.crash_seed,
                args.crash_stream
            );
            return Ok(0);
        }
        let states = disk
            .crash_states_by_write(args.crash_states)
            .context("crash states")?;
        let total = states.total();
        let mut n = 0u64;
        for (k, state) in states.enumerate() {
            store(&dir.join(format!("crash-{k}.raw")), &state.content)?;
            n += 1;
        }
        println!(
            "{n} crash states written to {} (of {})",
            dir.display(),
            total.map_or("more than 2^64".to_string(), |t| t.to_string())
        );
    }
    Ok(0)
}
