//! The real-file benchmark of `qcsim bench FILE`, with `qemu-img bench`'s
//! job: COUNT requests of BUFFER_SIZE bytes, DEPTH in flight at once, the
//! first at OFFSET and each next one STEP bytes further (wrapping before the
//! end of the disk), all reads or all writes of one pattern byte, with an
//! optional flush every FLUSH_INTERVAL requests (after draining the queue,
//! unless told not to).
//!
//! The engine runs on a [`FileDev`] (its worker pool has as many threads as
//! requests may be in flight, up to [`MAX_THREADS`], as QEMU's thread pool)
//! wrapped in a [`CountingDev`], driven by a single-threaded executor: the
//! engine's futures interleave on this thread while the pool's workers do
//! the syscalls and wake them.
//!
//! An overlay's backing chain is opened below it read-only, each file
//! through its own counted device with the image's O_DIRECT setting and
//! QEMU's read-only locks, so that writes of part of a cluster copy the
//! rest from the backing file as the engine does anywhere else.
//!
//! [`FileBenchFlags::parse`] turns the flags as given into
//! [`FileBenchOptions`], every value checked. [`FileBench`] is one job on
//! one file: made with a fresh copy of the image when it is to be compared
//! with `qemu-img bench` ([`FileBench::run_qemu`], the same job on the
//! copy, its command line built by [`qemu_bench_args`]).
//!
//! This is the one module of this crate that reads the wall clock: it times
//! a real file, not a simulation, and nothing it measures feeds a simulated
//! run.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::{Duration, Instant};

use engine::dev::{
    BlockDev, CountingDev, DevCounts, FileDev, FileId, FileOpenError, FileOptions, IoBuf,
    LockError, LockRequest, WriteFlags,
};
use engine::{Backing, Counters, EngineOptions, Image, Switches};
use futures::future::LocalBoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use serde::Serialize;

use crate::files::{
    probe_path, resolve_backing_path, Format, OpenError, Probed, UnknownFormat, MAX_CHAIN_DEPTH,
};
use crate::qemu_args::{parse_size, ArgError};

/// Most worker threads the file's pool gets (QEMU's thread pool has 64).
pub const MAX_THREADS: usize = 64;
/// Largest count, depth and buffer size, as qemu-img bench's (`INT_MAX`).
pub const MAX_INT_ARG: u64 = i32::MAX as u64;
/// Most bytes of request buffers held at once (depth × buffer size for
/// reads, the buffer size for writes): a bound on what a mistyped flag can
/// make this allocate.
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// `-t`: how the file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CacheMode {
    /// O_DIRECT: bypass the host page cache.
    #[serde(rename = "none")]
    None,
    /// The host page cache, flushed by fdatasync on a guest flush.
    #[serde(rename = "writeback")]
    Writeback,
}

impl CacheMode {
    pub fn name(self) -> &'static str {
        match self {
            CacheMode::None => "none",
            CacheMode::Writeback => "writeback",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CacheMode {
    type Err = FileBenchError;

    fn from_str(s: &str) -> Result<CacheMode, FileBenchError> {
        match s {
            "none" | "off" => Ok(CacheMode::None),
            "writeback" => Ok(CacheMode::Writeback),
            "directsync" | "writethrough" | "unsafe" => Err(FileBenchError::Invalid(format!(
                "cache mode '{s}' is not supported (supported: none, writeback)"
            ))),
            _ => Err(FileBenchError::Invalid(format!(
                "invalid cache mode '{s}' (supported: none, writeback)"
            ))),
        }
    }
}

/// `-i`: qemu-img's asynchronous I/O backend. Every one runs on the
/// engine's thread pool here; the choice is passed on to `qemu-img bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aio {
    Threads,
    Native,
    IoUring,
}

impl Aio {
    pub fn name(self) -> &'static str {
        match self {
            Aio::Threads => "threads",
            Aio::Native => "native",
            Aio::IoUring => "io_uring",
        }
    }
}

impl FromStr for Aio {
    type Err = FileBenchError;

    fn from_str(s: &str) -> Result<Aio, FileBenchError> {
        match s {
            "threads" => Ok(Aio::Threads),
            "native" => Ok(Aio::Native),
            "io_uring" => Ok(Aio::IoUring),
            _ => Err(FileBenchError::Aio(s.to_owned())),
        }
    }
}

