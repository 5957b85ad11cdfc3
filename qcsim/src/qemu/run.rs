//! One case through QEMU's qcow2 driver (or imago, behind the same
//! `Guest` trait): the image made by `qemu-img
//! create` with the case's options, then epoch by epoch (the operations up
//! to a crash point, or to the end) a simulated disk serving it
//! (`qemu::disk`), and a second one serving its external data file if it
//! has one, `qemu-nbd` serving its guest view, and our NBD client
//! sending the operations; reads are checked by the model as they return.
//! At a crash `qemu-nbd` is killed with SIGKILL, both disks lose power
//! together, and every crash state built (a pair: the image's state and
//! the data file's) is judged: `qemu-img check` (after QEMU's own repair
//! of an image left dirty by lazy refcounts) and our checker must find no
//! corruption, and the guest view `qemu-img convert` reads must be what
//! the model allows; the next epoch starts from the first sampled state.
//! At the end the whole disk is read back through QEMU, the client hangs
//! up, and the image `qemu-nbd` closed must be clean. A snapshot
//! operation, an amend or a resize closes the driver, runs `qemu-img` on
//! the image over NBD and opens the driver again (`alone_op`).

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use engine::Compat;
use oracle::data::{decode, fill_compressible_buffer, fill_write_buffer, WriteId, SECTOR_SIZE};
use oracle::model::{
    summarize, DiscardContract, Model, OpId, SectorRange, Status, Value, WriteKind,
};
use serde::Serialize;
use sim::case::{BackingSpec, Case, Op};
use sim::disk::DiskOptions;
use sim::runner::snapshots::{Presence, Snapshots};
use sim::runner::values::{resize_values, values_after_apply};
use sim::runner::{wrong_sector, Failure};

use super::disk::{DiskEnd, DiskPlan, DiskThread, EndPlan};
use super::guest::{connect, Guest};
use super::imago::{ImagoBacking, ImagoGuest, ImagoOpen};

/// Crash states sampled per crash, besides the all-durable one.
pub const SAMPLES: u32 = 2;

/// Largest read the client sends at once.
const READ_PIECE: u64 = 4 << 20;

/// What a run through QEMU found.
#[derive(Debug, Default, Serialize)]
pub struct QemuReport {
    pub seed: u64,
    /// The driver, in a sentence (`QEMU`, `imago`).
    pub who: &'static str,
    /// Why the case was not run (a feature this driver does not cover).
    pub skipped: Option<String>,
    /// What failed, as the engine's runs report it, so that one
    /// explanation (`report::explain`) serves every driver.
    pub failures: Vec<Failure>,
    pub guest_ops: u64,
    /// Of the guest requests sent, those flagged FUA (writes, write
    /// zeroes, discards). Counted apart from the disks' FUA writes: QEMU's
    /// qcow2 may meet a FUA request with a flush instead, so the disks'
    /// count alone cannot show that FUA was exercised at all.
    pub guest_fua: u64,
    pub read_sectors: u64,
    pub crash_states: u64,
    pub recovered_sectors: u64,
    /// The case has an external data file, on a simulated disk of its own.
    pub data_file: bool,
    /// Device requests each simulated disk saw, over every epoch: the
    /// image's, then the data file's. Kept apart, because a cause often
    /// shows in one disk's figures only (a data file never flushed).
    pub disks: Vec<DiskTally>,
    /// The directory with each epoch's request log and crash states.
    pub dir: PathBuf,
    /// Operations of the case that did not run as they are, counted by
    /// what happened instead, in words (`skipped: ...`, `refused by
    /// qemu-img: ...`, `sent as ...`): a campaign sums them by key.
    pub ops_counted: BTreeMap<String, u64>,
    /// Snapshot operations, amends and resizes run through `qemu-img`
    /// between the driver's close and its reopening, refused ones too.
    pub qemu_img_ops: u64,
}

/// The requests one simulated disk saw from the driver.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DiskTally {
    /// Writes, write_zeroes and discards.
    pub writes: u64,
    /// Of those, writes with FUA.
    pub fua_writes: u64,
    pub flushes: u64,
}

impl DiskTally {
    pub fn add(&mut self, o: &DiskTally) {
        self.writes += o.writes;
        self.fua_writes += o.fua_writes;
        self.flushes += o.flushes;
    }
}

impl QemuReport {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Count one operation under `what` ([`QemuReport::ops_counted`]).
    fn count(&mut self, what: impl Into<String>) {
        *self.ops_counted.entry(what.into()).or_default() += 1;
    }

