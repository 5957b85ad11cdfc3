//! `qcsim convert`: copy the guest-visible content of an image (qcow2 with
//! its backing chain, or raw) into a new raw or qcow2 file, as `qemu-img
//! convert` does. The source's block status (`Image::block_status_deep`)
//! says which ranges hold data: only those are read, and of them only
//! non-zero blocks are written, so the output stays sparse (holes in a raw
//! file, unallocated clusters in a qcow2 one) and a mostly empty disk
//! converts without reading its holes. The destination is always fresh, so
//! ranges that read as zero need no write at all. Several chunks are in
//! flight at once (`-m`, default 8, as qemu-img's coroutines).

use std::cell::Cell;
use std::path::PathBuf;

use anyhow::{bail, Context};
use engine::dev::{BlockDev, FileDev, FileOptions};
use engine::{EngineOptions, Image, Status};
use futures::stream::{FuturesUnordered, StreamExt};
use tools::create::{check_create_options, prepare, Wanted};
use tools::files::{
    file_id_of_path, open_image_with_files, resolve_data_file_path, Disk, Format, OpenOptions,
};

use tools::qemu_args::{option_help, wants_help, ImageOpts};

#[derive(clap::Args)]
pub struct Args {
    /// Source format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', value_name = "FMT")]
    pub source_format: Option<String>,
    /// Output format: raw (the default, as in qemu-img) or qcow2.
    #[arg(short = 'O', value_name = "FMT", default_value = "raw")]
    pub output_format: String,
    /// Output image options (qcow2 `-o` names, without size or backing).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Chunks in flight at once.
    #[arg(short = 'm', value_name = "N", default_value_t = 8)]
    pub parallel: usize,
    /// Bypass the host page cache (O_DIRECT) on source and destination.
    #[arg(short = 'n', long = "nocache")]
    pub nocache: bool,
    /// Print, on standard error, what was read from the source and written
    /// to the destination.
    #[arg(long = "stats")]
    pub stats: bool,
    /// Force sharing: read a source other processes have open, even for
    /// writing, without keeping them from writing it (qemu-img's -U; what
    /// is read may then be inconsistent).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Source image.
    pub source: PathBuf,
    /// Destination file (created, or overwritten).
    pub destination: PathBuf,
}

/// Bytes copied per chunk at least; a multiple of every cluster size up to
/// 1 MiB, and raised to the cluster size above that so that no chunk ends
/// inside a destination cluster.
const CHUNK: u64 = 1 << 20;

/// Largest `-m`, as qemu-img's.
const MAX_PARALLEL: usize = 16;

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

    async fn close(self) -> engine::Result<()> {
        match self {
            Target::Raw(d) => Ok(d.flush().await?),
            Target::Qcow2(i) => i.close().await.map(drop),
        }
    }
}

/// What a conversion read and wrote, counted by the copy itself.
#[derive(Default)]
struct CopyStats {
    reads: Cell<u64>,
    bytes_read: Cell<u64>,
    writes: Cell<u64>,
    bytes_written: Cell<u64>,
}

