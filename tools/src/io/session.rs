//! The [`Session`]: one open of an image (and its locks) on which
//! commands run in turn, its settings (timing, `detect-zeroes`, zeroing
//! alignment), the dispatch of each command to its family (`request`,
//! `query`), and the commands that change the open image itself:
//! `truncate` and the clean close.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::files::{open_image, Disk, OpenError, OpenOptions};

use super::cmd::Cmd;
use super::exec::{CmdFailure, Ctx, Outcome};
use super::{query, request};

/// Why a session could not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The clean close (flush, clear the dirty bit) failed.
    #[error("closing {path}")]
    Close {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
}

/// One command's output, as lines without their ends, and its failure.
#[derive(Debug)]
pub struct Executed {
    /// Everything the command printed, its failure line included.
    pub lines: Vec<String>,
    pub failure: Option<CmdFailure>,
}

/// One open image (and its backing chain) on which commands run in turn.
pub struct Session {
    disk: Disk,
    path: PathBuf,
    timing: bool,
    /// QEMU's `detect-zeroes`: a write whose data is all zeroes is made a
    /// write_zeroes, unmapping when `Some(true)`.
    detect_zeroes: Option<bool>,
    /// A zeroing is cut at multiples of this, and a piece shorter than it
    /// is written as zeroes (`with_zero_alignment`).
    zero_alignment: Option<u64>,
}

impl Session {
    /// Open the image at `path` as `opts` says; the error names the file at
    /// fault (the image or a file of its chain).
    pub async fn open(path: &Path, opts: &OpenOptions) -> Result<Session, OpenError> {
        let disk = open_image(path, opts).await?;
        Ok(Session {
            disk,
            path: path.to_owned(),
            timing: false,
            detect_zeroes: None,
            zero_alignment: None,
        })
    }

    /// Zero as QEMU's block layer does over a node whose preferred zeroing
    /// alignment is `align` that refuses shorter requests (blkdebug with
    /// `opt-write-zero`): the head and tail of a zeroing, up to and from
    /// its multiples, are written as zeroes; the whole units between are
    /// zeroed.
    pub fn with_zero_alignment(mut self, align: Option<u64>) -> Session {
        self.zero_alignment = align.filter(|&a| a > 0);
        self
    }

    /// Writes of zeroes become write_zeroes (`Some(unmap)`), as QEMU's
    /// `detect-zeroes=on` (`Some(false)`) or `unmap` with `discard=unmap`
    /// (`Some(true)`) make them.
    pub fn with_detect_zeroes(mut self, detect: Option<bool>) -> Session {
        self.detect_zeroes = detect;
        self
    }

    /// Print qemu-io's size, count and timing line after each request (as
    /// qemu-io does; its times make the output differ run to run).
    pub fn with_timing(mut self, timing: bool) -> Session {
        self.timing = timing;
        self
    }

    /// The opened image.
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// Run `cmd`, collecting what it prints. For commands whose output is
    /// small: a `read -v` of a large range is better streamed with
    /// [`Session::execute_to`].
    pub async fn execute(&self, cmd: &Cmd) -> Executed {
        let mut out = Vec::new();
        let result = self
            .execute_to(cmd, &mut out)
            .await
            .expect("writing to memory cannot fail");
        let text = String::from_utf8(out).expect("command output is ASCII");
        Executed {
            lines: text.lines().map(str::to_owned).collect(),
            failure: result.err(),
        }
    }