    /// The disks' names, in the order of [`QemuReport::disks`].
    pub const DISK_NAMES: [&'static str; 2] = ["the image's disk", "the data file's disk"];

    /// A failure of the driver itself (`Failure::Driver`).
    fn driver_failed(&mut self, what: String) {
        self.failures.push(Failure::Driver {
            driver: self.who.to_owned(),
            what,
        });
    }

    /// The model found wrong sectors: `summary` in words, the first
    /// sectors as data.
    fn model_failed(&mut self, summary: String, vs: &[oracle::model::Violation]) {
        let f = model_failure(summary, vs, self.who);
        self.failures.push(f);
    }

    /// A check of `label` failed: `summary` says what it found.
    fn check_failed(&mut self, label: &str, summary: String) {
        self.failures.push(Failure::Check {
            label: label.to_owned(),
            summary,
            dump_diff: None,
        });
    }
}

/// The wrong sectors described as data, for the report's hex diffs: the
/// first [`SECTORS_DESCRIBED`] of them. Where the sector maps in the
/// driver's image is not looked up (the driver's own mapping; `qcsim
/// disk-replay` rebuilds what it sent each disk).
fn model_failure(summary: String, vs: &[oracle::model::Violation], who: &str) -> Failure {
    let sectors = vs
        .iter()
        .take(SECTORS_DESCRIBED)
        .map(|v| {
            let mut w = wrong_sector(v, None, Vec::new());
            w.driver = Some(who.to_owned());
            w
        })
        .collect();
    Failure::Model {
        text: summary,
        sectors,
    }
}

/// Wrong sectors kept as data per model failure, as the engine's runs keep.
const SECTORS_DESCRIBED: usize = 8;

/// A process's exit in words: `exit status 2`, `killed by signal 9`.
pub fn exit_text(status: Option<i32>) -> String {
    match status {
        Some(code) => format!("exit status {code}"),
        None => "killed by a signal".into(),
    }
}

/// Why a case cannot run on `engine`, if it cannot. QEMU runs every case;
/// imago every one but those with extended L2 entries, which it does not
/// open (incompatible feature bit 4, which it does not know). Snapshot
/// operations, amends and resizes run through `qemu-img` for either
/// driver (`alone_op`); what of them cannot run is counted per operation.
pub fn unsupported(case: &Case, engine: Engine) -> Option<String> {
    let c = &case.image.create;
    if engine == Engine::Imago && c.compat == Compat::V3 && c.extended_l2 {
        return Some("extended L2 entries (imago does not open such images)".into());
    }
    None
}

/// The seed of the data file's simulated disk in an epoch whose image
/// disk has `image_seed` (the case's seed plus the epoch's number): the
/// same seed with this constant (ASCII "datafile") mixed in, so that the
/// two disks' latency and outlier streams are independent yet both fixed
/// by the case's seed. The request log's header records it, so a replay
/// needs nothing but the log.
const DATA_DISK_SEED_MIX: u64 = 0x6461_7461_6669_6c65;

fn data_disk_seed(image_seed: u64) -> u64 {
    image_seed ^ DATA_DISK_SEED_MIX
}

/// A value in QEMU's `key=value,...` option syntax: a comma is doubled.
fn opt_value(path: &Path) -> anyhow::Result<String> {
    Ok(utf8(path)?.replace(',', ",,"))
}

/// The qemu-img arguments naming the qcow2 image in file `image`: with a
/// data file, `--image-opts` with the data file's path given, since the
/// name the header stores is not where the data file's state is.
fn image_args(image: &Path, data: Option<&Path>) -> anyhow::Result<Vec<String>> {
    Ok(match data {
        None => vec!["-f".into(), "qcow2".into(), utf8(image)?.to_owned()],
        Some(data) => vec![
            "--image-opts".into(),
            format!(
                "driver=qcow2,file.driver=file,file.filename={},\
                 data-file.driver=file,data-file.filename={}",
                opt_value(image)?,
                opt_value(data)?
            ),
        ],
    })
}

/// Write the case's backing file into `dir` as a real file (QEMU reads
/// it there; it is never crashed, as in-process runs never crash it):
/// raw, or converted to qcow2 by `qemu-img` with the case's cluster size.
/// Returns its absolute path, which the overlay's header names so that
/// QEMU finds it from an image whose own storage is an NBD export.
fn write_backing(spec: &BackingSpec, dir: &Path) -> anyhow::Result<String> {
    let bytes = spec.data().to_bytes();
    let dir = std::fs::canonicalize(dir).with_context(|| format!("{}", dir.display()))?;
    let path = dir.join(spec.file_name());
    match *spec {
        BackingSpec::Raw { .. } => std::fs::write(&path, &bytes)?,
        BackingSpec::Qcow2 { cluster_size, .. } => {
            let raw = dir.join("backing.source.raw");
            std::fs::write(&raw, &bytes)?;
            let (raw_s, path_s) = (utf8(&raw)?, utf8(&path)?);
            let out = run_tool(
                "qemu-img",
                &[
                    "convert",
                    "-q",
                    "-f",
                    "raw",
                    "-O",
                    "qcow2",
                    "-o",
                    &format!("cluster_size={cluster_size}"),
                    raw_s,
                    path_s,
                ],
                &dir,
            )?;
            if !out.status.success() {
                bail!(
                    "qemu-img convert of the backing file: {}",
                    output_text(&out)
                );
            }
            std::fs::remove_file(&raw)?;
        }
    }
    Ok(utf8(&path)?.to_owned())
}

fn utf8(p: &Path) -> anyhow::Result<&str> {
    p.to_str()
        .ok_or_else(|| anyhow!("a path that is not UTF-8: {}", p.display()))
}

/// The `qemu-img create -o` options of the case's image. A data file gets
/// the name the case's header gives it (qemu-img creates it in the
/// directory it runs in; the run moves it where the epoch's data disk
/// reads it from, and tells QEMU where that is at every open).
fn create_options(case: &Case) -> String {
    let c = &case.image.create;
    let on = |b: bool| if b { "on" } else { "off" };
    let mut o = format!(
        "cluster_size={},refcount_bits={},compat={},lazy_refcounts={}",
        c.cluster_size,
        c.refcount_bits,
        match c.compat {
            Compat::V2 => "0.10",
            Compat::V3 => "1.1",
        },
        on(c.lazy_refcounts)
    );
    if c.compat == Compat::V3 {
        o.push_str(&format!(",extended_l2={}", on(c.extended_l2)));
        let ct = serde_json::to_value(c.compression_type)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_else(|| "zlib".into());
        o.push_str(&format!(",compression_type={ct}"));
    }
    if let Some(name) = &c.data_file {
        o.push_str(&format!(
            ",data_file={},data_file_raw={}",
            name.replace(',', ",,"),
            on(c.data_file_raw)
        ));
    }
    o
}

/// The simulated disk of a QEMU run: the case's device (sector size,
/// latencies, what zeroing and discard do, a disk that ignores flushes)
/// with no faults injected, no write log (each epoch's request log is the
/// record) and crash tracking on.
fn disk_options(case: &Case) -> DiskOptions {
    let mut o = DiskOptions {
        sector_size: case.disk.sector_size,
        latency: case.disk.latency.clone(),
        support: case.disk.support.clone(),
        ..DiskOptions::default()
    };
    o.faults.ignores_flush = case.disk.faults.ignores_flush;
    o.log.enabled = false;
    o
}

fn run_tool(program: &str, args: &[&str], dir: &Path) -> anyhow::Result<std::process::Output> {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program} (is QEMU installed?)"))
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Which driver a case runs on besides the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// QEMU's qcow2 driver, as `qemu-nbd`.
    Qemu,
    /// The imago library (`qemu::imago`).
    Imago,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::Qemu => "qemu",
            Engine::Imago => "imago",
        }
    }

    /// Its name in a sentence.
    pub fn who(self) -> &'static str {
        match self {
            Engine::Qemu => "QEMU",
            Engine::Imago => "imago",
        }
    }
}

/// QEMU's driver: `qemu-nbd` and our client of it.
struct QemuGuest {
    qemu: QemuNbd,
    client: nbd::Client<UnixStream>,
}

impl QemuGuest {
    fn start(
        disk_socket: &Path,
        data_socket: Option<&Path>,
        guest_socket: &Path,
        dir: &Path,
    ) -> anyhow::Result<QemuGuest> {
        let qemu = QemuNbd::start(disk_socket, data_socket, guest_socket, dir)?;
        let stream = connect(guest_socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        let client = nbd::Client::connect(stream).context("connecting to qemu-nbd")?;
        Ok(QemuGuest { qemu, client })
    }
}

impl Guest for QemuGuest {
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        Ok(self.client.read(offset, buf)?)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        Ok(self.client.write(offset, data, false)?)
    }
    fn write_zeroes(&mut self, offset: u64, len: u64, no_hole: bool) -> anyhow::Result<()> {
        Ok(self.client.write_zeroes(offset, len, no_hole)?)
    }
    fn trim(&mut self, offset: u64, len: u64) -> anyhow::Result<()> {
        Ok(self.client.trim(offset, len)?)
    }
    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(self.client.flush()?)
    }
    // qemu-nbd advertises NBD_FLAG_SEND_FUA: FUA requests go to QEMU as
    // they are, and its block layer handles them (natively where the
    // driver below can, with a flush after the write where not).
    fn write_fua(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        Ok(self.client.write(offset, data, true)?)
    }
    fn write_zeroes_fua(&mut self, offset: u64, len: u64, no_hole: bool) -> anyhow::Result<()> {
        Ok(self
            .client
            .write_zeroes_flagged(offset, len, no_hole, true)?)
    }
    fn trim_fua(&mut self, offset: u64, len: u64) -> anyhow::Result<()> {
        Ok(self.client.trim_flagged(offset, len, true)?)
    }
    fn crash(self: Box<Self>) {
        self.qemu.kill();
    }
    fn close(self: Box<Self>) -> anyhow::Result<()> {
        let QemuGuest { qemu, client } = *self;
        client.disconnect().context("hanging up")?;
        let status = qemu.wait()?;
        if !status.success() {
            bail!("qemu-nbd exited with {status} at a clean close");
        }
        Ok(())
    }
}

