//! `qemu-img convert` through the engine: [`convert`] copies the
//! guest-visible content of an image (qcow2 with its backing chain, or raw)
//! into a new raw or qcow2 file and returns what it read and wrote
//! ([`ConvertStats`]).
//!
//! The source's block status (`Image::block_status_deep`) says which
//! ranges hold data: only those are read, and of them only non-zero blocks
//! are written, so the output stays sparse (holes in a raw file,
//! unallocated clusters in a qcow2 one) and a mostly empty disk converts
//! without reading its holes. The destination is always fresh, so ranges
//! that read as zero need no write at all. Several chunks are in flight at
//! once (`parallel`, default 8, as qemu-img's coroutines). Every check (the
//! options, the destination against every file the source chain reads) is
//! made before the destination is touched (`create::prepare`).
//!
//! With `compress` (qemu-img's `-c`), every data cluster of a qcow2
//! destination is written compressed (`Image::write_compressed`; one that
//! does not shrink goes uncompressed, as QEMU writes it), all-zero
//! clusters stay unallocated as without it, and the chunks are copied one
//! at a time in guest order: compressed clusters are packed in the order
//! they are written, which qemu-img's in-order writes make guest order, so
//! the destination's layout does not depend on which chunk finishes first.
//!
//! With a progress callback ([`convert_reporting`]), the copy also reports
//! qemu-img's `-p` percentages: [`progress_plan`] cuts the source into the
//! requests qemu-img would copy it in, and each request's percentage is
//! reported once every chunk up to its end is copied, so the sequence is
//! the same whichever chunks finish first.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use engine::dev::{BlockDev, DevError, FileDev, FileOptions};
use engine::{Backing, EngineOptions, Image, Status};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::create::{check_create_options, prepare, CreateError, Wanted};
use crate::files::{
    file_id_of_path, open_image_with_files, resolve_data_file_path, Disk, FirstOpen, Format,
    OpenError, OpenOptions,
};
use crate::progress::{ConvertPlan, CONVERT_BUFFER, MAX_STATUS_REQUEST};
use crate::qemu_args::{ArgError, ImageOpts};

/// Bytes copied per chunk at least; a multiple of every cluster size up to
/// 1 MiB, and raised to the cluster size above that so that no chunk ends
/// inside a destination cluster.
const CHUNK: u64 = 1 << 20;

/// Largest `parallel` (qemu-img's `-m`), as qemu-img's.
pub const MAX_PARALLEL: usize = 16;

/// How to convert.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The source's format; probed when `None`.
    pub source_format: Option<Format>,
    /// The destination's format: raw (qemu-img's default) or qcow2.
    pub output_format: Format,
    /// qcow2 `-o` option lists for the destination, as given (without
    /// size or backing; none for raw).
    pub options: Vec<String>,
    /// Chunks in flight at once, 1 to [`MAX_PARALLEL`].
    pub parallel: usize,
    /// O_DIRECT on source and destination.
    pub nocache: bool,
    /// qemu-img's `-U`: read a source other processes have open, even for
    /// writing, without keeping them from writing it.
    pub force_share: bool,
    /// qemu-img's `-c`: write the data clusters compressed (qcow2 only).
    pub compress: bool,
    /// qemu-img's `-l`: copy an internal snapshot of the source rather
    /// than its active disk.
    pub snapshot: Option<SnapshotPick>,
}

/// Which internal snapshot `convert -l` copies: `-l ID_OR_NAME` (an id
/// first, then a name, as qemu-img looks it up), or `-l
/// snapshot.id=I,snapshot.name=N` (each given one must match).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotPick {
    IdOrName(String),
    Fields {
        id: Option<String>,
        name: Option<String>,
    },
}

impl SnapshotPick {
    /// Load the picked snapshot of `img` for reading: by id or else by
    /// name (`engine::find_snapshot`, qemu-img's lookup), or the first
    /// whose given fields all match.
    async fn load(&self, img: &mut Image<FileDev>) -> engine::Result<()> {
        match self {
            SnapshotPick::IdOrName(x) => {
                let table = img.snapshots().await?;
                let id = table[engine::find_snapshot(&table, x)?].id.clone();
                img.load_snapshot_tmp(|s| s.id == id).await
            }
            SnapshotPick::Fields { id, name } => {
                img.load_snapshot_tmp(|s| {
                    id.as_ref().is_none_or(|i| s.id == *i)
                        && name.as_ref().is_none_or(|n| s.name == *n)
                })
                .await
            }
        }
    }
}

