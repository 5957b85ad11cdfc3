//! What carrying out any command shares: the open image as a command sees
//! it (`Ctx`), why a command failed ([`CmdFailure`]), the report lines
//! after a request (`Ctx::report`), the whole-request range check and the
//! pieces a request is cut into so that memory stays bounded. Below the
//! command families (`request`, `query`) and the session.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::files::Disk;

use super::cmd::Report;
use super::format::{cvtstr, errno_text, per_second, timestr};

/// Requests are carried out in pieces of at most this many bytes, so that
/// memory stays bounded whatever length a command names.
pub(super) const PIECE: u64 = 16 << 20;

/// `len` bytes at `offset` in [`PIECE`]s, as `(offset, len)`.
pub(super) fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(PIECE)).map(move |i| {
        let at = i * PIECE;
        (offset + at, (len - at).min(PIECE))
    })
}

/// Why a command failed. Its text is the line the command printed last
/// (qemu-io's).
#[derive(Debug, thiserror::Error)]
pub enum CmdFailure {
    /// The request was refused or failed: `op` is the command ("read",
    /// "write", "discard", "flush"), `path` the image. qemu-io names the
    /// error by its errno only, which is what the message says; `error`
    /// holds the engine's account.
    #[error("{op} failed: {}", errno_text(error))]
    Request {
        op: &'static str,
        path: PathBuf,
        error: engine::Error,
    },
    /// A write to an image opened read-only (qemu-io says so on standard
    /// error, with its prefix).
    #[error("Block node is read-only")]
    ReadOnly { path: PathBuf },
    /// `truncate` refused or failed: the message is qemu-io's, which it
    /// prints on standard error with its prefix.
    #[error("{message}")]
    Truncate { path: PathBuf, message: String },
    /// `read -P`: some byte of the range is not the pattern.
    #[error("Pattern verification failed at offset {offset}, {len} bytes")]
    PatternMismatch {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
}

/// A command's result: the outer error is the output's (the command
/// stops writing), the inner the command's own failure.
pub(super) type Outcome = std::io::Result<Result<(), CmdFailure>>;

/// The open image as a command sees it: what it reads and writes, the
/// name its failures carry, and the session's settings.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub(super) disk: &'a Disk,
    pub(super) path: &'a Path,
    /// Print qemu-io's timing line after each request.
    pub(super) timing: bool,
    /// QEMU's `detect-zeroes`: a write whose data is all zeroes is made a
    /// write_zeroes, unmapping when `Some(true)`.
    pub(super) detect_zeroes: Option<bool>,
    /// A zeroing is cut at multiples of this, and a piece shorter than it
    /// is written as zeroes (`Session::with_zero_alignment`).
    pub(super) zero_alignment: Option<u64>,
}

impl Ctx<'_> {
    /// The failure of request `op`: a write to a read-only image is its
    /// own failure, as qemu-io words it apart.
    pub(super) fn failed(&self, op: &'static str, error: engine::Error) -> Result<(), CmdFailure> {
        if matches!(error, engine::Error::ReadOnly) {
            return Err(CmdFailure::ReadOnly {
                path: self.path.to_owned(),
            });
        }
        Err(CmdFailure::Request {
            op,
            path: self.path.to_owned(),
            error,
        })
    }

    /// The whole request against the disk, before it is cut into pieces:
    /// an error names the request as given (a piece past the end would
    /// name only itself), and a write that does not fit writes nothing
    /// rather than its first pieces.
    pub(super) fn in_range(&self, offset: u64, len: u64) -> engine::Result<()> {
        let size = self.disk.virtual_size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(engine::Error::OutOfRange { offset, len, size }),
        }
    }

    /// The two report lines (or the `-C` line) of a request.
    pub(super) fn report(
        &self,
        out: &mut impl Write,
        verb: &str,
        offset: u64,
        total: u64,
        t: Duration,
        report: Report,
    ) -> std::io::Result<()> {
        if report.quiet {
            return Ok(());
        }
        if report.csv && self.timing {
            return writeln!(
                out,
                "{total},1,{},{:.3},{:.3}",
                timestr(t, true),
                per_second(total as f64, t),
                per_second(1.0, t)
            );
        }
        writeln!(out, "{verb} {total}/{total} bytes at offset {offset}")?;
        if self.timing {
            writeln!(
                out,
                "{}, 1 ops; {} ({}/sec and {:.4} ops/sec)",
                cvtstr(total as f64),
                timestr(t, false),
                cvtstr(per_second(total as f64, t)),
                per_second(1.0, t)
            )?;
        }
        Ok(())
    }
}
