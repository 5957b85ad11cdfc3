//! The qemu-io commands that are I/O requests on the image: `read` (with
//! `-P`'s check and `-v`'s dump), `write` (patterns, compressed, zeroes,
//! VM state, force unit access; `detect-zeroes` and a zeroing alignment
//! as QEMU's block layer applies them), `discard` and `flush`, each a
//! piece at a time (`exec::pieces`) and followed by qemu-io's report
//! lines.

use std::io::Write;
use std::time::Instant;

use crate::files::Disk;

use super::cmd::{ReadCmd, Report, WriteCmd, WriteData};
use super::exec::{pieces, CmdFailure, Ctx, Outcome, PIECE};
use super::format::hexdump;

/// Where a filled write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Guest data; with force unit access (`write -f`) each piece durable
    /// when it completes.
    Data {
        fua: bool,
    },
    Compressed,
    VmState,
}

/// Write `len` bytes of `byte` at `offset`, in [`PIECE`]s (so that memory
/// stays bounded), stopping at the first error. Pieces are whole clusters
/// of any cluster size (at most 2 MiB), so a compressed write stays
/// aligned.
async fn write_filled(
    disk: &Disk,
    offset: u64,
    len: u64,
    byte: u8,
    to: Fill,
) -> engine::Result<()> {
    let buf = vec![byte; len.min(PIECE) as usize];
    for (at, n) in pieces(offset, len) {
        let piece = &buf[..n as usize];
        match to {
            Fill::Data { fua } => disk.write_flagged(at, piece, fua).await?,
            Fill::Compressed => disk.write_compressed(at, piece).await?,
            Fill::VmState => disk.write_vmstate(at, piece).await?,
        }
    }
    Ok(())
}

/// Zero `len` bytes at `offset` on `disk`, each request with force unit
/// access when `fua`; with `align`, as `Session::with_zero_alignment`
/// says: the pieces before the first and after the last multiple of it
/// are written as zeroes.
async fn zero_aligned(
    disk: &Disk,
    offset: u64,
    len: u64,
    unmap: bool,
    fua: bool,
    align: Option<u64>,
) -> engine::Result<()> {
    let Some(a) = align else {
        return disk.zeroes_flagged(offset, len, unmap, fua).await;
    };
    let end = offset + len;
    let bulk_start = offset.next_multiple_of(a).min(end);
    let bulk_end = (end / a * a).max(bulk_start);
    write_filled(disk, offset, bulk_start - offset, 0, Fill::Data { fua }).await?;
    if bulk_end > bulk_start {
        disk.zeroes_flagged(bulk_start, bulk_end - bulk_start, unmap, fua)
            .await?;
    }
    write_filled(disk, bulk_end, end - bulk_end, 0, Fill::Data { fua }).await
}

/// `read`, `readv`, `aio_read`.
pub(super) async fn read(ctx: Ctx<'_>, cmd: &ReadCmd, out: &mut impl Write) -> Outcome {
    let start = Instant::now();
    let offset = cmd.offset;
    let len: u64 = cmd.lens.iter().sum();
    // The range -P checks, in guest offsets.
    let check = cmd.pattern.map(|p| {
        let from = offset + p.offset;
        let to = p.len.map_or(offset + len, |l| from + l);
        (p.byte, from, to)
    });
    let mut mismatch = false;
    let mut buf = Vec::new();
    // The hex dump follows the mismatch line, as in qemu-io, so a verbose
    // read keeps its data; only a dump of at most one piece is held back
    // (larger ones stream).
    let mut held: Option<Vec<u8>> = None;
    for (at, n) in pieces(offset, len) {
        buf.resize(n as usize, 0);
        let r = if cmd.vmstate {
            ctx.disk.read_vmstate(at, &mut buf).await
        } else {
            ctx.disk.read(at, &mut buf).await
        };
        if let Err(e) = r {
            return Ok(ctx.failed(cmd.op, e));
        }
        if let Some((byte, from, to)) = check {
            let lo = from.max(at);
            let hi = to.min(at + n);
            if lo < hi {
                let s = &buf[(lo - at) as usize..(hi - at) as usize];
                mismatch |= s.iter().any(|&b| b != byte);
            }
        }
        if cmd.verbose && !cmd.report.quiet {
            if len <= PIECE {
                held = Some(buf.clone());
            } else {
                hexdump(out, at, &buf)?;
            }
        }
    }
    let t = start.elapsed();
    let result = if let (true, Some((_, from, to))) = (mismatch, check) {
        let failure = CmdFailure::PatternMismatch {
            path: ctx.path.to_owned(),
            offset: from,
            len: to - from,
        };
        writeln!(out, "{failure}")?;
        Err(failure)
    } else {
        Ok(())
    };
    if let Some(data) = held {
        hexdump(out, offset, &data)?;
    }
    ctx.report(out, "read", offset, len, t, cmd.report)?;
    Ok(result)
}

/// `write`, `writev`, `aio_write`. With `-f` every request goes out with
/// force unit access (the engine's FUA calls for qcow2), as qemu-io
/// passes BDRV_REQ_FUA down; the parser has already refused `-f` with
/// `-c` or `-b`, as qemu-io does.
pub(super) async fn write(ctx: Ctx<'_>, cmd: &WriteCmd, out: &mut impl Write) -> Outcome {
    let start = Instant::now();
    let (disk, offset, align, fua) = (ctx.disk, cmd.offset, ctx.zero_alignment, cmd.fua);
    let len: u64 = cmd.lens.iter().sum();
    let result = match (cmd.data, ctx.detect_zeroes) {
        // qemu-io saves VM state as it is given, whatever -c or
        // detect-zeroes say.
        (WriteData::Pattern(p) | WriteData::Compressed(p), _) if cmd.vmstate => {
            write_filled(disk, offset, len, p, Fill::VmState).await
        }
        (WriteData::Zeroes { unmap }, _) => {
            zero_aligned(disk, offset, len, unmap, fua, align).await
        }
        // detect-zeroes turns a write of zeroes into zeroing, compressed
        // or not, as QEMU's block layer does.
        (WriteData::Pattern(0) | WriteData::Compressed(0), Some(unmap)) => {
            zero_aligned(disk, offset, len, unmap, fua, align).await
        }
        (WriteData::Pattern(p), _) => write_filled(disk, offset, len, p, Fill::Data { fua }).await,
        (WriteData::Compressed(p), _) => write_filled(disk, offset, len, p, Fill::Compressed).await,
    };
    if let Err(e) = result {
        return Ok(ctx.failed(cmd.op, e));
    }
    ctx.report(out, "wrote", offset, len, start.elapsed(), cmd.report)?;
    Ok(Ok(()))
}

/// `discard off len`.
pub(super) async fn discard(
    ctx: Ctx<'_>,
    offset: u64,
    len: u64,
    report: Report,
    out: &mut impl Write,
) -> Outcome {
    let start = Instant::now();
    if let Err(e) = ctx.disk.discard(offset, len).await {
        return Ok(ctx.failed("discard", e));
    }
    ctx.report(out, "discard", offset, len, start.elapsed(), report)?;
    Ok(Ok(()))
}

/// `flush` and `aio_flush`.
pub(super) async fn flush(ctx: Ctx<'_>) -> Outcome {
    match ctx.disk.flush().await {
        Err(e) => Ok(ctx.failed("flush", e)),
        Ok(()) => Ok(Ok(())),
    }
}