/// The `--image-opts` of the qcow2 image on the simulated disk serving on
/// `disk_socket`, its data file on `data_socket` (given explicitly, so
/// that QEMU never opens the name the header stores).
fn nbd_image_opts(disk_socket: &Path, data_socket: Option<&Path>) -> anyhow::Result<String> {
    let mut opts = format!(
        "driver=qcow2,file.driver=nbd,file.server.type=unix,file.server.path={}",
        opt_value(disk_socket)?
    );
    if let Some(data) = data_socket {
        opts.push_str(&format!(
            ",data-file.driver=nbd,data-file.server.type=unix,data-file.server.path={}",
            opt_value(data)?
        ));
    }
    Ok(opts)
}

/// A running `qemu-nbd`, killed if dropped.
struct QemuNbd {
    child: Option<Child>,
}

impl QemuNbd {
    /// Serve the image on `disk_socket` (its data file on `data_socket`,
    /// given explicitly so that QEMU never opens the name the header
    /// stores) as the guest view on `guest_socket`.
    fn start(
        disk_socket: &Path,
        data_socket: Option<&Path>,
        guest_socket: &Path,
        dir: &Path,
    ) -> anyhow::Result<QemuNbd> {
        let opts = nbd_image_opts(disk_socket, data_socket)?;
        let child = Command::new("qemu-nbd")
            .args([
                "--image-opts",
                &opts,
                "--discard=unmap",
                "--cache=writeback",
            ])
            .arg("--socket")
            .arg(guest_socket)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            // Appended to: the epoch starts it again after each operation
            // qemu-img runs.
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join("qemu-nbd.log"))?,
            )
            .spawn()
            .context("running qemu-nbd (is QEMU installed?)")?;
        let mut q = QemuNbd { child: Some(child) };
        let start = Instant::now();
        while !guest_socket.exists() {
            if let Some(status) = q.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                q.child = None;
                let log = std::fs::read_to_string(dir.join("qemu-nbd.log")).unwrap_or_default();
                bail!("qemu-nbd exited at once ({status}): {log}");
            }
            if start.elapsed() > Duration::from_secs(60) {
                bail!("qemu-nbd made no socket in 60 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(q)
    }

    /// The power cut: SIGKILL, and wait for it.
    fn kill(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait for it to end by itself (after its client hung up); its exit
    /// status.
    fn wait(mut self) -> anyhow::Result<std::process::ExitStatus> {
        let mut c = self.child.take().expect("running");
        let start = Instant::now();
        loop {
            if let Some(s) = c.try_wait()? {
                return Ok(s);
            }
            if start.elapsed() > Duration::from_secs(120) {
                let _ = c.kill();
                let _ = c.wait();
                bail!("qemu-nbd did not exit 120 s after its client hung up");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for QemuNbd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The case's workload split at its crash points: the operations of each
/// epoch with their numbers, and whether it ends in a crash.
fn epochs(case: &Case) -> Vec<(Vec<(u64, Op)>, bool)> {
    let mut out = vec![(Vec::new(), false)];
    for (_, n, op) in case.numbered_ops() {
        if matches!(op, Op::Crash) {
            out.last_mut().expect("one epoch at least").1 = true;
            out.push((Vec::new(), false));
        } else {
            out.last_mut().expect("one epoch at least").0.push((n, *op));
        }
    }
    out
}

/// One epoch's simulated disks: the image's and, with an external data
/// file, the data file's. They lose power together: both are finished
/// after `qemu-nbd` is gone, so neither sees a request the other missed.
struct Disks {
    image: DiskThread,
    data: Option<DiskThread>,
}

/// What an epoch's disks built: the image's files and the data file's,
/// pair by pair.
type Built = Vec<(PathBuf, Option<PathBuf>)>;

impl Disks {
    /// Start the epoch's disks, the image's holding `content`, the data
    /// file's (if any) `data_content`, with latency seed `seed`.
    fn start(
        edir: &Path,
        content: &Path,
        data_content: Option<&Path>,
        seed: u64,
        options: &DiskOptions,
    ) -> anyhow::Result<Disks> {
        let plan = |content: &Path, seed: u64, socket: &str, log: &str| {
            let socket = edir.join(socket);
            let _ = std::fs::remove_file(&socket);
            DiskPlan {
                content: content.to_owned(),
                seed,
                options: options.clone(),
                socket,
                log: edir.join(log),
            }
        };
        let image = DiskThread::start(plan(content, seed, "disk.sock", "requests.log"))?;
        let data = match data_content {
            None => None,
            Some(c) => {
                let p = plan(c, data_disk_seed(seed), "data.sock", "data-requests.log");
                match DiskThread::start(p) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        let _ = image.finish(EndPlan::Clean {
                            out: edir.join("content.raw"),
                        });
                        return Err(e);
                    }
                }
            }
        };
        Ok(Disks { image, data })
    }

    fn image_socket(edir: &Path) -> PathBuf {
        edir.join("disk.sock")
    }

    fn data_socket(&self, edir: &Path) -> Option<PathBuf> {
        self.data.as_ref().map(|_| edir.join("data.sock"))
    }

    /// A clean end: each disk's content to `dir/{name}.raw` (the data
    /// file's to `dir/data-{name}.raw`).
    fn clean(self, dir: &Path, name: &str, report: &mut QemuReport) -> anyhow::Result<Built> {
        let image = self.image.finish(EndPlan::Clean {
            out: dir.join(format!("{name}.raw")),
        });
        let data = self.data.map(|d| {
            d.finish(EndPlan::Clean {
                out: dir.join(format!("data-{name}.raw")),
            })
        });
        pairs(image, data, report)
    }

    /// The power cut: each disk's crash states to `dir`, the image's as
    /// `crash-K.raw` from crash substream 0 of `crash_seed`, the data
    /// file's as `data-crash-K.raw` from substream
    /// `sim::runner::DATA_CRASH_STREAM` (as in-process runs draw them).
    fn crash(self, dir: &Path, crash_seed: u64, report: &mut QemuReport) -> anyhow::Result<Built> {
        let image = self.image.finish(EndPlan::Crash {
            dir: dir.to_owned(),
            name: "crash",
            samples: SAMPLES,
            crash_seed,
            stream: 0,
        });
        let data = self.data.map(|d| {
            d.finish(EndPlan::Crash {
                dir: dir.to_owned(),
                name: "data-crash",
                samples: SAMPLES,
                crash_seed,
                stream: sim::runner::DATA_CRASH_STREAM,
            })
        });
        pairs(image, data, report)
    }
}

/// The files both disks built, paired in order, their counters added to
/// `report`.
fn pairs(
    image: anyhow::Result<DiskEnd>,
    data: Option<anyhow::Result<DiskEnd>>,
    report: &mut QemuReport,
) -> anyhow::Result<Built> {
    let image = image?;
    add_counters(report, 0, &image.counters);
    let data = match data {
        None => None,
        Some(d) => {
            let d = d.context("the data file's disk")?;
            add_counters(report, 1, &d.counters);
            Some(d.files)
        }
    };
    Ok(match data {
        None => image.files.into_iter().map(|f| (f, None)).collect(),
        Some(data) => {
            if data.len() != image.files.len() {
                bail!(
                    "{} states of the image and {} of the data file",
                    image.files.len(),
                    data.len()
                );
            }
            image
                .files
                .into_iter()
                .zip(data.into_iter().map(Some))
                .collect()
        }
    })
}

/// Run `case` on `engine` in `dir` (made if absent).
pub fn run_case_on(case: &Case, dir: &Path, engine: Engine) -> anyhow::Result<QemuReport> {
    let mut report = QemuReport {
        seed: case.seed,
        who: engine.who(),
        data_file: case.image.data_file.is_some(),
        dir: dir.to_owned(),
        ..QemuReport::default()
    };
    if let Some(why) = unsupported(case, engine) {
        report.skipped = Some(why);
        return Ok(report);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let size = case.image.create.size;
    // The disk the image lives on: room for the guest's data at its
    // largest and the metadata twice over (the export cannot grow, and
    // the image may leak clusters at every crash), once more for each
    // snapshot the case takes (a write after one copies the clusters it
    // shares); sparse, so it costs what is written.
    let creates = case
        .workload
        .iter()
        .flatten()
        .filter(|op| matches!(op, Op::SnapshotCreate))
        .count() as u64;
    let largest = size.max(case.max_sectors() * SECTOR_SIZE as u64);
    let disk_size = (largest * (2 + creates) + (64 << 20)).next_multiple_of(1 << 20);
    let base = dir.join("epoch-0.raw");
    {
        let f = std::fs::File::create(&base)?;
        f.set_len(disk_size)?;
    }
    let base_str = base
        .to_str()
        .ok_or_else(|| anyhow!("a path that is not UTF-8"))?;
    let options = create_options(case);
    let size_arg = size.to_string();
    let mut args = vec!["create", "-q", "-f", "qcow2", "-o", &options];
    let backing = match case.image.backing {
        Some(spec) => Some((write_backing(&spec, dir)?, spec.format_name())),
        None => None,
    };
    if let Some((path, format)) = &backing {
        args.extend(["-b", path.as_str(), "-F", format]);
    }
    args.extend([base_str, size_arg.as_str()]);
    let created = run_tool("qemu-img", &args, dir)?;
    if !created.status.success() {
        bail!("qemu-img create: {}", output_text(&created));
    }
    // qemu-img create truncates the file to the image: give the disk its
    // size back.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&base)?
        .set_len(disk_size)?;
    // The data file qemu-img made in `dir` under the header's name becomes
    // the first epoch's data disk. QEMU maps a guest cluster to the same
    // offset in a data file, so the guest's size is all it needs; the
    // export cannot grow, so it gets that size, rounded up to 1 MiB (a
    // whole number of the disk's sectors), whatever qemu-img left it.
    let data_base = match &case.image.create.data_file {
        None => None,
        Some(name) => {
            let made = dir.join(name);
            let data_base = dir.join("epoch-0.data.raw");
            std::fs::rename(&made, &data_base)
                .with_context(|| format!("the data file qemu-img made ({})", made.display()))?;
            std::fs::OpenOptions::new()
                .write(true)
                .open(&data_base)?
                .set_len(size.next_multiple_of(1 << 20))?;
            Some(data_base)
        }
    };

    // A driver other than qcsim's engine is held to the block layer's
    // discard contract, not the engine's stricter one: QEMU reuses a
    // cluster a discard freed before the L2 change unlinking it is
    // durable, so after a crash the discarded range may show data the
    // guest wrote elsewhere afterwards (docs/drivers.md).
    // The model covers the largest size a resize gives the disk, as in
    // process (`Case::model`); past the size the disk has, nothing is
    // read or kept.
    let mut model = Model::new(case.max_sectors(), case.backing_data())
        .with_discard_contract(DiscardContract::Unspecified);
    let mut content = base;
    let mut data_content = data_base;
    let options = disk_options(case);
    // imago is given the backing file's bytes, read once.
    let imago_backing = match (engine, case.image.backing, &backing) {
        (Engine::Imago, Some(spec), Some((path, _))) => Some(ImagoBacking {
            bytes: std::fs::read(path).with_context(|| path.clone())?,
            qcow2: matches!(spec, BackingSpec::Qcow2 { .. }),
        }),
        _ => None,
    };
    let mut alone = Alone {
        sectors: case.sectors(),
        snapshots: Snapshots::default(),
        v2: case.image.create.compat == Compat::V2,
        refused: false,
    };
    let all = epochs(case);
    let last = all.len() - 1;
    for (e, (ops, crash)) in all.into_iter().enumerate() {
        let edir = dir.join(format!("epoch-{e}"));
        std::fs::create_dir_all(&edir)?;
        let seed = case.seed.wrapping_add(e as u64);
        let disks = Disks::start(&edir, &content, data_content.as_deref(), seed, &options)?;
        let launch = Launch {
            engine,
            disk: Disks::image_socket(&edir),
            data: disks.data_socket(&edir),
            guest: edir.join("guest.sock"),
            dir: &edir,
            backing: imago_backing.as_ref(),
        };
        let mut guest = match launch.start() {
            Ok(g) => g,
            Err(err) => {
                let _ = disks.clean(&edir, "content", &mut report);
                // The image as created: a driver that cannot open it does
                // not run this case; after a crash, it is a failure.
                if e == 0 && engine == Engine::Imago {
                    report.skipped = Some(format!("an image imago cannot open ({err:#})"));
                } else {
                    report.driver_failed(format!(
                        "opening the image after crash {e} (epoch-{e}): {err:#}"
                    ));
                }
                return Ok(report);
            }
        };
        let mut failed_op = None;
        for (n, op) in &ops {
            if op.runs_alone() {
                match alone_op(
                    guest,
                    &launch,
                    case,
                    &mut model,
                    &mut alone,
                    *n,
                    *op,
                    &mut report,
                )? {
                    Some(g) => guest = g,
                    None => {
                        // The failure is recorded; the driver is gone.
                        let _ = disks.clean(&edir, "content", &mut report);
                        return Ok(report);
                    }
                }
                continue;
            }
            // Past the end a resize left, the guest has no disk to ask:
            // not sent, as in process.
            if op.range().is_some_and(|(s, k)| s + k > alone.sectors) {
                report.count(
                    "skipped: guest requests past the end a resize left (not sent, as in process)",
                );
                continue;
            }
            if engine == Engine::Imago && alone.v2 {
                // What `qemu::imago` sends instead on a version 2 image.
                match op {
                    Op::WriteZeroes { .. } => report.count(
                        "sent as writes of zeroes (imago has no zero clusters on version 2)",
                    ),
                    Op::Discard { .. } => report.count(
                        "sent as imago's discard to the backing file (its discard to zeroes needs version 3)",
                    ),
                    _ => {}
                }
            }
            if let Err(e) = run_op(guest.as_mut(), &mut model, *n, *op, &mut report) {
                failed_op = Some(format!("operation {n} ({op}) failed: {e:#}"));
                break;
            }
            report.guest_ops += 1;
        }
        if let Some(f) = failed_op {
            report.driver_failed(f);
            guest.crash();
            let _ = disks.clean(&edir, "content", &mut report);
            return Ok(report);
        }
        if crash && e < last {
            guest.crash();
            let mut states = disks.crash(&edir, seed, &mut report)?.into_iter();
            let all_durable = states.next().expect("the all-durable state");
            let go_on = states.next();
            // The model judges the state the run goes on from; the others
            // are judged by the checkers alone.
            for (s, d) in std::iter::once(&all_durable).chain(states.as_slice()) {
                judge_state(e + 1, s, d.as_deref(), &edir, &mut report, None)?;
            }
            let (go_on, go_on_data) = go_on.unwrap_or(all_durable);
            model.crash();
            judge_state(
                e + 1,
                &go_on,
                go_on_data.as_deref(),
                &edir,
                &mut report,
                Some((&mut model, alone.sectors)),
            )?;
            if report.passed() {
                let label = format!("after crash {} (epoch-{e})", e + 1);
                settle_snapshots(
                    &go_on,
                    go_on_data.as_deref(),
                    &edir,
                    &label,
                    &mut alone,
                    &mut report,
                )?;
            }
            if !report.passed() {
                return Ok(report);
            }
            content = go_on;
            data_content = go_on_data;
        } else {
            // The end: everything read back through QEMU, then a clean
            // close, which must leave the image clean.
            if let Err(e) = read_back(guest.as_mut(), &mut model, alone.sectors, &mut report) {
                report.driver_failed(format!("reading the disk back at the end: {e:#}"));
            }
            if let Err(e) = guest.close() {
                report.driver_failed(format!("the clean close: {e:#}"));
            }
            let mut built = disks.clean(&edir, "final", &mut report)?;
            let (out, data_out) = built.pop().expect("the final content");
            // Leaks after a crash, or after an operation qemu-img
            // refused, are counted, not failed.
            let leaks_allowed = e > 0 || alone.refused;
            judge_final(&out, data_out.as_deref(), &edir, leaks_allowed, &mut report)?;
            settle_snapshots(
                &out,
                data_out.as_deref(),
                &edir,
                "at the end",
                &mut alone,
                &mut report,
            )?;
        }
    }
    Ok(report)
}

/// How an epoch starts its driver, again after each operation run
/// through `qemu-img`.
struct Launch<'a> {
    engine: Engine,
    /// The sockets of the image's disk and of the data file's.
    disk: PathBuf,
    data: Option<PathBuf>,
    /// Where `qemu-nbd` serves the guest view.
    guest: PathBuf,
    dir: &'a Path,
    backing: Option<&'a ImagoBacking>,
}

impl Launch<'_> {
    fn start(&self) -> anyhow::Result<Box<dyn Guest>> {
        let _ = std::fs::remove_file(&self.guest);
        Ok(match self.engine {
            Engine::Qemu => Box::new(QemuGuest::start(
                &self.disk,
                self.data.as_deref(),
                &self.guest,
                self.dir,
            )?),
            Engine::Imago => Box::new(ImagoGuest::start(&ImagoOpen {
                disk: &self.disk,
                data: self.data.as_deref(),
                backing: self.backing,
            })?),
        })
    }

    /// The qemu-img arguments naming the image on the epoch's disks, as
    /// `qemu-nbd` opens it.
    fn qemu_img_target(&self) -> anyhow::Result<Vec<String>> {
        Ok(vec![
            "--image-opts".into(),
            nbd_image_opts(&self.disk, self.data.as_deref())?,
        ])
    }
}

/// What a run knows besides the model: the guest disk's size now (a
/// resize or a snapshot's apply changes it), and the snapshots taken.
struct Alone {
    sectors: u64,
    snapshots: Snapshots,
    /// The image is version 2 now (as created, or amended to it).
    v2: bool,
    /// `qemu-img` refused an operation: QEMU may leak a cluster doing so
    /// (a snapshot create refused for a refcount that would overflow
    /// leaves its new L1 table allocated), which is no corruption.
    refused: bool,
}

/// What an operation run through `qemu-img` does, decided before it
/// runs.
enum AlonePlan {
    /// Take snapshot `i` of the run's list.
    Create(usize),
    Apply(usize),
    Delete(usize),
    Amend(sim::case::Amend),
    Resize(u64),
}

/// Snapshot operation, amend or resize `op` (number `n`), which NBD has
/// no request for: the driver is closed (a flush, to the model: the
/// close writes everything back), `qemu-img` runs it on the image where
/// it lies, on the epoch's simulated disks over NBD (so the request logs
/// record what it did, and `qcsim disk-replay` rebuilds the states
/// without QEMU), and the driver is opened again. The operation runs to
/// its end: a crash point comes before or after it, never inside (the
/// moment a killed `qemu-img` stops at would not be reproducible). One
/// `qemu-img` refuses (it exits with an error: no fault is injected) is
/// counted by its message, as the in-process runner counts the engine's
/// refusals, and the model is told it may or may not have happened.
/// Returns the driver opened again, or None when a failure was recorded
/// and the driver is gone.
#[allow(clippy::too_many_arguments)]
fn alone_op(
    mut guest: Box<dyn Guest>,
    launch: &Launch<'_>,
    case: &Case,
    model: &mut Model,
    alone: &mut Alone,
    n: u64,
    op: Op,
    report: &mut QemuReport,
) -> anyhow::Result<Option<Box<dyn Guest>>> {
    let id = OpId(n);
    let plan = match op {
        Op::SnapshotCreate => match capture(guest.as_mut(), model, alone.sectors, n, report) {
            Ok(values) => AlonePlan::Create(alone.snapshots.taking(
                Snapshots::name_of(n),
                values,
                alone.sectors,
            )),
            Err(e) => {
                report.driver_failed(format!(
                    "operation {n} ({op}): reading the disk the snapshot holds: {e:#}"
                ));
                guest.crash();
                return Ok(None);
            }
        },
        Op::SnapshotApply { pick } | Op::SnapshotDelete { pick } => {
            match alone.snapshots.pick(pick) {
                None => {
                    // As in process: nothing to pick, nothing done.
                    report.count("skipped: snapshot applies and deletes with no snapshot to pick (as in process)");
                    return Ok(Some(guest));
                }
                Some(i) if matches!(op, Op::SnapshotApply { .. }) => AlonePlan::Apply(i),
                Some(i) => AlonePlan::Delete(i),
            }
        }
        Op::Resize { .. } if case.image.data_file.is_some() => {
            // QEMU resizes the data file with the image, and the data
            // file's disk is an NBD export, whose size is fixed ("Cannot
            // resize NBD nodes"): the harness's limit, not QEMU's.
            report.count("skipped: resizes of an image with an external data file (its disk, an NBD export, cannot change size)");
            return Ok(Some(guest));
        }
        Op::Resize { sectors } => AlonePlan::Resize(sectors),
        Op::Amend { change } => AlonePlan::Amend(change),
        _ => unreachable!("alone_op runs snapshot operations, amends and resizes"),
    };
    model.flush_issued(id);
    if let Err(e) = guest.close() {
        model.flush_completed(id, Status::Failed);
        report.driver_failed(format!(
            "the clean close before operation {n} ({op}), which qemu-img runs: {e:#}"
        ));
        return Ok(None);
    }
    model.flush_completed(id, Status::Ok);
    report.qemu_img_ops += 1;
    let snapshot = match plan {
        AlonePlan::Create(i) | AlonePlan::Apply(i) | AlonePlan::Delete(i) => {
            alone.snapshots.get(i).name.clone()
        }
        AlonePlan::Amend(_) | AlonePlan::Resize(_) => String::new(),
    };
    let (mut args, what): (Vec<String>, String) = match plan {
        AlonePlan::Create(_) => (
            vec!["snapshot".into(), "-q".into(), "-c".into(), snapshot],
            "snapshot create".into(),
        ),
        AlonePlan::Apply(_) => (
            vec!["snapshot".into(), "-q".into(), "-a".into(), snapshot],
            "snapshot apply".into(),
        ),
        AlonePlan::Delete(i) => {
            // Cut short or refused, it may have happened or not.
            alone.snapshots.set(i, Presence::Maybe);
            (
                vec!["snapshot".into(), "-q".into(), "-d".into(), snapshot],
                "snapshot delete".into(),
            )
        }
        AlonePlan::Amend(change) => (
            vec![
                "amend".into(),
                "-q".into(),
                "-o".into(),
                amend_option(change),
            ],
            format!("amend to {change}"),
        ),
        AlonePlan::Resize(to) => {
            let mut a = vec!["resize".to_owned(), "-q".into()];
            let shrink = to < alone.sectors;
            if shrink {
                a.push("--shrink".into());
            }
            (a, if shrink { "shrink" } else { "grow" }.into())
        }
    };
    args.extend(launch.qemu_img_target()?);
    if let AlonePlan::Resize(to) = plan {
        args.push((to * SECTOR_SIZE as u64).to_string());
    }
    let out = run_tool("qemu-img", &strs(&args), launch.dir)?;
    let ok = out.status.success();
    if !ok {
        report.count(format!("refused by qemu-img: {what}: {}", refusal(&out)));
        alone.refused = true;
    }
    let st = if ok { Status::Ok } else { Status::Failed };
    match plan {
        AlonePlan::Create(i) if ok => alone.snapshots.set(i, Presence::Exists),
        AlonePlan::Delete(i) if ok => alone.snapshots.set(i, Presence::Deleted),
        AlonePlan::Amend(sim::case::Amend::Version(v)) if ok => alone.v2 = v == 2,
        AlonePlan::Create(_) | AlonePlan::Delete(_) | AlonePlan::Amend(_) => {}
        AlonePlan::Apply(i) => {
            let taken = alone.snapshots.get(i);
            let values = values_after_apply(model, &taken.values);
            written_and_durable(model, id, &values, st);
            if ok {
                // The disk has the snapshot's size back.
                alone.sectors = taken.sectors;
            }
        }
        AlonePlan::Resize(to) => {
            let values = resize_values(model, case, alone.sectors, to);
            written_and_durable(model, id, &values, st);
            if ok {
                alone.sectors = to;
            }
        }
    }
    if op.is_snapshot() {
        // The image's table, listed through the same disks, must hold
        // what the run knows; a refused create or delete is settled by it.
        let mut args = vec!["info".to_owned(), "--output=json".into()];
        args.extend(launch.qemu_img_target()?);
        let label = format!("after operation {n} ({op})");
        match list_snapshots(&args, launch.dir) {
            Ok(names) => {
                if let Err(wrong) = alone.snapshots.settle(&names, true) {
                    report.driver_failed(format!("snapshots {label}: {wrong}"));
                }
            }
            Err(e) => report.driver_failed(format!("listing the snapshots {label}: {e:#}")),
        }
    }
    match launch.start() {
        Ok(g) => Ok(Some(g)),
        Err(e) => {
            report.driver_failed(format!(
                "opening the image again after operation {n} ({op}), run by qemu-img: {e:#}"
            ));
            Ok(None)
        }
    }
}

/// The `qemu-img amend -o` option of `change`.
fn amend_option(change: sim::case::Amend) -> String {
    use sim::case::Amend;
    match change {
        Amend::Version(2) => "compat=0.10".into(),
        Amend::Version(_) => "compat=1.1".into(),
        Amend::LazyRefcounts(on) => format!("lazy_refcounts={}", if on { "on" } else { "off" }),
        Amend::RefcountBits(b) => format!("refcount_bits={b}"),
    }
}

/// Why `qemu-img` refused, in its words (its last line), with snapshot
/// names and figures masked, so that a campaign counts refusals by kind.
fn refusal(out: &std::process::Output) -> String {
    let text = output_text(out);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no message")
        .trim();
    let line = line.strip_prefix("qemu-img: ").unwrap_or(line);
    let mut masked = String::new();
    let mut chars = line.chars().peekable();
    let mut prev_word = false;
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() && !prev_word {
            // A figure (decimal, or hex after 0x): one N.
            while chars.next_if(|d| d.is_ascii_alphanumeric()).is_some() {}
            masked.push('N');
            prev_word = true;
            continue;
        }
        if c == '\'' && line.contains("'op") {
            // A snapshot's name, `opN`.
            let rest: String = chars.clone().take_while(|&d| d != '\'').collect();
            if rest.starts_with("op") && rest[2..].chars().all(|d| d.is_ascii_digit()) {
                masked.push_str("'NAME'");
                for _ in 0..=rest.len() {
                    chars.next();
                }
                prev_word = false;
                continue;
            }
        }
        prev_word = c.is_ascii_alphanumeric();
        masked.push(c);
    }
    masked
}

/// Tell the model that an operation wrote `values` and, having ended
/// with `st` Ok, made them durable (a snapshot's apply, a resize, which
/// end with the image closed); one refused may have happened or not.
fn written_and_durable(model: &mut Model, id: OpId, values: &[(u64, Value)], st: Status) {
    model.write_issued_values(id, None, values);
    model.write_completed(id, st);
    if st == Status::Ok {
        model.flush_issued(id);
        model.flush_completed(id, Status::Ok);
    }
}

/// The guest disk read back through the driver, each piece checked by the
/// model as a read of operation `n`: what a snapshot taken now holds, as
/// the values of the sectors that differ from unwritten ones, in order
/// (as the in-process runner's `capture`).
fn capture(
    guest: &mut dyn Guest,
    model: &mut Model,
    sectors: u64,
    n: u64,
    report: &mut QemuReport,
) -> anyhow::Result<Vec<(u64, Value)>> {
    let ss = SECTOR_SIZE as u64;
    let mut values = Vec::new();
    let mut at = 0;
    while at < sectors {
        let k = (sectors - at).min(READ_PIECE / ss);
        let mut buf = vec![0u8; (k * ss) as usize];
        guest.read(at * ss, &mut buf)?;
        report.read_sectors += k;
        if let Err(vs) = model.check_read(OpId(n), at, &buf) {
            report.model_failed(summarize(&vs, 8).join("\n"), &vs);
        }
        for (s, chunk) in (at..).zip(buf.chunks_exact(SECTOR_SIZE)) {
            let v = Value::of_content(decode(chunk), s).unwrap_or(Value::Garbage);
            if v != model.unwritten(s) {
                values.push((s, v));
            }
        }
        at += k;
    }
    Ok(values)
}

/// The snapshots `qemu-img info --output=json` (with `args`) lists, by
/// name.
fn list_snapshots(args: &[String], dir: &Path) -> anyhow::Result<Vec<String>> {
    let out = run_tool("qemu-img", &strs(args), dir)?;
    if !out.status.success() {
        bail!(
            "qemu-img info ({}): {}",
            exit_text(out.status.code()),
            output_text(&out).trim_end()
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("qemu-img info's JSON")?;
    Ok(v["snapshots"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

/// Hold the snapshots the image in `image` (with its data file's state
/// `data`) lists against what the run knows, once it has taken any: a
/// crash state after the power cut (every operation `qemu-img` ran ended
/// durable before it), or the final image.
fn settle_snapshots(
    image: &Path,
    data: Option<&Path>,
    dir: &Path,
    label: &str,
    alone: &mut Alone,
    report: &mut QemuReport,
) -> anyhow::Result<()> {
    if alone.snapshots.is_empty() {
        return Ok(());
    }
    let mut args = vec!["info".to_owned(), "--output=json".into()];
    args.extend(image_args(image, data)?);
    match list_snapshots(&args, dir) {
        Ok(names) => {
            if let Err(wrong) = alone.snapshots.settle(&names, true) {
                report.driver_failed(format!("snapshots {label}: {wrong}"));
            }
        }
        Err(e) => report.driver_failed(format!("listing the snapshots {label}: {e:#}")),
    }
    Ok(())
}

/// Add what disk `which` (0 the image's, 1 the data file's) saw.
fn add_counters(report: &mut QemuReport, which: usize, c: &sim::disk::DiskCounters) {
    if report.disks.len() <= which {
        report.disks.resize(which + 1, DiskTally::default());
    }
    report.disks[which].add(&DiskTally {
        writes: c.writes + c.write_zeroes + c.discards,
        fua_writes: c.fua_writes,
        flushes: c.flushes,
    });
}

fn status<T, E>(r: &Result<T, E>) -> Status {
    if r.is_ok() {
        Status::Ok
    } else {
        Status::Failed
    }
}

/// Send operation `n` and tell the model; an error from QEMU is a failure
/// (no fault is injected that could excuse it).
fn run_op(
    client: &mut dyn Guest,
    model: &mut Model,
    n: u64,
    op: Op,
    report: &mut QemuReport,
) -> anyhow::Result<()> {
    let id = OpId(n);
    let ss = SECTOR_SIZE as u64;
    // Counted as sent, whatever comes back.
    report.guest_fua += u64::from(op.is_fua());
    match op {
        Op::Write {
            sector,
            sectors,
            fua,
        } => {
            let mut buf = vec![0u8; (sectors * ss) as usize];
            fill_write_buffer(&mut buf, WriteId(n), sector);
            let range = SectorRange::new(sector, sectors);
            model.write_issued_flagged(id, range, WriteKind::Data(WriteId(n)), fua);
            let r = if fua {
                client.write_fua(sector * ss, &buf)
            } else {
                client.write(sector * ss, &buf)
            };
            model.write_completed(id, status(&r));
            r?;
        }
        // NBD has no compressed write: the same data goes as a plain one,
        // so the guest's view, which the model judges, is the same.
        Op::WriteCompressed { sector, sectors } => {
            let mut buf = vec![0u8; (sectors * ss) as usize];
            fill_compressible_buffer(&mut buf, WriteId(n), sector);
            let values = Model::compressible_values(WriteId(n), sector, sectors);
            model.write_issued_values(id, Some(WriteId(n)), &values);
            let r = client.write(sector * ss, &buf);
            model.write_completed(id, status(&r));
            r?;
        }
        Op::WriteZeroes {
            sector,
            sectors,
            unmap,
            fua,
        } => {
            let range = SectorRange::new(sector, sectors);
            model.write_issued_flagged(id, range, WriteKind::Zero, fua);
            let (at, len) = (sector * ss, sectors * ss);
            let r = if fua {
                client.write_zeroes_fua(at, len, !unmap)
            } else {
                client.write_zeroes(at, len, !unmap)
            };
            model.write_completed(id, status(&r));
            r?;
        }
        Op::Discard {
            sector,
            sectors,
            fua,
        } => {
            let range = SectorRange::new(sector, sectors);
            model.write_issued_flagged(id, range, WriteKind::Discard, fua);
            let (at, len) = (sector * ss, sectors * ss);
            let r = if fua {
                client.trim_fua(at, len)
            } else {
                client.trim(at, len)
            };
            model.write_completed(id, status(&r));
            r?;
        }
        Op::Flush => {
            model.flush_issued(id);
            let r = client.flush();
            model.flush_completed(id, status(&r));
            r?;
        }
        // One request at a time: a background read is sent as a read (the
        // driver has no groups running beside it to outlive).
        Op::Read { sector, sectors }
        | Op::BackgroundRead {
            sector, sectors, ..
        } => {
            let mut buf = vec![0u8; (sectors * ss) as usize];
            model.read_issued(id, SectorRange::new(sector, sectors));
            match client.read(sector * ss, &mut buf) {
                Ok(()) => {
                    report.read_sectors += sectors;
                    if let Err(vs) = model.read_completed(id, &buf) {
                        report.model_failed(summarize(&vs, 8).join("\n"), &vs);
                    }
                }
                Err(e) => {
                    model.read_failed(id);
                    return Err(e);
                }
            }
        }
        Op::SnapshotCreate
        | Op::SnapshotApply { .. }
        | Op::SnapshotDelete { .. }
        | Op::Amend { .. }
        | Op::Resize { .. } => {
            unreachable!("snapshot operations, amends and resizes run through qemu-img (alone_op)")
        }
        Op::Crash => unreachable!("crash points split epochs"),
    }
    Ok(())
}

/// Read the whole guest disk (`sectors` long now) through the driver and
/// check it against the model.
fn read_back(
    client: &mut dyn Guest,
    model: &mut Model,
    sectors: u64,
    report: &mut QemuReport,
) -> anyhow::Result<()> {
    let ss = SECTOR_SIZE as u64;
    // Op ids no operation of the case has, named as the read-back.
    let mut op = oracle::model::READ_BACK_OPS;
    let mut at = 0;
    while at < sectors {
        let n = (sectors - at).min(READ_PIECE / ss);
        let mut buf = vec![0u8; (n * ss) as usize];
        model.read_issued(OpId(op), SectorRange::new(at, n));
        client.read(at * ss, &mut buf)?;
        report.read_sectors += n;
        if let Err(vs) = model.read_completed(OpId(op), &buf) {
            report.model_failed(summarize(&vs, 8).join("\n"), &vs);
        }
        at += n;
        op += 1;
    }
    Ok(())
}

fn dirty(path: &Path) -> anyhow::Result<bool> {
    use std::io::Read;
    let mut h = Vec::with_capacity(80);
    std::fs::File::open(path)?.take(80).read_to_end(&mut h)?;
    Ok(engine::format::header::dirty_in(&h))
}

/// `qemu-img check` and our checker on `image` (its data file's state
/// `data`, which qemu-img opens with it): corruption fails; leaks are
/// counted (a crash may leak clusters), unless `leaks_allowed` is false.
/// Our checker reads the image file alone, as `qcsim check` does: the
/// metadata is all there, and a data file's clusters are not refcounted.
fn check_image(
    image: &Path,
    data: Option<&Path>,
    label: &str,
    dir: &Path,
    leaks_allowed: bool,
    report: &mut QemuReport,
) -> anyhow::Result<bool> {
    let mut args = vec!["check".to_owned()];
    args.extend(image_args(image, data)?);
    let out = run_tool("qemu-img", &strs(&args), dir)?;
    let code = out.status.code();
    let qemu_ok = code == Some(0) || (leaks_allowed && code == Some(3));
    if !qemu_ok {
        report.check_failed(
            label,
            format!(
                "qemu-img check ({}):\n{}",
                exit_text(code),
                output_text(&out).trim_end()
            ),
        );
    }
    let bytes = std::fs::read(image)?;
    let ours = oracle::check::check(&bytes);
    let ours_ok = ours.corruptions == 0
        && ours.check_errors == 0
        && ours.failure.is_none()
        && (leaks_allowed || ours.leaks == 0);
    if !ours_ok {
        report.check_failed(
            label,
            format!(
                "qcsim's checker: {} corruptions, {} leaks, {} check errors{}\n{}",
                ours.corruptions,
                ours.leaks,
                ours.check_errors,
                ours.failure
                    .as_ref()
                    .map(|f| format!(": {f}"))
                    .unwrap_or_default(),
                ours.human().trim_end()
            ),
        );
    }
    Ok(qemu_ok && ours_ok)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Judge one crash state, the image's `state` with its data file's
/// `data` (the same moment's): repaired by QEMU first if lazy refcounts
/// left it dirty (as opening it would), then checked; with `model`, its
/// guest view as QEMU reads it must be what the model allows, the disk
/// being the size given with it (a resize's, which the model may exceed).
fn judge_state(
    crash: usize,
    state: &Path,
    data: Option<&Path>,
    dir: &Path,
    report: &mut QemuReport,
    model: Option<(&mut Model, u64)>,
) -> anyhow::Result<()> {
    report.crash_states += 1;
    let image_label = file_label(state);
    // Named as everywhere else: crash K (numbered from 1) ends epoch
    // K-1, whose directory holds the states.
    let label = match data {
        None => format!("crash {crash} ({}/{image_label})", file_label(dir)),
        Some(d) => format!(
            "crash {crash} ({}/{image_label} with {})",
            file_label(dir),
            file_label(d)
        ),
    };
    // A dirty state is repaired in a copy: the state as built stays, for
    // `qcsim disk-replay` to be compared with. The data file's state is
    // copied too, since the repair opens it for writing.
    let repaired = dir.join(format!("{image_label}.repaired"));
    let data_repaired = data.map(|d| dir.join(format!("{}.repaired", file_label(d))));
    let is_dirty = dirty(state)?;
    let (state, data) = if is_dirty {
        std::fs::copy(state, &repaired)?;
        if let (Some(d), Some(r)) = (data, &data_repaired) {
            std::fs::copy(d, r)?;
        }
        (repaired.as_path(), data_repaired.as_deref())
    } else {
        (state, data)
    };
    let remove_copies = || {
        let _ = std::fs::remove_file(&repaired);
        if let Some(r) = &data_repaired {
            let _ = std::fs::remove_file(r);
        }
    };
    if is_dirty {
        let mut args = vec!["check", "-q", "-r", "all"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        args.extend(image_args(state, data)?);
        let out = run_tool("qemu-img", &strs(&args), dir)?;
        if !matches!(out.status.code(), Some(0) | Some(3)) {
            report.check_failed(
                &label,
                format!(
                    "QEMU's repair (qemu-img check -r all, {}):\n{}",
                    exit_text(out.status.code()),
                    output_text(&out).trim_end()
                ),
            );
            return Ok(());
        }
    }
    let checked = check_image(state, data, &label, dir, true, report)?;
    let Some((model, sectors)) = model else {
        return Ok(());
    };
    if !checked {
        return Ok(());
    }
    let guest = dir.join(format!("{image_label}.guest"));
    let mut args = vec!["convert".to_owned()];
    args.extend(image_args(state, data)?);
    args.extend(["-O".into(), "raw".into(), utf8(&guest)?.to_owned()]);
    let out = run_tool("qemu-img", &strs(&args), dir)?;
    if !out.status.success() {
        report.driver_failed(format!(
            "qemu-img convert of {label} ({}): {}",
            exit_text(out.status.code()),
            output_text(&out).trim_end()
        ));
        return Ok(());
    }
    let bytes = std::fs::read(&guest)?;
    let _ = std::fs::remove_file(&guest);
    remove_copies();
    let got = (bytes.len() / SECTOR_SIZE) as u64;
    if got != sectors {
        report.driver_failed(format!(
            "the guest view of {label} is {got} sectors long; the disk had {sectors}"
        ));
        return Ok(());
    }
    report.recovered_sectors += got;
    // As in process: past the end a resize left nothing is read or kept.
    let vs = model.check_recovered(0, &bytes);
    let max = model.sectors();
    if sectors < max {
        model.forget_recovered(sectors, max - sectors);
    }
    model.finish_recovery();
    if !vs.is_empty() {
        report.model_failed(
            format!(
                "the guest view of {label}, as qemu-img convert reads it:\n{}",
                summarize(&vs, 8).join("\n")
            ),
            &vs,
        );
    }
    Ok(())
}

fn judge_final(
    image: &Path,
    data: Option<&Path>,
    dir: &Path,
    leaks_allowed: bool,
    report: &mut QemuReport,
) -> anyhow::Result<()> {
    let label = match data {
        None => "final (final.raw)".to_owned(),
        Some(d) => format!("final (final.raw with {})", file_label(d)),
    };
    if dirty(image)? {
        report.check_failed(&label, "the image is left dirty after a clean close".into());
    }
    check_image(image, data, &label, dir, leaks_allowed, report)?;
    Ok(())
}