impl Default for ConvertOptions {
    fn default() -> Self {
        ConvertOptions {
            source_format: None,
            output_format: Format::Raw,
            options: Vec::new(),
            parallel: 8,
            nocache: false,
            force_share: false,
            compress: false,
            snapshot: None,
        }
    }
}

/// Why a conversion failed. The variants before `Truncate` leave an
/// existing destination as it was.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("-m must be between 1 and {MAX_PARALLEL}")]
    Parallel { given: usize },
    /// An `-o` list that does not parse.
    #[error(transparent)]
    Options(#[from] ArgError),
    #[error("convert: size, backing_file and backing_fmt cannot be given with -o")]
    ChainOptions,
    #[error("convert: raw output takes no -o options")]
    RawOptions,
    /// `-l`: the snapshot could not be loaded (qemu-img's words; an
    /// unknown snapshot "Can't find snapshot").
    #[error("Failed to load snapshot: {reason}")]
    Snapshot { reason: String },
    /// `-c` with an output format that has no compressed clusters (raw),
    /// in qemu-img's words.
    #[error("Compression not supported for this file format")]
    CompressUnsupported,
    /// The source (or a file of its chain) could not be opened.
    #[error(transparent)]
    Source(#[from] OpenError),
    /// The `-o` options do not describe an image of the source's size.
    #[error("{path}: {error}")]
    DestinationOptions { path: PathBuf, error: ArgError },
    /// The engine would refuse to create the destination with these
    /// options (the check runs on no file, so this is never a device error).
    #[error("{path}: {error}")]
    DestinationRefused { path: PathBuf, error: engine::Error },
    /// A file to write (the destination or its data file) is a file the
    /// source chain reads.
    #[error("convert: {path} is the same file as {first}, which the source reads: writing it would destroy the source")]
    SameAsSource { path: PathBuf, first: FirstOpen },
    /// The files to write could not be opened, locked or sized.
    #[error(transparent)]
    Prepare(#[from] CreateError),
    /// Emptying or sizing the raw destination failed.
    #[error("{path}: {error}")]
    Truncate { path: PathBuf, error: DevError },
    #[error("{path}: creating the image")]
    Create {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    #[error("{path}: opening the new image")]
    OpenNew {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    /// A step of the copy at `offset` failed: `path` is the file the step
    /// reads or writes (the source, or the destination).
    #[error("{step} at offset {offset}")]
    Copy {
        step: CopyStep,
        path: PathBuf,
        offset: u64,
        #[source]
        error: engine::Error,
    },
    /// Closing (flushing) the destination failed.
    #[error("{path}: closing")]
    Close {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    /// The copy is complete and the destination closed, but closing the
    /// source (`path`) failed; `stats` are the copy's.
    #[error("closing the source")]
    CloseSource {
        path: PathBuf,
        stats: Box<ConvertStats>,
        #[source]
        error: engine::Error,
    },
}

/// The steps of copying a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyStep {
    /// Asking the source what the range holds.
    Status,
    /// Reading the source.
    Read,
    /// Writing the destination.
    Write,
}

impl std::fmt::Display for CopyStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CopyStep::Status => "block status of the source",
            CopyStep::Read => "reading the source",
            CopyStep::Write => "writing the destination",
        })
    }
}

impl ConvertError {
    /// The copy's figures when the copy was made all the same (closing
    /// the source failed after it).
    pub fn stats(&self) -> Option<&ConvertStats> {
        match self {
            ConvertError::CloseSource { stats, .. } => Some(stats),
            _ => None,
        }
    }
}

/// What a conversion read and wrote, counted by the copy itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// The source's virtual size.
    pub source_size: u64,
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    /// The source engine's counters, for a qcow2 source.
    pub source_engine: Option<engine::Counters>,
}

