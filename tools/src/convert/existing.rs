//! Converting into an image that is not made fresh from the source alone:
//! an existing one (`-n`, [`Destination::Existing`]: the source's whole
//! guest disk written into it, zeroes as zeroes) and a new one over a
//! backing file (`-B`, [`Destination::OntoBacking`]: only what the source's
//! top image holds is written). Both copy one request at a time in guest
//! order, as qemu-img does for them, and report progress along the plan
//! of the same requests.
//!
//! [`Destination::Existing`]: super::Destination::Existing
//! [`Destination::OntoBacking`]: super::Destination::OntoBacking

use std::path::Path;

use crate::create::{prepare_image, CreateImageOptions};
use crate::files::{open_image, Disk, Format, OpenOptions};
use crate::progress::CONVERT_BUFFER;

use super::error::{copy_err, ConvertError, ConvertStats, CopyStep, Counted};
use super::fresh::is_zero;
use super::options::{ConvertOptions, CHUNK};
use super::plan::Reporter;

/// The source, opened read-only with its chain (`-f`, `-U` as given).
async fn open_source(src: &Path, opts: &ConvertOptions) -> Result<Disk, ConvertError> {
    let o = OpenOptions {
        format: opts.source_format,
        read_only: true,
        force_share: opts.force_share,
        ..OpenOptions::default()
    };
    Ok(open_image(src, &o).await?)
}

/// The destination, opened writable in `format`.
async fn open_destination(dst: &Path, format: Format) -> Result<Disk, ConvertError> {
    let o = OpenOptions {
        format: Some(format),
        ..OpenOptions::default()
    };
    open_image(dst, &o)
        .await
        .map_err(|error| ConvertError::OpenDestination {
            path: dst.to_owned(),
            error: Box::new(error),
        })
}

/// The progress reporter of copying `src` onto `dst`, in requests of the
/// buffer size, or `dst`'s cluster size when larger.
async fn reporter<'a>(
    progress: Option<&'a mut dyn FnMut(f32)>,
    src: (&Disk, &Path),
    top_only: bool,
    dst: &Disk,
) -> Result<Reporter<'a>, ConvertError> {
    let buffer = dst
        .qcow2()
        .map_or(CONVERT_BUFFER, |i| i.cluster_size().max(CONVERT_BUFFER));
    Reporter::new(progress, src.0, top_only, buffer)
        .await
        .map_err(|error| ConvertError::Plan {
            path: src.1.to_owned(),
            error,
        })
}

/// Write `buf` at `at`: zeroes as zeroes (unmapping with `unmap`), data
/// compressed with `compress`.
async fn write_piece(
    d: &Disk,
    at: u64,
    buf: &[u8],
    unmap: bool,
    compress: bool,
) -> engine::Result<()> {
    if is_zero(buf) {
        d.write_zeroes(at, buf.len() as u64, unmap).await
    } else if compress {
        d.write_compressed(at, buf).await
    } else {
        d.write(at, buf).await
    }
}

/// Drop the source, then close the destination.
async fn finish(
    s: Disk,
    d: Disk,
    dst: &Path,
    size: u64,
    counted: &Counted,
) -> Result<ConvertStats, ConvertError> {
    let source_engine = s.qcow2().map(|image| image.counters());
    drop(s);
    d.close().await.map_err(|error| ConvertError::Close {
        path: dst.to_owned(),
        error,
    })?;
    Ok(counted.stats(size, source_engine))
}

/// `-n`: the source's guest data into the existing destination.
pub(super) async fn convert_into_existing(
    src: &Path,
    dst: &Path,
    opts: &ConvertOptions,
    progress: Option<&mut dyn FnMut(f32)>,
) -> Result<ConvertStats, ConvertError> {
    let s = open_source(src, opts).await?;
    let d = open_destination(dst, opts.output_format).await?;
    let size = s.virtual_size();
    if d.virtual_size() < size {
        return Err(ConvertError::TargetTooSmall {
            path: dst.to_owned(),
        });
    }
    let mut reporter = reporter(progress, (&s, src), false, &d).await?;
    // A compressed write takes whole clusters of the target.
    let step = match d.qcow2() {
        Some(i) if opts.compress => i.cluster_size(),
        _ => CHUNK,
    };
    let counted = Counted::default();
    let mut buf = vec![0u8; step as usize];
    let mut pos = 0;
    while pos < size {
        let n = (size - pos).min(step) as usize;
        s.read(pos, &mut buf[..n])
            .await
            .map_err(copy_err(CopyStep::Read, src, pos))?;
        counted.read(n as u64);
        write_piece(&d, pos, &buf[..n], true, opts.compress)
            .await
            .map_err(copy_err(CopyStep::Write, dst, pos))?;
        counted.wrote(n as u64);
        pos += n as u64;
        reporter.reached(pos);
    }
    finish(s, d, dst, size, &counted).await
}