/// The flags of `qcsim bench FILE` as given, qemu-img bench's: each value
/// unparsed (`None` when the flag is absent), for [`FileBenchFlags::parse`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileBenchFlags {
    /// `-c`.
    pub count: Option<String>,
    /// `-d`.
    pub depth: Option<String>,
    /// `-f`.
    pub format: Option<String>,
    /// `-t`.
    pub cache: Option<String>,
    /// `-s`.
    pub buffer_size: Option<String>,
    /// `-o`.
    pub offset: Option<String>,
    /// `-S`.
    pub step: Option<String>,
    /// `-i`.
    pub aio: Option<String>,
    /// `-n`.
    pub native: bool,
    /// `-w`.
    pub write: bool,
    /// `--pattern`.
    pub pattern: Option<String>,
    /// `--flush-interval`.
    pub flush_interval: Option<String>,
    /// `--no-drain`.
    pub no_drain: bool,
    /// `-U`.
    pub force_share: bool,
    /// `--off`, each a switch name.
    pub off: Vec<String>,
}

impl FileBenchFlags {
    /// The benchmark's options, every value checked
    /// ([`FileBenchOptions::validate`] included); the error names the flag.
    pub fn parse(&self) -> Result<FileBenchOptions, FileBenchError> {
        let d = FileBenchOptions::default();
        let format = self
            .format
            .as_deref()
            .map(str::parse::<Format>)
            .transpose()?;
        let cache = match &self.cache {
            None => d.cache,
            Some(c) => c.parse::<CacheMode>()?,
        };
        let aio = self.aio.as_deref().map(str::parse::<Aio>).transpose()?;
        let mut switches = d.switches;
        for name in &self.off {
            switches = switches
                .with(name, false)
                .ok_or_else(|| FileBenchError::UnknownSwitch { name: name.clone() })?;
        }
        let opts = FileBenchOptions {
            format,
            cache,
            count: number("-c", &self.count, d.count)?,
            depth: number("-d", &self.depth, d.depth)?,
            buffer_size: number("-s", &self.buffer_size, d.buffer_size)?,
            offset: number("-o", &self.offset, d.offset)?,
            step: number("-S", &self.step, d.step)?,
            write: self.write,
            pattern: self.pattern.as_deref().map(pattern_byte).transpose()?,
            flush_interval: number("--flush-interval", &self.flush_interval, 0)?,
            drain: !self.no_drain,
            switches,
            force_share: self.force_share,
            aio,
            native: self.native,
        };
        opts.validate()?;
        Ok(opts)
    }
}

/// A numeric flag with qemu's size syntax, named in the error.
fn number(flag: &'static str, value: &Option<String>, default: u64) -> Result<u64, FileBenchError> {
    match value {
        None => Ok(default),
        Some(v) => parse_size(v).map_err(|error| FileBenchError::Number {
            flag,
            value: v.clone(),
            error,
        }),
    }
}

/// A pattern byte: decimal, 0x hex or 0 octal, as qemu's strtoul with
/// base 0.
pub fn pattern_byte(s: &str) -> Result<u8, FileBenchError> {
    let parsed = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8)
    } else {
        s.parse::<u64>()
    };
    match parsed {
        Ok(v) if v <= 0xff => Ok(v as u8),
        _ => Err(FileBenchError::Pattern(s.to_owned())),
    }
}

/// One benchmark run; field meanings are qemu-img bench's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBenchOptions {
    /// `-f`; probed from the file when `None`.
    pub format: Option<Format>,
    /// `-t`.
    pub cache: CacheMode,
    /// `-c`: requests to complete, 1 to [`MAX_INT_ARG`].
    pub count: u64,
    /// `-d`: requests in flight at once, 1 to [`MAX_INT_ARG`].
    pub depth: u64,
    /// `-s`: bytes per request, 1 to [`MAX_INT_ARG`].
    pub buffer_size: u64,
    /// `-o`: guest offset of the first request.
    pub offset: u64,
    /// `-S`: offset increment from one request to the next; 0 means the
    /// buffer size, as in qemu-img.
    pub step: u64,
    /// `-w`: write instead of read.
    pub write: bool,
    /// `--pattern`: the byte every write writes. On reads qemu-img ignores
    /// it; here every read is checked to return it.
    pub pattern: Option<u8>,
    /// `--flush-interval`: a flush after this many requests (writes only);
    /// 0 for none.
    pub flush_interval: u64,
    /// Wait for the requests in flight before each flush (off with
    /// `--no-drain`).
    pub drain: bool,
    /// The engine's optimisations (qcow2 only).
    pub switches: Switches,
    /// `-U`: a read benchmark shares the image with writers (and neither
    /// blocks them nor is blocked). A write benchmark always takes QEMU's
    /// write locks; there it has no effect.
    pub force_share: bool,
    /// `-i`: passed on to `qemu-img bench` only.
    pub aio: Option<Aio>,
    /// `-n`: passed on to `qemu-img bench` only.
    pub native: bool,
}