impl CopyStats {
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

/// Copy chunk `index` (of `chunk` bytes) of the source to the target:
/// only the ranges that hold data are read, and of them the blocks of
/// `granule` bytes that are not all zero are written.
async fn copy_chunk(
    src: &Disk,
    dst: &Target,
    index: u64,
    chunk: u64,
    size: u64,
    granule: usize,
    stats: &CopyStats,
) -> anyhow::Result<()> {
    let start = index * chunk;
    let end = start + (size - start).min(chunk);
    let mut pos = start;
    while pos < end {
        let (status, n) = source_status(src, pos, end - pos)
            .await
            .with_context(|| format!("block status of the source at offset {pos}"))?;
        if status == Status::Data {
            let mut buf = vec![0u8; n as usize];
            src.read(pos, &mut buf)
                .await
                .with_context(|| format!("reading the source at offset {pos}"))?;
            CopyStats::add(&stats.reads, 1);
            CopyStats::add(&stats.bytes_read, n);
            for (at, len) in nonzero_runs(&buf, granule) {
                let o = pos + at as u64;
                dst.write(o, &buf[at..at + len])
                    .await
                    .with_context(|| format!("writing the destination at offset {o}"))?;
                CopyStats::add(&stats.writes, 1);
                CopyStats::add(&stats.bytes_written, len as u64);
            }
        }
        pos += n;
    }
    Ok(())
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.options.iter().any(|o| wants_help(o)) {
        print!("{}", option_help());
        return Ok(0);
    }
    let source_format = args
        .source_format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let output_format: Format = args.output_format.parse()?;
    if !(1..=MAX_PARALLEL).contains(&args.parallel) {
        bail!("-m must be between 1 and {MAX_PARALLEL}");
    }
    let mut opts = ImageOpts::default();
    for list in &args.options {
        opts.apply_list(list)?;
    }
    if opts.size.is_some() || opts.backing_file.is_some() || opts.backing_fmt.is_some() {
        bail!("convert: size, backing_file and backing_fmt cannot be given with -o");
    }
    if output_format == Format::Raw && opts != ImageOpts::default() {
        bail!("convert: raw output takes no -o options");
    }
    let src_opts = OpenOptions {
        format: source_format,
        read_only: true,
        direct: args.nocache,
        force_share: args.force_share,
        ..OpenOptions::default()
    };
    futures::executor::block_on(async {
        let (src, src_files) = open_image_with_files(&args.source, &src_opts).await?;
        let size = src.virtual_size();
        let file_opts = FileOptions {
            direct: args.nocache,
            ..FileOptions::default()
        };
        let dst_name = args.destination.display().to_string();
        // Every check before the destination is touched: the options
        // against the source's size (only now known), and the files to
        // write against every file the source chain reads, by device and
        // inode (a hard link to the source is the source).
        let create = match output_format {
            Format::Raw => None,
            Format::Qcow2 => {
                let create = opts
                    .to_create_options(size)
                    .with_context(|| dst_name.clone())?;
                check_create_options(&create)
                    .await
                    .with_context(|| dst_name.clone())?;
                Some(create)
            }
        };
        let data_path = create
            .as_ref()
            .and_then(|c| c.data_file.as_deref())
            .map(resolve_data_file_path);
        let mut wanted = vec![Wanted {
            path: &args.destination,
            // A raw destination is the disk, so it takes the disk's size.
            length: (output_format == Format::Raw).then_some(size),
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
                bail!(
                    "convert: {} is the same file as {}, which the source reads: writing it would destroy the source",
                    w.path.display(),
                    f.first
                );
            }
        }
        let mut devs = prepare(&wanted, &file_opts).await?.into_iter();
        let dev = devs.next().expect("the destination was prepared");
        let data = devs.next();
        let (target, granule) = match create {
            None => {
                dev.truncate(0).await.context(dst_name.clone())?;
                dev.truncate(size).await.context(dst_name.clone())?;
                (Target::Raw(dev), 4096)
            }
            Some(create) => {
                Image::create_with_data(&dev, data.as_ref(), &create)
                    .await
                    .with_context(|| format!("{dst_name}: creating the image"))?;
                let image = Image::open_with_data(dev, data, EngineOptions::default())
                    .await
                    .with_context(|| format!("{dst_name}: opening the new image"))?;
                (Target::Qcow2(Box::new(image)), create.cluster_size as usize)
            }
        };
        let chunk = CHUNK.max(granule as u64);
        let chunks = size.div_ceil(chunk);
        let stats = CopyStats::default();
        let mut next = 0u64;
        let mut in_flight = FuturesUnordered::new();
        while next < chunks || !in_flight.is_empty() {
            while next < chunks && in_flight.len() < args.parallel {
                in_flight.push(copy_chunk(
                    &src, &target, next, chunk, size, granule, &stats,
                ));
                next += 1;
            }
            if let Some(result) = in_flight.next().await {
                result?;
            }
        }
        drop(in_flight);
        target
            .close()
            .await
            .with_context(|| format!("{dst_name}: closing"))?;
        if args.stats {
            eprintln!(
                "convert: read {} bytes of the {size}-byte source in {} reads; wrote {} bytes in {} writes",
                stats.bytes_read.get(),
                stats.reads.get(),
                stats.bytes_written.get(),
                stats.writes.get()
            );
            if let Some(image) = src.qcow2() {
                let c = image.counters();
                eprintln!(
                    "convert: source engine: {} guest reads, {} guest bytes read, {} backing bytes read",
                    c.guest_reads, c.guest_bytes_read, c.backing_bytes_read
                );
            }
        }
        src.close().await.context("closing the source")?;
        anyhow::Ok(0)
    })
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
