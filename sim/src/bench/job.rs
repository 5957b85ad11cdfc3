//! One benchmark job: a fresh image (with or without a raw backing file) on
//! a quiet `SimDisk`, a list of guest writes issued one at a time, then one
//! guest flush; the counters it moved become a `Row`.

use std::rc::Rc;

use serde::Serialize;

use engine::{Backing, Counters, CreateOptions, EngineOptions, Image, Switches};

use crate::disk::{DiskCounters, DiskOptions, LatencyOptions, SimDisk, SparseStore};
use crate::exec::{ExecError, ExecOptions, Nanos, Sim};

/// Cluster size of every benchmark image.
pub const CLUSTER_SIZE: u64 = 64 << 10;
/// Guest request size of the sequential jobs.
pub const REQUEST_SIZE: u64 = 4 << 10;
/// The seed of every benchmark simulation: fixed, so rows are reproducible.
const SEED: u64 = 0x5eed_be4c;
/// Largest `size` a job accepts: the simulated disks hold their data in
/// memory (image and backing file each), so this bounds what a typo costs.
pub const SIZE_MAX: u64 = 4 << 30;

/// The benchmark workloads: the two jobs issue 5 names, and one more that
/// `--extra` adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// 4 KiB sequential writes into an image without backing file.
    #[serde(rename = "seq4k")]
    Seq4k,
    /// The same, into an overlay on a full raw backing file of the same size.
    #[serde(rename = "seq4k-backing")]
    Seq4kBacking,
    /// 256 KiB sequential writes (four whole clusters each) into an image
    /// without backing file: the multi-cluster requests of seed 002, which
    /// 4 KiB writes never make.
    #[serde(rename = "seq256k")]
    Seq256k,
}

impl Workload {
    /// The two jobs of the benchmark.
    pub const ALL: [Workload; 2] = [Workload::Seq4k, Workload::Seq4kBacking];
    /// Jobs `--extra` adds.
    pub const EXTRA: [Workload; 1] = [Workload::Seq256k];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Seq4k => "seq4k",
            Workload::Seq4kBacking => "seq4k-backing",
            Workload::Seq256k => "seq256k",
        }
    }

    /// The size of each guest write.
    pub fn request_size(self) -> u64 {
        match self {
            Workload::Seq4k | Workload::Seq4kBacking => REQUEST_SIZE,
            Workload::Seq256k => 4 * CLUSTER_SIZE,
        }
    }

    pub fn has_backing(self) -> bool {
        matches!(self, Workload::Seq4kBacking)
    }
}

/// Why a job could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("size {size} is not a positive multiple of {unit} bytes")]
    BadSize { size: u64, unit: u64 },
    #[error("size {size} is larger than the benchmark's limit of {max} bytes")]
    TooLarge { size: u64, max: u64 },
    #[error("write of {len} bytes at {offset} is outside the {size}-byte image")]
    BadOp { offset: u64, len: u64, size: u64 },
    #[error("{workload} with switches {switches:?}: engine error while {during}")]
    Engine {
        workload: &'static str,
        switches: Switches,
        during: &'static str,
        #[source]
        source: engine::Error,
    },
    #[error("{workload}: the simulation stopped", workload = .1)]
    Exec(#[source] ExecError, &'static str),
}

/// A guest request of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestOp {
    Write {
        offset: u64,
        len: u64,
    },
    /// A write flagged FUA (`Image::write_fua`).
    WriteFua {
        offset: u64,
        len: u64,
    },
    Flush,
    /// Count from here: what came before (filling the image) is set-up,
    /// not the job.
    StartCounting,
}

/// Everything one job depends on.
#[derive(Debug, Clone)]
pub struct JobSetup {
    pub workload: Workload,
    /// Virtual size of the image (and of the backing file).
    pub size: u64,
    pub switches: Switches,
    /// `EngineOptions::grow_ahead` (the engine's default in the benchmark).
    pub grow_ahead: u64,
    pub latency: LatencyOptions,
    /// Keep the image disk's write log (offsets only, no payloads), for
    /// tests that look at where each device write went.
    pub log: bool,
}

/// What a job measured: one line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub workload: Workload,
    pub switches: SwitchMap,
    pub guest_writes: u64,
    pub guest_bytes: u64,
    pub guest_flushes: u64,
    /// Requests that change the image disk's content: data writes,
    /// write_zeroes and discards.
    pub device_write_requests: u64,
    /// Data writes alone.
    pub device_data_writes: u64,
    /// Bytes that crossed the bus to the image disk: data writes, and zero
    /// buffers where zeroing was not efficient.
    pub device_bytes_written: u64,
    pub device_write_zeroes: u64,
    pub device_write_zeroes_bytes: u64,
    /// Writes and write_zeroes that extended the image file (each costs the
    /// latency model's `extend`): what growing ahead saves.
    pub device_extends: u64,
    pub device_reads: u64,
    pub device_bytes_read: u64,
    pub device_flushes: u64,
    /// Bytes read from the backing file's disk (exact, from its counters).
    pub backing_bytes_read: u64,
    pub cow_created: u64,
    /// Wholly or in part.
    pub cow_cancelled: u64,
    pub cow_cancelled_whole: u64,
    pub cow_cancelled_partial: u64,
    pub cow_performed: u64,
    pub cow_bytes_written: u64,
    pub zeroing_requests: u64,
    pub zeroing_fallbacks: u64,
    /// write_zeroes that grew the file ahead of allocation (zero_cow).
    pub grow_requests: u64,
    /// Zero COW ranges that needed no request: growing had zeroed them.
    pub cow_already_zero: u64,
    pub alloc_joins: u64,
    pub clusters_allocated: u64,
    pub l2_writebacks: u64,
    pub refcount_writebacks: u64,
    /// Simulated time from the first guest write to the end of the flush,
    /// on the SSD model.
    pub sim_time_ns: Nanos,
    /// The same on the HDD model, when asked for (it costs a second run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_time_hdd_ns: Option<Nanos>,
}