impl Default for FileBenchOptions {
    fn default() -> Self {
        FileBenchOptions {
            format: None,
            cache: CacheMode::Writeback,
            count: 75000,
            depth: 64,
            buffer_size: 4096,
            offset: 0,
            step: 0,
            write: false,
            pattern: None,
            flush_interval: 0,
            drain: true,
            switches: Switches::ALL_ON,
            force_share: false,
            aio: None,
            native: false,
        }
    }
}

impl FileBenchOptions {
    /// The offset increment actually used.
    pub fn effective_step(&self) -> u64 {
        if self.step == 0 {
            self.buffer_size
        } else {
            self.step
        }
    }

    /// `-U` asked for on a write benchmark, which locks for writing all
    /// the same (qemu-img refuses the pair; this tool accepts it).
    pub fn force_share_ignored(&self) -> bool {
        self.force_share && self.write
    }

    /// qemu-img bench's opening lines: the job, and the flush interval
    /// when there is one.
    pub fn header_line(&self) -> String {
        let mut s = self.job_line();
        if self.flush_interval != 0 {
            s.push_str(&format!(
                "\nSending flush every {} requests",
                self.flush_interval
            ));
        }
        s
    }

    fn job_line(&self) -> String {
        format!(
            "Sending {} {} requests, {} bytes each, {} in parallel (starting at offset {}, step size {})",
            self.count,
            if self.write { "write" } else { "read" },
            self.buffer_size,
            self.depth,
            self.offset,
            self.effective_step()
        )
    }

    /// The checks qemu-img bench makes on its flags, with its wording
    /// where it has one; sizes against the disk are checked once it is open.
    pub fn validate(&self) -> Result<(), FileBenchError> {
        let range = |what: &str, v: u64| {
            if (1..=MAX_INT_ARG).contains(&v) {
                Ok(())
            } else {
                Err(FileBenchError::Invalid(format!(
                    "invalid {what} specified: {v}; must be between 1 and {MAX_INT_ARG}"
                )))
            }
        };
        range("request count", self.count)?;
        range("queue depth", self.depth)?;
        range("buffer size", self.buffer_size)?;
        if self.step > MAX_INT_ARG {
            return Err(FileBenchError::Invalid(format!(
                "invalid step size specified: {}; must be at most {MAX_INT_ARG}",
                self.step
            )));
        }
        if self.flush_interval > MAX_INT_ARG {
            return Err(FileBenchError::Invalid(format!(
                "invalid flush interval specified: {}; must be at most {MAX_INT_ARG}",
                self.flush_interval
            )));
        }
        if self.flush_interval != 0 && !self.write {
            return Err(FileBenchError::Invalid(
                "--flush-interval is only available in write tests".into(),
            ));
        }
        // Reads need a buffer per request in flight, writes share one.
        let buffers = if self.write {
            self.buffer_size
        } else {
            self.depth.min(self.count).saturating_mul(self.buffer_size)
        };
        if buffers > MAX_BUFFER_BYTES {
            return Err(FileBenchError::Invalid(format!(
                "depth {} and buffer size {} need {buffers} bytes of buffers, more than the limit of {MAX_BUFFER_BYTES}",
                self.depth, self.buffer_size
            )));
        }
        Ok(())
    }

    /// The offset of the request after one at `offset`, wrapped as
    /// qemu-img wraps it so that every request fits in a disk of `size`.
    pub fn next_offset(&self, offset: u64, size: u64) -> u64 {
        if size <= self.buffer_size {
            return 0;
        }
        (offset + self.effective_step()) % (size - self.buffer_size)
    }
}