impl ConvertStats {
    /// The lines `--stats` prints on standard error.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "convert: read {} bytes of the {}-byte source in {} reads; wrote {} bytes in {} writes",
            self.bytes_read, self.source_size, self.reads, self.bytes_written, self.writes
        )];
        if let Some(c) = &self.source_engine {
            lines.push(format!(
                "convert: source engine: {} guest reads, {} guest bytes read, {} backing bytes read",
                c.guest_reads, c.guest_bytes_read, c.backing_bytes_read
            ));
        }
        lines
    }
}

/// Whether every byte is zero, a word at a time.
pub fn is_zero(buf: &[u8]) -> bool {
    let mut words = buf.chunks_exact(16);
    let all_words = words
        .by_ref()
        .all(|w| u128::from_ne_bytes(w.try_into().expect("16-byte chunk")) == 0);
    all_words && words.remainder().iter().all(|&b| b == 0)
}

/// The runs of `buf` (as offset, length) to write: blocks of `granule`
/// bytes that are not all zero, adjacent ones merged.
pub fn nonzero_runs(buf: &[u8], granule: usize) -> Vec<(usize, usize)> {
    assert!(granule > 0);
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for (i, block) in buf.chunks(granule).enumerate() {
        if is_zero(block) {
            continue;
        }
        let at = i * granule;
        match runs.last_mut() {
            Some((start, len)) if *start + *len == at => *len += block.len(),
            _ => runs.push((at, block.len())),
        }
    }
    runs
}

/// The destination: a raw file or a fresh qcow2 image.
enum Target {
    Raw(FileDev),
    Qcow2(Box<Image<FileDev>>),
}

impl Target {
    async fn write(&self, offset: u64, buf: &[u8]) -> engine::Result<()> {
        match self {
            Target::Raw(d) => Ok(d
                .write(offset, buf, engine::dev::WriteFlags::default())
                .await?),
            Target::Qcow2(i) => i.write(offset, buf).await,
        }
    }

    /// A compressed write; only a qcow2 target is ever asked (the options
    /// check refuses `-c` for raw output before anything is written).
    async fn write_compressed(&self, offset: u64, buf: &[u8]) -> engine::Result<()> {
        match self {
            Target::Raw(_) => Err(engine::CompressedWriteError::Format.into()),
            Target::Qcow2(i) => i.write_compressed(offset, buf).await,
        }
    }

    async fn close(self) -> engine::Result<()> {
        match self {
            Target::Raw(d) => Ok(d.flush().await?),
            Target::Qcow2(i) => i.close().await.map(drop),
        }
    }
}

/// The copy's counters, shared by the chunks in flight.
#[derive(Default)]
struct Counted {
    reads: Cell<u64>,
    bytes_read: Cell<u64>,
    writes: Cell<u64>,
    bytes_written: Cell<u64>,
}

impl Counted {
    fn add(c: &Cell<u64>, n: u64) {
        c.set(c.get() + n);
    }
}

/// The status of the source from `offset`, at most `len` bytes: a raw
/// source is data throughout.
async fn source_status(src: &Disk, offset: u64, len: u64) -> engine::Result<(Status, u64)> {
    match src.qcow2() {
        Some(image) => image.block_status_deep(offset, len).await,
        None => Ok((Status::Data, len)),
    }
}

/// The two ends of a copy, for the errors that name them.
struct Ends<'a> {
    src: &'a Disk,
    src_path: &'a Path,
    dst: &'a Target,
    dst_path: &'a Path,
}

/// The error of `step` on `path` at `offset`.
fn copy_err(
    step: CopyStep,
    path: &Path,
    offset: u64,
) -> impl FnOnce(engine::Error) -> ConvertError + '_ {
    move |error| ConvertError::Copy {
        step,
        path: path.to_owned(),
        offset,
        error,
    }
}