    /// Run `cmd`, writing its output to `out` as it goes (a hex dump a
    /// piece at a time, so memory stays bounded whatever length the
    /// command names). The outer error is `out`'s; the inner says whether
    /// the command failed, after its failure line was written (but for
    /// [`CmdFailure::ReadOnly`], whose line is the caller's to put on
    /// standard error). `Open`, `Close`, `Quit`, `Abort` and `Sigraise` do
    /// nothing: they are the caller's.
    pub async fn execute_to(
        &self,
        cmd: &Cmd,
        out: &mut impl Write,
    ) -> std::io::Result<Result<(), CmdFailure>> {
        let result = self.run(cmd, out).await?;
        if let Err(failure @ CmdFailure::Request { .. }) = &result {
            writeln!(out, "{failure}")?;
        }
        Ok(result)
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            disk: &self.disk,
            path: &self.path,
            timing: self.timing,
            detect_zeroes: self.detect_zeroes,
            zero_alignment: self.zero_alignment,
        }
    }

    /// The command, its output written but for a request failure's line.
    async fn run(&self, cmd: &Cmd, out: &mut impl Write) -> Outcome {
        let ctx = self.ctx();
        let range = match cmd {
            // The VM state area lies past the disk: its bounds are the
            // engine's.
            Cmd::Read(r) if !r.vmstate => Some((r.op, r.offset, r.lens.iter().sum())),
            Cmd::Write(w) if !w.vmstate => Some((w.op, w.offset, w.lens.iter().sum())),
            Cmd::Discard { offset, len, .. } => Some(("discard", *offset, *len)),
            _ => None,
        };
        if let Some((op, offset, len)) = range {
            if let Err(e) = ctx.in_range(offset, len) {
                return Ok(ctx.failed(op, e));
            }
        }
        match cmd {
            Cmd::Read(r) => request::read(ctx, r, out).await,
            Cmd::Write(w) => request::write(ctx, w, out).await,
            Cmd::Discard {
                offset,
                len,
                report,
            } => request::discard(ctx, *offset, *len, *report, out).await,
            Cmd::Flush | Cmd::AioFlush => request::flush(ctx).await,
            Cmd::Alloc { offset, count } => query::alloc(ctx, *offset, *count, out).await,
            Cmd::Map => query::map(ctx, out).await,
            Cmd::Length => query::length(&self.disk, out).map(Ok),
            Cmd::Info => query::info(&self.disk, out).map(Ok),
            Cmd::Open { .. }
            | Cmd::Close
            | Cmd::Reopen { .. }
            | Cmd::Truncate { .. }
            | Cmd::Abort
            | Cmd::Sigraise(_)
            | Cmd::Quit => Ok(Ok(())),
        }
    }

    /// `truncate`: set the virtual size to `size`, growing or shrinking
    /// (a shrink drops the data past the new end, as qemu-io's truncate
    /// does). Returns whether a qcow2 image shrank: its file then keeps
    /// the clusters freed at its end until the caller trims it with the
    /// image closed (`resize::trim_after_shrink`), as QEMU's driver cuts
    /// its file after a shrink.
    pub async fn truncate(
        &mut self,
        size: u64,
        prealloc: Option<&str>,
    ) -> Result<bool, CmdFailure> {
        let fail = |message: String| CmdFailure::Truncate {
            path: self.path.clone(),
            message,
        };
        if self.disk.device().is_read_only() {
            return Err(CmdFailure::ReadOnly {
                path: self.path.clone(),
            });
        }
        let current = self.disk.virtual_size();
        match prealloc.unwrap_or("off") {
            "off" => {}
            "metadata" | "falloc" | "full" if size < current => {
                return Err(fail(
                    "Preallocation can't be used for shrinking an image".into(),
                ))
            }
            m @ ("metadata" | "falloc" | "full") => {
                return Err(fail(format!(
                    "truncate with preallocation mode '{m}' is not supported by qcsim"
                )))
            }
            m => return Err(fail(format!("Invalid preallocation mode '{m}'"))),
        }
        match &mut self.disk {
            Disk::Raw(d) => {
                engine::dev::BlockDev::truncate(d, size)
                    .await
                    .map_err(|e| fail(format!("Failed to resize the file: {e}")))?;
                Ok(false)
            }
            Disk::Qcow2(img) => {
                if !size.is_multiple_of(512) {
                    return Err(fail("The new size must be a multiple of 512".into()));
                }
                img.resize(size).await.map_err(|e| fail(e.to_string()))?;
                Ok(size < current)
            }
        }
    }

    /// End the session with a clean close (for qcow2: flush and clear the
    /// dirty bit; for a writable raw file: flush).
    pub async fn close(self) -> Result<(), SessionError> {
        self.disk
            .close()
            .await
            .map_err(|error| SessionError::Close {
                path: self.path,
                error,
            })
    }
}