/// What a run did and how long it took.
#[derive(Debug, Clone)]
pub struct FileBenchReport {
    pub format: Format,
    pub cache: CacheMode,
    pub write: bool,
    pub requests: u64,
    pub buffer_size: u64,
    pub depth: u64,
    /// From the first request to the completion of the last, as qemu-img
    /// bench times it.
    pub elapsed: Duration,
    /// Closing the image afterwards (write back metadata, flush).
    pub close_elapsed: Duration,
    /// Flushes the job issued (`--flush-interval`).
    pub guest_flushes: u64,
    /// The device during the run.
    pub device: DevCounts,
    /// The device during the run and the close.
    pub device_with_close: DevCounts,
    /// Requests of the run that ran on the bench's own thread, as the
    /// pool's only request, rather than on a worker.
    pub alone_runs: u64,
    /// The engine's counters during the run (qcow2 only).
    pub engine: Option<Counters>,
}

impl FileBenchReport {
    pub fn iops(&self) -> f64 {
        self.iops_over(self.elapsed.as_secs_f64())
    }

    /// Guest mebibytes (2^20 bytes) per second.
    pub fn mib_per_sec(&self) -> f64 {
        self.mib_per_sec_over(self.elapsed.as_secs_f64())
    }

    /// The job's requests per second had it taken `seconds` (another
    /// tool's time for the same job, say).
    pub fn iops_over(&self, seconds: f64) -> f64 {
        self.requests as f64 / seconds.max(1e-9)
    }

    /// [`FileBenchReport::mib_per_sec`] had the job taken `seconds`.
    pub fn mib_per_sec_over(&self, seconds: f64) -> f64 {
        self.iops_over(seconds) * self.buffer_size as f64 / (1u64 << 20) as f64
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum FileBenchError {
    #[error("{0}")]
    Invalid(String),
    /// `-f` names no format this tool knows.
    #[error(transparent)]
    Format(#[from] UnknownFormat),
    #[error("invalid aio option '{0}' (threads, native or io_uring)")]
    Aio(String),
    #[error("--off {name}: unknown switch (known: {})", Switches::NAMES.join(", "))]
    UnknownSwitch { name: String },
    /// A numeric flag (`-c`, `-d`, `-s`, `-o`, `-S`, `--flush-interval`)
    /// that is not a size.
    #[error("{flag} {value}")]
    Number {
        flag: &'static str,
        value: String,
        #[source]
        error: ArgError,
    },
    #[error("invalid pattern byte '{0}': expected a number from 0 to 255")]
    Pattern(String),
    #[error("{path}: no such file")]
    NoSuchFile { path: PathBuf },
    /// The copy of the image for `qemu-img bench` could not be made.
    #[error("copying {from} to {to} for qemu-img")]
    Copy {
        from: PathBuf,
        to: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("syncing {path}")]
    SyncCopy {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    /// The copy probes as an image format qemu-img is not asked to read.
    #[error("{path}: {format} image")]
    ForeignCopy { path: PathBuf, format: &'static str },
    #[error("running qemu-img (is it installed?)")]
    RunQemu {
        #[source]
        error: std::io::Error,
    },
    /// `qemu-img bench` (`args`, joined) failed; its standard output and
    /// standard error.
    #[error("qemu-img {args} failed: {stdout}{stderr}")]
    QemuFailed {
        args: String,
        stdout: String,
        stderr: String,
    },
    #[error("no 'Run completed in' line in qemu-img's output:\n{stdout}")]
    QemuOutput { stdout: String },
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error(transparent)]
    File(#[from] FileOpenError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("{path}: {error}")]
    Engine { path: PathBuf, error: engine::Error },
    /// The backing file `name` that the image at `image` names could not
    /// be opened.
    #[error("{image}: backing file {name}: {error}")]
    BackingFile {
        image: PathBuf,
        name: String,
        error: Box<FileBenchError>,
    },
    #[error(
        "{path}: a request of {len} bytes at offset {offset} does not fit in the {size}-byte disk"
    )]
    OutOfRange {
        path: PathBuf,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("{path}: failed {op} at offset {offset}: {error}")]
    Request {
        path: PathBuf,
        op: &'static str,
        offset: u64,
        error: engine::Error,
    },
    #[error("{path}: the read at offset {offset} returned byte {found:#04x} at +{at}, not the pattern {pattern:#04x}")]
    Mismatch {
        path: PathBuf,
        offset: u64,
        at: usize,
        found: u8,
        pattern: u8,
    },
}

/// A file benchmark ready to run: the image exists, and for a comparison
/// with qemu-img a fresh copy of it was made beside it (removed when this
/// is dropped).
pub struct FileBench {
    path: PathBuf,
    opts: FileBenchOptions,
    copy: Option<QemuCopy>,
}

impl FileBench {
    /// Check that `path` exists and, if `compare_qemu`, copy the image for
    /// `qemu-img bench` before this run changes it.
    pub fn new(
        path: &Path,
        opts: &FileBenchOptions,
        compare_qemu: bool,
    ) -> Result<FileBench, FileBenchError> {
        if !path.exists() {
            return Err(FileBenchError::NoSuchFile {
                path: path.to_owned(),
            });
        }
        let copy = compare_qemu.then(|| QemuCopy::make(path)).transpose()?;
        Ok(FileBench {
            path: path.to_owned(),
            opts: opts.clone(),
            copy,
        })
    }

    pub fn options(&self) -> &FileBenchOptions {
        &self.opts
    }

    /// The job on the image ([`run_file_bench`]).
    pub fn run(&self) -> Result<FileBenchReport, FileBenchError> {
        run_file_bench(&self.path, &self.opts)
    }

    /// `qemu-img bench` with the same job on the copy, if one was made.
    pub fn run_qemu(&self) -> Option<Result<QemuBenchRun, FileBenchError>> {
        let copy = self.copy.as_ref()?;
        Some(run_qemu_bench(&copy.0, &self.opts))
    }
}

/// The copy `qemu-img bench` runs on, removed when dropped, whatever
/// happened.
struct QemuCopy(PathBuf);

impl QemuCopy {
    /// Beside the image, so that both runs use the same file system.
    fn make(path: &Path) -> Result<QemuCopy, FileBenchError> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".qemu-bench-{}", std::process::id()));
        let copy = QemuCopy(path.with_file_name(name));
        std::fs::copy(path, &copy.0).map_err(|error| FileBenchError::Copy {
            from: path.to_owned(),
            to: copy.0.clone(),
            error,
        })?;
        // The fresh copy's pages are dirty in the page cache; written back
        // now, they cannot slow down qemu-img's O_DIRECT requests later.
        std::fs::File::open(&copy.0)
            .and_then(|f| f.sync_all())
            .map_err(|error| FileBenchError::SyncCopy {
                path: copy.0.clone(),
                error,
            })?;
        Ok(copy)
    }
}

