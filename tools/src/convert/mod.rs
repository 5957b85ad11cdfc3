//! `qemu-img convert` through the engine: [`convert`] copies the
//! guest-visible content of an image (qcow2 with its backing chain, or raw)
//! into a raw or qcow2 file and returns what it read and wrote
//! ([`ConvertStats`]). This is the one implementation of the command: the
//! drop-in `qemu-img convert` and `qcsim convert` parse their flags into
//! [`ConvertOptions`] and word its [`ConvertError`] their own way.
//!
//! Into a new destination (the default, `fresh`): the source's block
//! status (`Image::block_status_deep`) says which ranges hold data: only
//! those are read, and of them only non-zero blocks are written, so the
//! output stays sparse (holes in a raw file, unallocated clusters in a
//! qcow2 one) and a mostly empty disk converts without reading its holes.
//! The destination is always fresh, so ranges that read as zero need no
//! write at all. Several chunks are in flight at once (`parallel`, default
//! 8, as qemu-img's coroutines). Every check (the options, the destination
//! against every file the source chain reads) is made before the
//! destination is touched (`create::prepare`).
//!
//! With `compress` (qemu-img's `-c`), every data cluster of a qcow2
//! destination is written compressed (`Image::write_compressed`; one that
//! does not shrink goes uncompressed, as QEMU writes it), all-zero
//! clusters stay unallocated as without it, and the chunks are copied one
//! at a time in guest order: compressed clusters are packed in the order
//! they are written, which qemu-img's in-order writes make guest order, so
//! the destination's layout does not depend on which chunk finishes first.
//!
//! Into an existing image (`-n`) or a new one over a backing file (`-B`),
//! see [`Destination`] (`existing`).
//!
//! With a progress callback ([`convert_reporting`]), the copy also reports
//! qemu-img's `-p` percentages: [`progress_plan`] cuts the source into the
//! requests qemu-img would copy it in, and each request's percentage is
//! reported once every chunk up to its end is copied, so the sequence is
//! the same whichever chunks finish first (`plan`).
//!
//! The modules, bottom up: `options` and `error` (with the stats), `plan`,
//! then the copies `fresh` and `existing`.

mod error;
mod existing;
mod fresh;
mod options;
mod plan;

use std::path::Path;

pub use error::{ConvertError, ConvertStats, CopyStep};
pub use fresh::{is_zero, nonzero_runs};
pub use options::{ConvertOptions, Destination, SnapshotPick, MAX_PARALLEL};
pub use plan::progress_plan;

/// Convert the image at `source` into `destination` as `opts` says (by
/// default a new file, created, or overwritten once every check has
/// passed).
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
    progress: Option<&mut dyn FnMut(f32)>,
) -> Result<ConvertStats, ConvertError> {
    match &opts.destination {
        Destination::New => fresh::convert_new(source, destination, opts, progress).await,
        Destination::Existing => {
            existing::convert_into_existing(source, destination, opts, progress).await
        }
        Destination::OntoBacking {
            backing,
            backing_format,
        } => {
            existing::convert_onto_backing(
                source,
                destination,
                opts,
                backing.as_deref(),
                backing_format.as_deref(),
                progress,
            )
            .await
        }
    }
}
