//! `qemu-img commit`: write what an image holds over its backing file
//! into a file of its backing chain (its own backing file, or a deeper
//! `base`), then empty the image, as qemu-img does unless told to keep it
//! (`-d`; naming a base implies it, since the images between would be
//! left inconsistent with an emptied top).
//!
//! Each image above the base is opened alone, read-only, from the lowest
//! to the top, and what it allocates (data, or zero clusters) is written
//! into the base, so that a higher image's data lands over a lower one's.
//! The base grows first if it is shorter than the image.

use std::path::{Path, PathBuf};

use engine::Status;

use crate::files::{open_image, resolve_backing_path, Disk, Format, OpenError, OpenOptions};
use crate::resize::{resize_image, ResizeError, SizeChange};

/// Bytes copied at a time.
const CHUNK: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("Image does not have a backing file")]
    NoBacking,
    /// `-b` names no file of the chain.
    #[error("Did not find '{0}' in the backing chain of '{1}'")]
    BaseNotInChain(String, String),
    #[error(transparent)]
    Resize(#[from] ResizeError),
    #[error(transparent)]
    Engine(#[from] engine::Error),
}

/// One file of the chain: its path and format.
#[derive(Debug, Clone)]
struct Layer {
    path: PathBuf,
    format: Option<Format>,
}

/// Commit the image at `path` into `base` (its backing file when `None`);
/// `keep` leaves the image as it was (`-d`).
pub async fn commit_image(
    path: &Path,
    opts: &OpenOptions,
    base: Option<&Path>,
    keep: bool,
) -> Result<(), CommitError> {
    let chain = chain_of(path, opts).await?;
    if chain.len() < 2 {
        return Err(CommitError::NoBacking);
    }
    let base_at = match base {
        None => 1,
        Some(b) => chain
            .iter()
            .position(|l| l.path == b || crate::files::same_file(&l.path, b))
            .filter(|&i| i > 0)
            .ok_or_else(|| {
                CommitError::BaseNotInChain(b.display().to_string(), path.display().to_string())
            })?,
    };
    let keep = keep || base.is_some();
    let top_size = open_alone(&chain[0], opts, true).await?.virtual_size();
    let base_layer = &chain[base_at];
    let base_opts = OpenOptions {
        format: base_layer.format,
        backing: true,
        ..opts.clone()
    };
    {
        let d = open_image(
            &base_layer.path,
            &OpenOptions {
                read_only: true,
                ..base_opts.clone()
            },
        )
        .await?;
        let base_size = d.virtual_size();
        d.close().await?;
        if base_size < top_size {
            resize_image(
                &base_layer.path,
                &base_opts,
                SizeChange::To(top_size),
                false,
            )
            .await?;
        }
    }
    let target = open_image(
        &base_layer.path,
        &OpenOptions {
            read_only: false,
            backing: false,
            ..base_opts
        },
    )
    .await?;
    for layer in chain[..base_at].iter().rev() {
        let src = open_alone(layer, opts, true).await?;
        copy_allocated(&src, &target).await?;
        src.close().await?;
    }
    target.close().await?;
    if !keep {
        let top = open_alone(&chain[0], opts, false).await?;
        if let Disk::Qcow2(img) = &top {
            img.make_empty().await?;
        }
        top.close().await?;
    }
    Ok(())
}

/// The files of the chain from `path` down, as their images name them.
async fn chain_of(path: &Path, opts: &OpenOptions) -> Result<Vec<Layer>, CommitError> {
    let mut chain = vec![Layer {
        path: path.to_owned(),
        format: opts.format,
    }];
    loop {
        let last = chain.last().expect("not empty").clone();
        let d = open_alone(&last, opts, true).await?;
        let spec = d.qcow2().and_then(|i| i.backing_spec());
        d.close().await?;
        let Some((name, fmt)) = spec else {
            return Ok(chain);
        };
        if chain.len() > crate::files::MAX_CHAIN_DEPTH {
            return Ok(chain);
        }
        chain.push(Layer {
            path: resolve_backing_path(&last.path, &name),
            format: fmt.and_then(|f| f.parse().ok()),
        });
    }
}

/// One file of the chain without its backing files.
async fn open_alone(layer: &Layer, opts: &OpenOptions, read_only: bool) -> Result<Disk, OpenError> {
    let o = OpenOptions {
        format: layer.format,
        read_only,
        backing: false,
        ..opts.clone()
    };
    open_image(&layer.path, &o).await
}

/// Write into `dst` what `src` allocates: its data, and zeroes where it
/// has zero clusters. The zeroes may unmap, as QEMU's commit job's do: the
/// clusters under them are freed (iotest 313 counts them).
async fn copy_allocated(src: &Disk, dst: &Disk) -> Result<(), CommitError> {
    let Some(img) = src.qcow2() else {
        return Ok(());
    };
    let size = img.virtual_size().min(dst.virtual_size());
    let mut buf = vec![0u8; CHUNK as usize];
    let mut pos = 0;
    while pos < size {
        let (status, n) = img.block_status(pos, (size - pos).min(CHUNK)).await?;
        match status {
            Status::Data => {
                let b = &mut buf[..n as usize];
                img.read(pos, b).await?;
                dst.write(pos, b).await?;
            }
            Status::Zero => dst.write_zeroes(pos, n, true).await?,
            Status::Unallocated | Status::Backing => {}
        }
        pos += n;
    }
    dst.flush().await?;
    Ok(())
}