/// The status at `pos` (at most `len` bytes) as qemu-img's block status
/// answers it, which its progress follows: down the backing chain unless
/// `top_only`, and a data run only as far as its clusters follow one
/// another in the image file (a compressed cluster alone) and stay within
/// one L2 table, since that is where QEMU's qcow2 driver ends a run.
async fn request_status(
    src: &Disk,
    pos: u64,
    len: u64,
    top_only: bool,
) -> engine::Result<(Status, u64)> {
    let Some(mut image) = src.qcow2() else {
        return Ok((Status::Data, len));
    };
    let mut len = len;
    loop {
        let (status, n) = image.block_status(pos, len).await?;
        match (status, image.backing()) {
            (Status::Backing, Some(Backing::Qcow2(lower))) if !top_only => {
                image = lower;
                len = n;
            }
            (Status::Backing, Some(Backing::Raw(_))) if !top_only => return Ok((Status::Data, n)),
            (Status::Data, _) => {
                let cluster = image.cluster_size();
                let entry = if image.header().extended_l2() { 16 } else { 8 };
                let table = cluster / entry * cluster;
                let end = (pos + n).min((pos / table + 1) * table);
                let mut at = (pos / cluster + 1) * cluster;
                let mut host = image.host_offset(pos).await?;
                while at < end {
                    let next = image.host_offset(at).await?;
                    match (host, next) {
                        (Some(h), Some(x)) if x == h - h % cluster + cluster => host = next,
                        _ => break,
                    }
                    at += cluster;
                }
                return Ok((Status::Data, at.min(end) - pos));
            }
            _ => return Ok((status, n)),
        }
    }
}

/// qemu-img convert's progress plan for `src` (see [`ConvertPlan`]),
/// copied in requests of at most `buffer` bytes. With `top_only` (the
/// destination has a backing file, which stands for the source's), only
/// what the top image holds as data counts; otherwise whatever reads as
/// data from anywhere in the chain. A raw source is data throughout here,
/// where qemu-img would skip the holes its file system reports.
pub async fn progress_plan(src: &Disk, top_only: bool, buffer: u64) -> engine::Result<ConvertPlan> {
    let size = src.virtual_size();
    let align = src.qcow2().map_or(512, |i| i.cluster_size());
    let mut plan = ConvertPlan::new();
    let mut pos = 0;
    while pos < size {
        let len = (size - pos).min(MAX_STATUS_REQUEST);
        let (status, n) = request_status(src, pos, len, top_only).await?;
        // qemu-img counts whole sectors, and ends a run on a cluster
        // boundary of the source when that leaves something of it.
        let mut n = n.div_ceil(512) * 512;
        let tail = (pos + n) % align;
        if n > tail {
            n -= tail;
        }
        let n = n.min(size - pos);
        plan.add_run(pos, n, status == Status::Data, buffer);
        pos += n;
    }
    Ok(plan)
}

/// Copy chunk `index` (of `chunk` bytes) of the source to the target:
/// only the ranges that hold data are read, and of them the blocks of
/// `granule` bytes that are not all zero are written (compressed with
/// `compress`, `granule` then being the target's cluster size). Returns
/// `index`.
async fn copy_chunk(
    ends: &Ends<'_>,
    index: u64,
    chunk: u64,
    size: u64,
    granule: usize,
    compress: bool,
    counted: &Counted,
) -> Result<u64, ConvertError> {
    let start = index * chunk;
    let end = start + (size - start).min(chunk);
    let mut next = start;
    while next < end {
        let pos = next;
        let (status, n) = source_status(ends.src, pos, end - pos)
            .await
            .map_err(copy_err(CopyStep::Status, ends.src_path, pos))?;
        // A compressed write takes whole clusters of the target: a data run
        // is widened to them (the chunk is cluster aligned, so they stay
        // in it), and what it takes in reads as it is, holes as zeroes.
        let (pos, n) = if compress && status == Status::Data {
            let g = granule as u64;
            let from = pos / g * g;
            (from, (pos + n).next_multiple_of(g).min(end) - from)
        } else {
            (pos, n)
        };
        if status == Status::Data {
            let mut buf = vec![0u8; n as usize];
            ends.src.read(pos, &mut buf).await.map_err(copy_err(
                CopyStep::Read,
                ends.src_path,
                pos,
            ))?;
            Counted::add(&counted.reads, 1);
            Counted::add(&counted.bytes_read, n);
            for (at, len) in nonzero_runs(&buf, granule) {
                let o = pos + at as u64;
                let data = &buf[at..at + len];
                let written = if compress {
                    ends.dst.write_compressed(o, data).await
                } else {
                    ends.dst.write(o, data).await
                };
                written.map_err(copy_err(CopyStep::Write, ends.dst_path, o))?;
                Counted::add(&counted.writes, 1);
                Counted::add(&counted.bytes_written, len as u64);
            }
        }
        next = pos + n;
    }
    Ok(index)
}