/// The runs of `[pos, end)` the source's top image holds itself (data or
/// zeroes, not what it leaves to its backing file); a raw source holds
/// all of it.
async fn held_runs(
    s: &Disk,
    src: &Path,
    pos: u64,
    end: u64,
) -> Result<Vec<(u64, u64)>, ConvertError> {
    let mut held = Vec::new();
    let mut at = pos;
    while at < end {
        let (status, len) = match s.qcow2() {
            Some(i) => {
                i.block_status(at, end - at)
                    .await
                    .map_err(copy_err(CopyStep::Status, src, at))?
            }
            None => (engine::Status::Data, end - at),
        };
        if status != engine::Status::Backing {
            held.push((at, at + len));
        }
        at += len;
    }
    Ok(held)
}

/// `-B BACKING` (or `-o backing_file=`): the destination is created with
/// that backing file, and only what the source's top image holds is
/// written, so that what it leaves to its own backing file is left to
/// the new one.
pub(super) async fn convert_onto_backing(
    src: &Path,
    dst: &Path,
    opts: &ConvertOptions,
    backing: Option<&str>,
    backing_format: Option<&str>,
    progress: Option<&mut dyn FnMut(f32)>,
) -> Result<ConvertStats, ConvertError> {
    let s = open_source(src, opts).await?;
    let size = s.virtual_size();
    let create = CreateImageOptions {
        format: opts.output_format,
        options: opts.options.clone(),
        size: Some(size.to_string()),
        backing: backing.map(str::to_owned),
        backing_format: backing_format.map(str::to_owned),
        unsafe_backing: false,
    };
    prepare_image(dst, &create)
        .await
        .map_err(ConvertError::CreateOnBacking)?
        .write()
        .await
        .map_err(ConvertError::CreateOnBacking)?;
    let d = open_destination(dst, opts.output_format).await?;
    let target_cluster = d.qcow2().map_or(CHUNK, |i| i.cluster_size());
    // A compressed write takes whole clusters of the target.
    let step = if opts.compress {
        target_cluster
    } else {
        target_cluster.min(CHUNK)
    };
    // qemu-img counts only what the source's top image holds: the rest is
    // taken to be in the new backing file.
    let mut reporter = reporter(progress, (&s, src), true, &d).await?;
    let counted = Counted::default();
    let mut want = vec![0u8; step as usize];
    let mut pos = 0;
    // As qemu-img copies onto a new backing file: what the source's top
    // image leaves to its own backing file is left to the new one;
    // everything else is written, zeroes as zeroes (the backing file would
    // show through where nothing is), data as data even where the new
    // backing file holds the same.
    while pos < size {
        let n = (size - pos).min(step);
        let mut held = held_runs(&s, src, pos, pos + n).await?;
        // A compressed write takes the whole cluster once any of it is the
        // source top's own.
        if opts.compress && !held.is_empty() {
            held = vec![(pos, pos + n)];
        }
        for (a, b) in held {
            let buf = &mut want[(a - pos) as usize..(b - pos) as usize];
            s.read(a, buf)
                .await
                .map_err(copy_err(CopyStep::Read, src, a))?;
            counted.read(b - a);
            write_piece(&d, a, buf, false, opts.compress)
                .await
                .map_err(copy_err(CopyStep::Write, dst, a))?;
            counted.wrote(b - a);
        }
        pos += n;
        reporter.reached(pos);
    }
    finish(s, d, dst, size, &counted).await
}