impl Drop for QemuCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What `qemu-img bench` printed for the job.
#[derive(Debug, Clone)]
pub struct QemuBenchRun {
    /// Its arguments ([`qemu_bench_args`]).
    pub args: Vec<String>,
    /// Its standard output.
    pub stdout: String,
}

impl QemuBenchRun {
    /// The command as run: `qemu-img bench ...`.
    pub fn command_line(&self) -> String {
        format!("qemu-img {}", self.args.join(" "))
    }

    /// The time of its "Run completed in X seconds." line.
    pub fn elapsed(&self) -> Result<Duration, FileBenchError> {
        let secs = parse_qemu_seconds(&self.stdout).ok_or_else(|| FileBenchError::QemuOutput {
            stdout: self.stdout.clone(),
        })?;
        Ok(Duration::from_secs_f64(secs.max(0.0)))
    }
}

/// The qemu-img bench command line for the job `o` on `path`, a `format`
/// image.
pub fn qemu_bench_args(path: &Path, o: &FileBenchOptions, format: Format) -> Vec<String> {
    let mut v: Vec<String> = vec!["bench".into(), "-f".into(), format.name().into()];
    v.extend(["-t".into(), o.cache.name().into()]);
    v.extend(["-c".into(), o.count.to_string()]);
    v.extend(["-d".into(), o.depth.to_string()]);
    v.extend(["-s".into(), o.buffer_size.to_string()]);
    v.extend(["-o".into(), o.offset.to_string()]);
    v.extend(["-S".into(), o.effective_step().to_string()]);
    if let Some(aio) = o.aio {
        v.extend(["-i".into(), aio.name().into()]);
    }
    if o.native {
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

/// Run qemu-img bench with the job `o` on `copy`.
fn run_qemu_bench(copy: &Path, o: &FileBenchOptions) -> Result<QemuBenchRun, FileBenchError> {
    let format = format_of(copy, o, |format| FileBenchError::ForeignCopy {
        path: copy.to_owned(),
        format,
    })?;
    let args = qemu_bench_args(copy, o, format);
    let out = Command::new("qemu-img")
        .args(&args)
        .output()
        .map_err(|error| FileBenchError::RunQemu { error })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(FileBenchError::QemuFailed {
            args: args.join(" "),
            stdout,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(QemuBenchRun { args, stdout })
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

/// The disk under test.
enum Target {
    Raw(CountingDev<FileDev>),
    Qcow2(Box<Image<CountingDev<FileDev>>>),
}

impl Target {
    fn size(&self) -> u64 {
        match self {
            Target::Raw(d) => d.len(),
            Target::Qcow2(i) => i.virtual_size(),
        }
    }

    fn counts(&self) -> DevCounts {
        match self {
            Target::Raw(d) => d.counts(),
            Target::Qcow2(i) => i.device().counts(),
        }
    }

    /// Requests that ran on the bench's own thread so far
    /// (`IoPool::alone_runs`, over the image's pool: its backing chain's
    /// files share it).
    fn alone_runs(&self) -> u64 {
        match self {
            Target::Raw(d) => d.inner().pool().alone_runs(),
            Target::Qcow2(i) => i.device().inner().pool().alone_runs(),
        }
    }

    fn engine_counters(&self) -> Option<Counters> {
        match self {
            Target::Raw(_) => None,
            Target::Qcow2(i) => Some(i.counters()),
        }
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> engine::Result<()> {
        match self {
            Target::Raw(d) => Ok(d.read(offset, buf).await?),
            Target::Qcow2(i) => i.read(offset, buf).await,
        }
    }

    async fn write(&self, offset: u64, buf: &[u8]) -> engine::Result<()> {
        match self {
            Target::Raw(d) => Ok(d.write(offset, buf, WriteFlags::default()).await?),
            Target::Qcow2(i) => i.write(offset, buf).await,
        }
    }

    async fn flush(&self) -> engine::Result<()> {
        match self {
            Target::Raw(d) => Ok(d.flush().await?),
            Target::Qcow2(i) => i.flush().await,
        }
    }

    /// Close, returning the device's final counts.
    async fn close(self, write: bool) -> engine::Result<DevCounts> {
        match self {
            Target::Raw(d) => {
                if write {
                    d.flush().await?;
                }
                Ok(d.counts())
            }
            Target::Qcow2(i) => Ok(i.close().await?.counts()),
        }
    }
}

/// A finished piece of the job.
enum Done {
    /// A request; reads give their buffer back for reuse.
    Request(Option<IoBuf>),
    /// A flush; `drained` if the queue was drained for it.
    Flush { drained: bool },
}

/// The format `o` names, or else the one `path` probes as; `foreign` is
/// the error for a format this tool does not read.
fn format_of(
    path: &Path,
    o: &FileBenchOptions,
    foreign: impl FnOnce(&'static str) -> FileBenchError,
) -> Result<Format, FileBenchError> {
    match o.format {
        Some(f) => Ok(f),
        None => match probe_path(path)? {
            Probed::Format(f) => Ok(f),
            Probed::Foreign(format) => Err(foreign(format)),
        },
    }
}

fn open_target(path: &Path, o: &FileBenchOptions) -> Result<(Target, Format), FileBenchError> {
    let format = format_of(path, o, |format| {
        OpenError::ForeignFormat {
            path: path.to_owned(),
            format,
        }
        .into()
    })?;
    let file_opts = FileOptions {
        read_only: !o.write,
        direct: o.cache == CacheMode::None,
        threads: o.depth.min(MAX_THREADS as u64) as usize,
        ..FileOptions::default()
    };
    if format == Format::Raw && o.switches != Switches::ALL_ON {
        return Err(FileBenchError::Invalid(
            "engine switches apply to qcow2 images only, not raw".into(),
        ));
    }
    let mut dev = FileDev::open(path, &file_opts)?;
    let dev_id = dev.file_id();
    // QEMU's locks, as qemu-img bench takes them, before the first read:
    // a write benchmark on an image another process has open (or a read
    // benchmark on one another process writes) is refused, not run under it.
    let share = o.force_share && !o.write;
    dev.lock(match format {
        Format::Raw => LockRequest::raw_file(!o.write),
        Format::Qcow2 => LockRequest::qcow2_file(!o.write, share),
    })?;
    let dev = CountingDev::new(dev);
    let target = match format {
        Format::Raw => Target::Raw(dev),
        Format::Qcow2 => {
            let opts = EngineOptions {
                switches: o.switches,
                read_only: !o.write,
                ..EngineOptions::default()
            };
            let image = futures::executor::block_on(Image::open(dev, opts)).map_err(|error| {
                FileBenchError::Engine {
                    path: path.to_owned(),
                    error,
                }
            })?;
            let mut image = image;
            if let Some((name, format)) = image.backing_spec() {
                let backing = open_backing(path, &name, format, &file_opts, &mut vec![dev_id])?;
                image.attach_backing(backing);
            }
            Target::Qcow2(Box::new(image))
        }
    };
    Ok((target, format))
}

/// The backing file `name` of the image at `image` (a `format` file, probed
/// when the header names none), opened read-only as the engine reads it
/// through the benchmark's device (O_DIRECT when the image is), locked as
/// QEMU locks a backing file, with its own backing chain below it. `open`
/// holds the files of the chain opened so far: a file named twice (a loop)
/// is refused, as is a chain deeper than [`MAX_CHAIN_DEPTH`].
fn open_backing(
    image: &Path,
    name: &str,
    format: Option<String>,
    file_opts: &FileOptions,
    open: &mut Vec<FileId>,
) -> Result<Backing<CountingDev<FileDev>>, FileBenchError> {
    let backing_err = |error: FileBenchError| FileBenchError::BackingFile {
        image: image.to_owned(),
        name: name.to_owned(),
        error: Box::new(error),
    };
    if open.len() > MAX_CHAIN_DEPTH {
        return Err(backing_err(FileBenchError::Invalid(format!(
            "the backing chain is deeper than {MAX_CHAIN_DEPTH} files"
        ))));
    }
    if name.is_empty() || name.starts_with("json:") {
        return Err(backing_err(FileBenchError::Invalid(
            "only plain backing file names are supported".into(),
        )));
    }
    let path = resolve_backing_path(image, name);
    let opts = FileOptions {
        read_only: true,
        ..file_opts.clone()
    };
    let mut dev = FileDev::open(&path, &opts).map_err(|e| backing_err(e.into()))?;
    if open.contains(&dev.file_id()) {
        return Err(backing_err(FileBenchError::Invalid(format!(
            "{} is already open in this chain: the backing chain loops",
            path.display()
        ))));
    }
    open.push(dev.file_id());
    let format = match format {
        Some(f) => f.parse::<Format>().map_err(|e| backing_err(e.into()))?,
        None => match probe_path(&path).map_err(|e| backing_err(e.into()))? {
            Probed::Format(f) => f,
            Probed::Foreign(format) => {
                return Err(backing_err(
                    OpenError::ForeignFormat {
                        path: path.clone(),
                        format,
                    }
                    .into(),
                ))
            }
        },
    };
    dev.lock(match format {
        Format::Raw => LockRequest::raw_file(true),
        Format::Qcow2 => LockRequest::qcow2_file(true, false),
    })
    .map_err(|e| backing_err(e.into()))?;
    let dev = CountingDev::new(dev);
    match format {
        Format::Raw => Ok(Backing::Raw(dev)),
        Format::Qcow2 => {
            let opts = EngineOptions {
                read_only: true,
                ..EngineOptions::default()
            };
            let mut img = futures::executor::block_on(Image::open(dev, opts)).map_err(|error| {
                backing_err(FileBenchError::Engine {
                    path: path.clone(),
                    error,
                })
            })?;
            if let Some((below, format)) = img.backing_spec() {
                img.attach_backing(open_backing(&path, &below, format, file_opts, open)?);
            }
            Ok(Backing::Qcow2(Box::new(img)))
        }
    }
}

/// Run the benchmark on the image at `path`.
pub fn run_file_bench(
    path: &Path,
    o: &FileBenchOptions,
) -> Result<FileBenchReport, FileBenchError> {
    o.validate()?;
    let (target, format) = open_target(path, o)?;
    let size = target.size();
    if o.offset
        .checked_add(o.buffer_size)
        .is_none_or(|end| end > size)
    {
        return Err(FileBenchError::OutOfRange {
            path: path.to_owned(),
            offset: o.offset,
            len: o.buffer_size,
            size,
        });
    }
    let before = target.counts();
    let engine_before = target.engine_counters();
    let alone_before = target.alone_runs();
    let (elapsed, guest_flushes) = futures::executor::block_on(run_requests(path, &target, o))?;
    let device = target.counts().since(&before);
    let alone_runs = target.alone_runs() - alone_before;
    let engine = match (target.engine_counters(), engine_before) {
        (Some(after), Some(b)) => Some(after.since(&b)),
        _ => None,
    };
    let close_start = Instant::now();
    let total = futures::executor::block_on(target.close(o.write)).map_err(|error| {
        FileBenchError::Engine {
            path: path.to_owned(),
            error,
        }
    })?;
    let close_elapsed = close_start.elapsed();
    Ok(FileBenchReport {
        format,
        cache: o.cache,
        write: o.write,
        requests: o.count,
        buffer_size: o.buffer_size,
        depth: o.depth,
        elapsed,
        close_elapsed,
        guest_flushes,
        device,
        device_with_close: total.since(&before),
        alone_runs,
        engine,
    })
}

/// The job itself: returns the time from the first submission to the last
/// request's completion, and the flushes issued.
async fn run_requests(
    path: &Path,
    target: &Target,
    o: &FileBenchOptions,
) -> Result<(Duration, u64), FileBenchError> {
    let size = target.size();
    let bs = o.buffer_size as usize;
    // Aligned as qemu-img bench aligns its buffers, so that O_DIRECT can
    // use them as they are.
    let write_buf = IoBuf::aligned_filled(if o.write { bs } else { 0 }, o.pattern.unwrap_or(0));
    let write_buf = write_buf.as_slice();
    let mut spare: Vec<IoBuf> = Vec::new();
    let mut set: FuturesUnordered<LocalBoxFuture<'_, Result<Done, FileBenchError>>> =
        FuturesUnordered::new();
    let (mut submitted, mut completed, mut in_flight) = (0u64, 0u64, 0u64);
    let mut flushes = 0u64;
    // A drained flush is wanted (`draining`) or running (`in_flush`): no
    // new requests until it is done.
    let (mut draining, mut in_flush) = (false, false);
    let mut offset = o.offset;
    let mut elapsed = None;
    let start = Instant::now();
    loop {
        while !draining && !in_flush && submitted < o.count && in_flight < o.depth {
            let off = offset;
            offset = o.next_offset(offset, size);
            submitted += 1;
            in_flight += 1;
            if o.write {
                set.push(Box::pin(async move {
                    target
                        .write(off, write_buf)
                        .await
                        .map_err(|error| request_error(path, "write", off, error))?;
                    Ok(Done::Request(None))
                }));
            } else {
                let mut buf = spare.pop().unwrap_or_else(|| IoBuf::aligned_zeroed(bs));
                let pattern = o.pattern;
                set.push(Box::pin(async move {
                    target
                        .read(off, buf.as_mut_slice())
                        .await
                        .map_err(|error| request_error(path, "read", off, error))?;
                    if let Some(p) = pattern {
                        if let Some(at) = buf.as_slice().iter().position(|&b| b != p) {
                            return Err(FileBenchError::Mismatch {
                                path: path.to_owned(),
                                offset: off,
                                at,
                                found: buf.as_slice()[at],
                                pattern: p,
                            });
                        }
                    }
                    Ok(Done::Request(Some(buf)))
                }));
            }
        }
        let Some(done) = set.next().await else { break };
        match done? {
            Done::Request(buf) => {
                spare.extend(buf);
                completed += 1;
                in_flight -= 1;
                if completed == o.count {
                    elapsed = Some(start.elapsed());
                }
                let unsubmitted = o.count - submitted;
                if o.flush_interval != 0 && unsubmitted.is_multiple_of(o.flush_interval) {
                    if o.drain {
                        draining = true;
                    } else {
                        flushes += 1;
                        set.push(flush_future(path, target, false));
                    }
                }
                if draining && in_flight == 0 {
                    draining = false;
                    in_flush = true;
                    flushes += 1;
                    set.push(flush_future(path, target, true));
                }
            }
            Done::Flush { drained } => {
                if drained {
                    in_flush = false;
                }
            }
        }
    }
    debug_assert_eq!(completed, o.count);
    Ok((elapsed.unwrap_or_else(|| start.elapsed()), flushes))
}

fn flush_future<'a>(
    path: &'a Path,
    target: &'a Target,
    drained: bool,
) -> LocalBoxFuture<'a, Result<Done, FileBenchError>> {
    Box::pin(async move {
        target
            .flush()
            .await
            .map_err(|error| request_error(path, "flush", 0, error))?;
        Ok(Done::Flush { drained })
    })
}

fn request_error(
    path: &Path,
    op: &'static str,
    offset: u64,
    error: engine::Error,
) -> FileBenchError {
    FileBenchError::Request {
        path: path.to_owned(),
        op,
        offset,
        error,
    }
}