/// The destination's image options from `opts`, checked against the
/// output format.
fn image_options(opts: &ConvertOptions) -> Result<ImageOpts, ConvertError> {
    if !(1..=MAX_PARALLEL).contains(&opts.parallel) {
        return Err(ConvertError::Parallel {
            given: opts.parallel,
        });
    }
    let mut image_opts = ImageOpts::default();
    for list in &opts.options {
        image_opts.apply_list(list)?;
    }
    if image_opts.size.is_some()
        || image_opts.backing_file.is_some()
        || image_opts.backing_fmt.is_some()
    {
        return Err(ConvertError::ChainOptions);
    }
    if opts.output_format == Format::Raw && image_opts != ImageOpts::default() {
        return Err(ConvertError::RawOptions);
    }
    if opts.compress && opts.output_format == Format::Raw {
        return Err(ConvertError::CompressUnsupported);
    }
    Ok(image_opts)
}

/// Convert the image at `source` into a new `destination` (created, or
/// overwritten once every check has passed).
pub async fn convert(
    source: &Path,
    destination: &Path,
    opts: &ConvertOptions,
) -> Result<ConvertStats, ConvertError> {
    convert_reporting(source, destination, opts, None).await
}

/// [`convert`], calling `progress` with each percentage of qemu-img's
/// progress plan as the copy passes it (not the 0 before nor the 100
/// after, which qemu-img reports around the whole command).
pub async fn convert_reporting(
    source: &Path,
    destination: &Path,
    opts: &ConvertOptions,
    mut progress: Option<&mut dyn FnMut(f32)>,
) -> Result<ConvertStats, ConvertError> {
    let image_opts = image_options(opts)?;
    let src_opts = OpenOptions {
        format: opts.source_format,
        read_only: true,
        direct: opts.nocache,
        force_share: opts.force_share,
        ..OpenOptions::default()
    };
    let (mut src, src_files) = open_image_with_files(source, &src_opts).await?;
    if let Some(pick) = &opts.snapshot {
        let loaded = match &mut src {
            Disk::Qcow2(img) => pick.load(img).await.map_err(|e| match e {
                engine::Error::Snapshot(engine::SnapshotError::NotFound(_)) => {
                    "Can't find snapshot".to_string()
                }
                e => e.to_string(),
            }),
            Disk::Raw(_) => Err("the raw format has no internal snapshots".to_string()),
        };
        loaded.map_err(|reason| ConvertError::Snapshot { reason })?;
    }
    let size = src.virtual_size();
    let file_opts = FileOptions {
        direct: opts.nocache,
        ..FileOptions::default()
    };
    let dst_path = || destination.to_owned();
    // Every check before the destination is touched: the options against
    // the source's size (only now known), and the files to write against
    // every file the source chain reads, by device and inode (a hard link
    // to the source is the source).
    let create = match opts.output_format {
        Format::Raw => None,
        Format::Qcow2 => {
            let create = image_opts.to_create_options(size).map_err(|error| {
                ConvertError::DestinationOptions {
                    path: dst_path(),
                    error,
                }
            })?;
            check_create_options(&create).await.map_err(|error| {
                ConvertError::DestinationRefused {
                    path: dst_path(),
                    error,
                }
            })?;
            Some(create)
        }
    };
    let data_path = create
        .as_ref()
        .and_then(|c| c.data_file.as_deref())
        .map(resolve_data_file_path);
    let mut wanted = vec![Wanted {
        path: destination,
        // A raw destination is the disk, so it takes the disk's size.
        length: (opts.output_format == Format::Raw).then_some(size),
    }];
    if let Some(path) = &data_path {
        wanted.push(Wanted {
            path,
            length: Some(size),
        });
    }
    for w in &wanted {
        let Ok(id) = file_id_of_path(w.path) else {
            continue;
        };
        if let Some(f) = src_files.iter().find(|f| f.id == id) {
            return Err(ConvertError::SameAsSource {
                path: w.path.to_owned(),
                first: f.first.clone(),
            });
        }
    }
    let mut devs = prepare(&wanted, &file_opts).await?.into_iter();
    let dev = devs.next().expect("the destination was prepared");
    let data = devs.next();
    let truncate_err = |error| ConvertError::Truncate {
        path: dst_path(),
        error,
    };
    let (target, granule) = match create {
        None => {
            dev.truncate(0).await.map_err(truncate_err)?;
            dev.truncate(size).await.map_err(truncate_err)?;
            (Target::Raw(dev), 4096)
        }
        Some(create) => {
            Image::create_with_data(&dev, data.as_ref(), &create)
                .await
                .map_err(|error| ConvertError::Create {
                    path: dst_path(),
                    error,
                })?;
            // Clusters placed as QEMU places them (a write's new L2 table
            // before its data), as the other real-file tools open images.
            let engine = EngineOptions {
                l2_before_data: true,
                ..EngineOptions::default()
            };
            let image = Image::open_with_data(dev, data, engine)
                .await
                .map_err(|error| ConvertError::OpenNew {
                    path: dst_path(),
                    error,
                })?;
            (Target::Qcow2(Box::new(image)), create.cluster_size as usize)
        }
    };
    let chunk = CHUNK.max(granule as u64);
    let chunks = size.div_ceil(chunk);
    let counted = Counted::default();
    let ends = Ends {
        src: &src,
        src_path: source,
        dst: &target,
        dst_path: destination,
    };
    let mut plan = match progress {
        Some(_) => Some(
            progress_plan(&src, false, CONVERT_BUFFER.max(granule as u64))
                .await
                .map_err(copy_err(CopyStep::Status, source, 0))?,
        ),
        None => None,
    };
    let mut next = 0u64;
    // Chunks finished beyond the first unfinished one, whose number is
    // `copied`: progress moves only as that prefix grows.
    let mut finished = BTreeSet::new();
    let mut copied = 0u64;
    let mut in_flight = FuturesUnordered::new();
    // Compressed clusters land in the order they are written: one chunk at
    // a time keeps that guest order (see the module comment).
    let parallel = if opts.compress { 1 } else { opts.parallel };
    while next < chunks || !in_flight.is_empty() {
        while next < chunks && in_flight.len() < parallel {
            in_flight.push(copy_chunk(
                &ends,
                next,
                chunk,
                size,
                granule,
                opts.compress,
                &counted,
            ));
            next += 1;
        }
        if let Some(result) = in_flight.next().await {
            finished.insert(result?);
            while finished.remove(&copied) {
                copied += 1;
            }
            if let (Some(plan), Some(report)) = (plan.as_mut(), progress.as_mut()) {
                for p in plan.reached((copied * chunk).min(size)) {
                    report(p);
                }
            }
        }
    }
    drop(in_flight);
    target.close().await.map_err(|error| ConvertError::Close {
        path: dst_path(),
        error,
    })?;
    let stats = ConvertStats {
        source_size: size,
        reads: counted.reads.get(),
        bytes_read: counted.bytes_read.get(),
        writes: counted.writes.get(),
        bytes_written: counted.bytes_written.get(),
        source_engine: src.qcow2().map(|image| image.counters()),
    };
    match src.close().await {
        Ok(()) => Ok(stats),
        Err(error) => Err(ConvertError::CloseSource {
            path: source.to_owned(),
            stats: Box::new(stats),
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[]));
        assert!(is_zero(&[0; 37]));
        for i in [0, 15, 16, 36] {
            let mut b = [0u8; 37];
            b[i] = 1;
            assert!(!is_zero(&b), "byte {i}");
        }
    }

    #[test]
    fn runs_merge_adjacent_nonzero_blocks() {
        let mut buf = vec![0u8; 10 * 512 + 100];
        buf[0] = 1; // block 0
        buf[512 + 511] = 1; // block 1
        buf[4 * 512] = 1; // block 4
        buf[10 * 512 + 99] = 1; // the short last block
        assert_eq!(
            nonzero_runs(&buf, 512),
            vec![(0, 1024), (2048, 512), (5120, 100)]
        );
        assert!(nonzero_runs(&[0; 4096], 512).is_empty());
        assert_eq!(nonzero_runs(&[7; 1000], 4096), vec![(0, 1000)]);
    }
}
