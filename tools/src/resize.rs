//! `qemu-img resize` on an image file: the new size from an absolute or a
//! relative (`+N`, `-N`) size, the refusal to shrink without being told to
//! (shrinking deletes the data past the new end), and the resize itself:
//! the engine's `Image::resize` for qcow2 (and after a shrink the file cut
//! after its last cluster in use), a truncate for raw.

use std::path::Path;

use engine::dev::BlockDev;

use crate::files::{open_image, Disk, OpenError, OpenOptions};

/// The size asked for: absolute, or relative to the current size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeChange {
    To(u64),
    Grow(u64),
    Shrink(u64),
}

#[derive(Debug, thiserror::Error)]
pub enum ResizeError {
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The new size is zero or below.
    #[error("New image size must be positive")]
    NotPositive,
    /// A relative size that overflows.
    #[error("New image size is too large")]
    TooLarge,
    /// A smaller size without `--shrink`.
    #[error("Use the --shrink option to perform a shrink operation.")]
    NeedsShrink,
    #[error("The new size must be a multiple of 512")]
    Unaligned,
    #[error(transparent)]
    Engine(#[from] engine::Error),
    #[error(transparent)]
    Dev(#[from] engine::dev::DevError),
    /// Cutting the file after its last cluster in use, after a shrink.
    #[error("could not trim the image file after shrinking: {0}")]
    Trim(std::io::Error),
}

/// The size `change` asks for, from `current`.
pub fn new_size(current: u64, change: SizeChange) -> Result<u64, ResizeError> {
    let size = match change {
        SizeChange::To(n) => n,
        SizeChange::Grow(n) => current.checked_add(n).ok_or(ResizeError::TooLarge)?,
        SizeChange::Shrink(n) => current.checked_sub(n).ok_or(ResizeError::NotPositive)?,
    };
    if size == 0 {
        return Err(ResizeError::NotPositive);
    }
    if size > i64::MAX as u64 {
        return Err(ResizeError::TooLarge);
    }
    Ok(size)
}

/// Resize the image at `path` (opened writable with `opts`); `shrink`
/// allows a smaller size. Returns the new size.
pub async fn resize_image(
    path: &Path,
    opts: &OpenOptions,
    change: SizeChange,
    shrink: bool,
) -> Result<u64, ResizeError> {
    let opts = OpenOptions {
        read_only: false,
        ..opts.clone()
    };
    let mut disk = open_image(path, &opts).await?;
    let current = disk.virtual_size();
    let size = new_size(current, change)?;
    if size < current && !shrink {
        return Err(ResizeError::NeedsShrink);
    }
    let qcow2 = matches!(disk, Disk::Qcow2(_));
    match &mut disk {
        Disk::Raw(d) => {
            d.truncate(size).await?;
        }
        Disk::Qcow2(img) => {
            if !size.is_multiple_of(512) {
                return Err(ResizeError::Unaligned);
            }
            img.resize(size).await?;
        }
    }
    disk.close().await?;
    if qcow2 && size < current {
        trim_after_shrink(path)?;
    }
    Ok(size)
}

/// After a shrink, with the image closed: cut the file after its last
/// cluster in use, as QEMU does, so that the clusters freed at the end do
/// not stay on disk. Only when the checker finds the image consistent,
/// so nothing past the cut can be referenced.
pub fn trim_after_shrink(path: &Path) -> Result<(), ResizeError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(ResizeError::Trim)?;
    let report = oracle::check::check(&file);
    let consistent =
        report.failure.is_none() && report.corruptions == 0 && report.check_errors == 0;
    let end = report.image_end_offset;
    let len = file.metadata().map_err(ResizeError::Trim)?.len();
    if consistent && end > 0 && end < len {
        file.set_len(end).map_err(ResizeError::Trim)?;
    }
    Ok(())
}
