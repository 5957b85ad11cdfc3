//! Converting into a new destination ([`Destination::New`], the default):
//! every check made before the destination is touched, then the source's
//! data chunks copied, several in flight (`parallel`), only the non-zero
//! blocks of what holds data written, so the output stays sparse; with
//! `compress` one chunk at a time, in guest order (see the `convert`
//! module comment).
//!
//! [`Destination::New`]: super::Destination::New

use std::collections::BTreeSet;
use std::path::Path;

use engine::dev::{BlockDev, FileDev, FileOptions};
use engine::{CreateOptions, EngineOptions, Image, Status};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::create::{check_create_options, prepare, Wanted};
use crate::files::{
    file_id_of_path, open_image_with_files, resolve_data_file_path, ChainFile, Disk, Format,
    OpenOptions,
};
use crate::progress::CONVERT_BUFFER;
use crate::qemu_args::ImageOpts;

use super::error::{copy_err, ConvertError, ConvertStats, CopyStep, Counted};
use super::options::{ConvertOptions, CHUNK, MAX_PARALLEL};
use super::plan::Reporter;

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
            counted.read(n);
            for (at, len) in nonzero_runs(&buf, granule) {
                let o = pos + at as u64;
                let data = &buf[at..at + len];
                let written = if compress {
                    ends.dst.write_compressed(o, data).await
                } else {
                    ends.dst.write(o, data).await
                };
                written.map_err(copy_err(CopyStep::Write, ends.dst_path, o))?;
                counted.wrote(len as u64);
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

/// The source opened read-only with every file of its chain, and the
/// snapshot `-l` picks loaded for reading.
async fn open_source(
    source: &Path,
    opts: &ConvertOptions,
) -> Result<(Disk, Vec<ChainFile>), ConvertError> {
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
    Ok((src, src_files))
}

/// The qcow2 destination's creation options for a source of `size`
/// bytes, checked by the engine on no file (`None` for raw).
async fn create_options(
    image_opts: &ImageOpts,
    output_format: Format,
    size: u64,
    destination: &Path,
) -> Result<Option<CreateOptions>, ConvertError> {
    if output_format == Format::Raw {
        return Ok(None);
    }
    let create =
        image_opts
            .to_create_options(size)
            .map_err(|error| ConvertError::DestinationOptions {
                path: destination.to_owned(),
                error,
            })?;
    check_create_options(&create)
        .await
        .map_err(|error| ConvertError::DestinationRefused {
            path: destination.to_owned(),
            error,
        })?;
    Ok(Some(create))
}

/// Refuse to write any of `wanted` that is a file the source chain reads,
/// by device and inode (a hard link to the source is the source).
fn check_not_source(wanted: &[Wanted<'_>], src_files: &[ChainFile]) -> Result<(), ConvertError> {
    for w in wanted {
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
    Ok(())
}

/// The destination made on its prepared file (and data file): a raw file
/// emptied and sized, or a fresh qcow2 image; with the granule of its
/// writes (its cluster size for qcow2).
async fn make_target(
    dev: FileDev,
    data: Option<FileDev>,
    create: Option<CreateOptions>,
    size: u64,
    destination: &Path,
) -> Result<(Target, usize), ConvertError> {
    let Some(create) = create else {
        let truncate_err = |error| ConvertError::Truncate {
            path: destination.to_owned(),
            error,
        };
        dev.truncate(0).await.map_err(truncate_err)?;
        dev.truncate(size).await.map_err(truncate_err)?;
        return Ok((Target::Raw(dev), 4096));
    };
    Image::create_with_data(&dev, data.as_ref(), &create)
        .await
        .map_err(|error| ConvertError::Create {
            path: destination.to_owned(),
            error,
        })?;
    // Clusters placed as QEMU places them (a write's new L2 table before
    // its data), as the other real-file tools open images.
    let engine = EngineOptions {
        l2_before_data: true,
        ..EngineOptions::default()
    };
    let image = Image::open_with_data(dev, data, engine)
        .await
        .map_err(|error| ConvertError::OpenNew {
            path: destination.to_owned(),
            error,
        })?;
    Ok((Target::Qcow2(Box::new(image)), create.cluster_size as usize))
}

/// Copy every chunk of `chunk` bytes, `parallel` in flight, reporting
/// progress as the finished prefix grows.
async fn copy_all(
    ends: &Ends<'_>,
    chunk: u64,
    granule: usize,
    parallel: usize,
    compress: bool,
    counted: &Counted,
    reporter: &mut Reporter<'_>,
) -> Result<(), ConvertError> {
    let size = ends.src.virtual_size();
    let chunks = size.div_ceil(chunk);
    let mut next = 0u64;
    // Chunks finished beyond the first unfinished one, whose number is
    // `copied`: progress moves only as that prefix grows.
    let mut finished = BTreeSet::new();
    let mut copied = 0u64;
    let mut in_flight = FuturesUnordered::new();
    while next < chunks || !in_flight.is_empty() {
        while next < chunks && in_flight.len() < parallel {
            in_flight.push(copy_chunk(
                ends, next, chunk, size, granule, compress, counted,
            ));
            next += 1;
        }
        if let Some(result) = in_flight.next().await {
            finished.insert(result?);
            while finished.remove(&copied) {
                copied += 1;
            }
            reporter.reached((copied * chunk).min(size));
        }
    }
    Ok(())
}

/// Convert the image at `source` into a new `destination` (created, or
/// overwritten once every check has passed), calling `progress` as
/// `convert_reporting` says.
pub(super) async fn convert_new(
    source: &Path,
    destination: &Path,
    opts: &ConvertOptions,
    progress: Option<&mut dyn FnMut(f32)>,
) -> Result<ConvertStats, ConvertError> {
    let image_opts = image_options(opts)?;
    let (src, src_files) = open_source(source, opts).await?;
    let size = src.virtual_size();
    // Every check before the destination is touched: the options against
    // the source's size (only now known), and the files to write against
    // every file the source chain reads.
    let create = create_options(&image_opts, opts.output_format, size, destination).await?;
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
    check_not_source(&wanted, &src_files)?;
    let file_opts = FileOptions {
        direct: opts.nocache,
        ..FileOptions::default()
    };
    let mut devs = prepare(&wanted, &file_opts).await?.into_iter();
    let dev = devs.next().expect("the destination was prepared");
    let (target, granule) = make_target(dev, devs.next(), create, size, destination).await?;
    let counted = Counted::default();
    let ends = Ends {
        src: &src,
        src_path: source,
        dst: &target,
        dst_path: destination,
    };
    let mut reporter = Reporter::new(progress, &src, false, CONVERT_BUFFER.max(granule as u64))
        .await
        .map_err(copy_err(CopyStep::Status, source, 0))?;
    // Compressed clusters land in the order they are written: one chunk at
    // a time keeps that guest order (see the module comment).
    let parallel = if opts.compress { 1 } else { opts.parallel };
    let chunk = CHUNK.max(granule as u64);
    copy_all(
        &ends,
        chunk,
        granule,
        parallel,
        opts.compress,
        &counted,
        &mut reporter,
    )
    .await?;
    target.close().await.map_err(|error| ConvertError::Close {
        path: destination.to_owned(),
        error,
    })?;
    let stats = counted.stats(size, src.qcow2().map(|image| image.counters()));
    match src.close().await {
        Ok(()) => Ok(stats),
        Err(error) => Err(ConvertError::CloseSource {
            path: source.to_owned(),
            stats: Box::new(stats),
            error,
        }),
    }
}