/// The five switches as a JSON object of name -> bool, in `NAMES` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchMap(pub Switches);

impl Serialize for SwitchMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(Switches::NAMES.len()))?;
        for (name, on) in self.0.iter() {
            m.serialize_entry(name, &on)?;
        }
        m.end()
    }
}

/// A finished job, with the simulation, disk and image kept so that tests
/// can look further (the write log, host offsets, reads).
pub struct Observed {
    pub row: Row,
    pub sim: Sim,
    pub disk: SimDisk,
    pub image: Rc<Image<SimDisk>>,
    pub engine: Counters,
    pub device: DiskCounters,
}

/// The guest requests of the 4 KiB sequential jobs: `size / 4 KiB` writes
/// in order, then one flush.
pub fn sequential_ops(size: u64) -> impl Iterator<Item = GuestOp> {
    sequential_ops_of(size, REQUEST_SIZE)
}

/// `size / request` sequential writes of `request` bytes, then one flush.
pub fn sequential_ops_of(size: u64, request: u64) -> impl Iterator<Item = GuestOp> {
    (0..size / request)
        .map(move |i| GuestOp::Write {
            offset: i * request,
            len: request,
        })
        .chain(std::iter::once(GuestOp::Flush))
}

/// The byte guest write number `id` puts at guest offset `off`: never zero
/// and never what the backing file holds there, so a read names its source.
pub fn guest_byte(id: u64, off: u64) -> u8 {
    ((id.wrapping_mul(31) + off / 512) % 127) as u8 * 2 + 2
}

/// The byte the backing file holds at offset `off` (odd, so never zero and
/// never a guest byte).
pub fn backing_byte(off: u64) -> u8 {
    ((off / 512).wrapping_mul(7) % 127) as u8 * 2 + 1
}

/// Run one sequential job and return its row; with `hdd`, run it again on
/// the rotating disk (`LatencyOptions::rotating`) for its simulated time.
pub fn run_job(
    workload: Workload,
    size: u64,
    switches: Switches,
    hdd: bool,
) -> Result<Row, BenchError> {
    let setup = JobSetup {
        workload,
        size,
        switches,
        grow_ahead: EngineOptions::default().grow_ahead,
        latency: LatencyOptions::ssd(),
        log: false,
    };
    let mut row = run_job_with(&setup, sequential_ops_of(size, workload.request_size()))?.row;
    if hdd {
        let hdd_setup = JobSetup {
            latency: LatencyOptions::rotating(),
            ..setup
        };
        let other = run_job_with(&hdd_setup, sequential_ops_of(size, workload.request_size()))?.row;
        row.sim_time_hdd_ns = Some(other.sim_time_ns);
    }
    Ok(row)
}

