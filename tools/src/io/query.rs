//! The qemu-io commands that ask about the image and change nothing:
//! `alloc` and `map` (what this image itself holds, not its backing
//! file), `length` and `info`, in qemu-io's wording.

use std::io::Write;

use engine::format::header::{compat, incompat};
use engine::Status;

use crate::files::Disk;

use super::exec::{CmdFailure, Ctx, Outcome};
use super::format::{cvtstr, errno_text};

/// Whether this image itself holds `[offset, offset + len)`'s first bytes
/// (data or zero clusters, not the backing file's), and for how many
/// bytes the answer holds.
async fn allocated(disk: &Disk, offset: u64, len: u64) -> engine::Result<(bool, u64)> {
    match disk {
        // A raw file holds all of itself.
        Disk::Raw(_) => Ok((true, len)),
        Disk::Qcow2(image) => {
            let (status, n) = image.block_status(offset, len).await?;
            Ok((matches!(status, Status::Data | Status::Zero), n.min(len)))
        }
    }
}

/// `alloc off count`: how many bytes of the range this image holds.
pub(super) async fn alloc(ctx: Ctx<'_>, offset: u64, count: u64, out: &mut impl Write) -> Outcome {
    let size = ctx.disk.virtual_size();
    let end = offset.saturating_add(count).min(size);
    let mut at = offset;
    let mut held_bytes = 0;
    while at < end {
        let (held, n) = match allocated(ctx.disk, at, end - at).await {
            Ok(r) => r,
            Err(e) => {
                writeln!(out, "is_allocated failed: {}", errno_text(&e))?;
                return Ok(Err(CmdFailure::Request {
                    op: "alloc",
                    path: ctx.path.to_owned(),
                    error: e,
                }));
            }
        };
        if n == 0 {
            break;
        }
        if held {
            held_bytes += n;
        }
        at += n;
    }
    let counted = end.saturating_sub(offset);
    writeln!(
        out,
        "{held_bytes}/{counted} bytes allocated at offset {}",
        cvtstr(offset as f64)
    )?;
    Ok(Ok(()))
}

/// `map`: the whole image as runs of allocated and not allocated bytes.
pub(super) async fn map(ctx: Ctx<'_>, out: &mut impl Write) -> Outcome {
    let size = ctx.disk.virtual_size();
    let mut at = 0;
    while at < size {
        let (first, mut n) = match allocated(ctx.disk, at, size - at).await {
            Ok(r) => r,
            Err(e) => return Ok(ctx.failed("map", e)),
        };
        // Runs of the same answer print as one line.
        while at + n < size {
            match allocated(ctx.disk, at + n, size - at - n).await {
                Ok((a, m)) if a == first && m > 0 => n += m,
                Ok(_) => break,
                Err(e) => return Ok(ctx.failed("map", e)),
            }
        }
        let what = if first {
            "    allocated"
        } else {
            "not allocated"
        };
        writeln!(
            out,
            "{} (0x{n:x}) bytes {what} at offset {} (0x{at:x})",
            cvtstr(n as f64),
            cvtstr(at as f64)
        )?;
        at += n;
    }
    Ok(Ok(()))
}

/// `length`: the virtual size.
pub(super) fn length(disk: &Disk, out: &mut impl Write) -> std::io::Result<()> {
    // QEMU's block layer counts a raw file in whole sectors.
    let len = match disk {
        Disk::Raw(_) => disk.virtual_size().next_multiple_of(512),
        Disk::Qcow2(_) => disk.virtual_size(),
    };
    writeln!(out, "{}", cvtstr(len as f64))
}

/// qemu-io's `info`: format, cluster size, where VM state would go, and
/// the format's own information.
pub(super) fn info(disk: &Disk, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "format name: {}", disk.format().name())?;
    let Some(image) = disk.qcow2() else {
        return Ok(());
    };
    let cluster = image.cluster_size();
    writeln!(out, "cluster size: {}", cvtstr(cluster as f64))?;
    // The engine's own offset, where `write -b` puts VM state: an L2
    // table maps half as much with extended L2 entries.
    let vm_state = image.vm_state_offset();
    writeln!(out, "vm state offset: {}", cvtstr(vm_state as f64))?;
    let h = image.header();
    let v3 = h.version >= 3;
    writeln!(out, "Format specific information:")?;
    writeln!(out, "    compat: {}", if v3 { "1.1" } else { "0.10" })?;
    writeln!(out, "    compression type: {}", h.compression().name())?;
    if v3 {
        writeln!(
            out,
            "    lazy refcounts: {}",
            h.compatible_features & compat::LAZY_REFCOUNTS != 0
        )?;
    }
    writeln!(
        out,
        "    refcount bits: {}",
        1u32 << h.refcount_order.min(6)
    )?;
    if let Some(f) = h.data_file() {
        writeln!(out, "    data file: {f}")?;
        writeln!(out, "    data file raw: {}", h.data_file_raw())?;
    }
    if v3 {
        writeln!(
            out,
            "    corrupt: {}",
            h.incompatible_features & incompat::CORRUPT != 0
        )?;
        writeln!(
            out,
            "    extended l2: {}",
            h.incompatible_features & incompat::EXTENDED_L2 != 0
        )?;
    }
    Ok(())
}