/// Run `ops` one at a time on a fresh image as `setup` says.
pub fn run_job_with(
    setup: &JobSetup,
    ops: impl IntoIterator<Item = GuestOp> + 'static,
) -> Result<Observed, BenchError> {
    let size = setup.size;
    if size == 0 || !size.is_multiple_of(CLUSTER_SIZE) {
        return Err(BenchError::BadSize {
            size,
            unit: CLUSTER_SIZE,
        });
    }
    if size > SIZE_MAX {
        return Err(BenchError::TooLarge {
            size,
            max: SIZE_MAX,
        });
    }
    let name = setup.workload.name();
    let switches = setup.switches;
    let engine_err = move |during: &'static str| {
        move |source: engine::Error| BenchError::Engine {
            workload: name,
            switches,
            during,
            source,
        }
    };

    // Enough polls for a few hundred thousand requests per MiB is far more
    // than any job needs; the default limit is sized for 256 MiB.
    let exec = ExecOptions {
        steps_max: (size >> 10).saturating_mul(2_000).max(20_000_000),
        time_max: Nanos::MAX,
        ..ExecOptions::default()
    };
    let sim = Sim::with_options(SEED, exec);

    let backing = if setup.workload.has_backing() {
        // Filled a mebibyte at a time, so only the store holds the data.
        let mut store = SparseStore::new();
        let mut piece = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < size {
            let n = (size - at).min(piece.len() as u64) as usize;
            for (i, sector) in piece[..n].chunks_mut(512).enumerate() {
                sector.fill(backing_byte(at + i as u64 * 512));
            }
            store.write(at, &piece[..n]);
            at += n as u64;
        }
        Some(
            SimDisk::with_content(&sim, quiet_options(LatencyOptions::ssd(), false), store)
                .expect("quiet disk options are valid"),
        )
    } else {
        None
    };
    let disk = SimDisk::new(&sim, quiet_options(setup.latency.clone(), setup.log))
        .expect("quiet disk options are valid");

    let create = CreateOptions {
        size,
        cluster_size: CLUSTER_SIZE,
        backing_file: backing.as_ref().map(|_| "backing.raw".to_string()),
        backing_format: backing.as_ref().map(|_| "raw".to_string()),
        ..CreateOptions::default()
    };
    let eopts = EngineOptions {
        switches,
        grow_ahead: setup.grow_ahead,
        ..EngineOptions::default()
    };
    let d = disk.clone();
    let b = backing.clone();
    let s = sim.clone();
    let ops: Vec<GuestOp> = ops.into_iter().collect();
    let out = sim
        .block_on(async move {
            Image::create(&d, &create)
                .await
                .map_err(engine_err("creating the image"))?;
            let mut img = Image::open(d.clone(), eopts)
                .await
                .map_err(engine_err("opening the image"))?;
            if let Some(b) = &b {
                img.attach_backing(Backing::Raw(b.clone()));
            }
            let counts = |img: &Image<SimDisk>| {
                (
                    s.now(),
                    d.counters(),
                    img.counters(),
                    b.as_ref().map(|b| b.counters().read_bytes).unwrap_or(0),
                )
            };
            let mut start = counts(&img);
            let mut buf = Vec::new();
            for (id, op) in ops.into_iter().enumerate() {
                match op {
                    GuestOp::Write { offset, len } | GuestOp::WriteFua { offset, len } => {
                        if offset.checked_add(len).is_none_or(|end| end > size) {
                            return Err(BenchError::BadOp { offset, len, size });
                        }
                        buf.clear();
                        buf.extend((0..len).map(|i| guest_byte(id as u64, offset + i)));
                        let r = if matches!(op, GuestOp::WriteFua { .. }) {
                            img.write_fua(offset, &buf).await
                        } else {
                            img.write(offset, &buf).await
                        };
                        r.map_err(engine_err("writing"))?;
                    }
                    GuestOp::Flush => img.flush().await.map_err(engine_err("flushing"))?,
                    GuestOp::StartCounting => start = counts(&img),
                }
            }
            let end = counts(&img);
            Ok((img, start, end))
        })
        .map_err(|e| BenchError::Exec(e, name))??;
    let (image, start, end) = out;
    let device = end.1.since(&start.1);
    let engine = end.2.since(&start.2);
    let row = Row {
        workload: setup.workload,
        switches: SwitchMap(switches),
        guest_writes: engine.guest_writes,
        guest_bytes: engine.guest_bytes_written,
        guest_flushes: engine.guest_flushes,
        device_write_requests: device.writes + device.write_zeroes + device.discards,
        device_data_writes: device.writes,
        device_bytes_written: device.write_bytes + device.write_zeroes_fallback_bytes,
        device_write_zeroes: device.write_zeroes,
        device_write_zeroes_bytes: device.write_zeroes_bytes,
        device_extends: device.extends,
        device_reads: device.reads,
        device_bytes_read: device.read_bytes,
        device_flushes: device.flushes,
        backing_bytes_read: end.3 - start.3,
        cow_created: engine.cow_created,
        cow_cancelled: engine.cow_cancelled_whole + engine.cow_cancelled_partial,
        cow_cancelled_whole: engine.cow_cancelled_whole,
        cow_cancelled_partial: engine.cow_cancelled_partial,
        cow_performed: engine.cow_performed,
        cow_bytes_written: engine.cow_bytes_written,
        zeroing_requests: engine.zeroing_requests,
        zeroing_fallbacks: engine.zeroing_fallbacks,
        grow_requests: engine.grow_requests,
        cow_already_zero: engine.cow_already_zero,
        alloc_joins: engine.alloc_joins,
        clusters_allocated: engine.clusters_allocated,
        l2_writebacks: engine.l2_writebacks,
        refcount_writebacks: engine.refcount_writebacks,
        sim_time_ns: end.0 - start.0,
        sim_time_hdd_ns: None,
    };
    Ok(Observed {
        row,
        sim,
        disk,
        image: Rc::new(image),
        engine,
        device,
    })
}

/// A disk without faults or crash tracking (a benchmark never crashes), so
/// memory stays at one copy of the data; the log, when kept, holds offsets
/// and hashes only.
fn quiet_options(latency: LatencyOptions, log: bool) -> DiskOptions {
    let mut o = DiskOptions {
        latency,
        ..DiskOptions::default()
    };
    o.faults.enabled = false;
    o.crash.track = false;
    o.log.enabled = log;
    o.log.data_bytes_max = 0;
    o
}
