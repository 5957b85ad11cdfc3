//! `qcsim serve --record TRACE`: an export that writes every request
//! clients send, as the server starts it, to a trace in the format of
//! `sim::iotrace` (`w|r|z|d OFFSET LENGTH [fua]`, `f`), then passes it
//! on. A request with FUA carries the trace's `fua` word (every piece of
//! one that is split); block status changes nothing and is not written;
//! requests longer than a trace line may hold are split.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use nbd::{Export, ExportInfo, ExportResult, Extent, ZeroRequest};
use sim::iotrace::{Kind, Request, MAX_LENGTH};

pub struct Recording<E> {
    inner: E,
    out: RefCell<BufWriter<File>>,
    path: PathBuf,
    /// The first error writing the trace; later requests are not written.
    failed: RefCell<Option<io::Error>>,
}

impl<E: Export> Recording<E> {
    /// Start the trace in `file` (created at `path`), with `header` as
    /// comments; on failure the export comes back with the error, to be
    /// closed.
    pub fn start(
        inner: E,
        file: File,
        path: &Path,
        header: &[String],
    ) -> Result<Recording<E>, (E, io::Error)> {
        let mut out = BufWriter::new(file);
        let started =
            sim::iotrace::format::write(&mut out, header, std::iter::empty()).map(|()| out);
        let out = match started {
            Ok(out) => out,
            Err(e) => return Err((inner, e)),
        };
        Ok(Recording {
            inner,
            out: RefCell::new(out),
            path: path.to_owned(),
            failed: RefCell::new(None),
        })
    }

    /// The export, and the trace written out whole (or its first error).
    pub fn finish(self) -> (E, Result<(), (PathBuf, io::Error)>) {
        let flushed = self.out.into_inner().flush();
        let result = match self.failed.into_inner() {
            Some(e) => Err(e),
            None => flushed,
        };
        (self.inner, result.map_err(|e| (self.path, e)))
    }

    fn note(&self, kind: Kind, offset: u64, len: u64, fua: bool) {
        if self.failed.borrow().is_some() {
            return;
        }
        let mut out = self.out.borrow_mut();
        let mut result = Ok(());
        let mut at = offset;
        while kind != Kind::Flush && result.is_ok() && at < offset + len {
            let n = (offset + len - at).min(MAX_LENGTH);
            // A request the trace format cannot hold (past its end
            // offset) is left out rather than written unreadable.
            if let Ok(r) = Request::new(kind, at, n) {
                // A read never has FUA (NBD allows the flag on one, where
                // it means nothing); with_fua leaves a read as it is.
                result = writeln!(out, "{}", r.with_fua(fua));
            }
            at += n;
        }
        if result.is_ok() && kind == Kind::Flush {
            result = writeln!(out, "{}", Request::Flush);
        }
        if let Err(e) = result {
            *self.failed.borrow_mut() = Some(e);
        }
    }
}

impl<E: Export> Export for Recording<E> {
    fn info(&self) -> ExportInfo {
        self.inner.info()
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.note(Kind::Read, offset, buf.len() as u64, false);
        self.inner.read(offset, buf).await
    }

    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.note(Kind::Write, offset, data.len() as u64, fua);
        self.inner.write(offset, data, fua).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, how: ZeroRequest) -> ExportResult<()> {
        self.note(Kind::WriteZeroes, offset, len, how.fua);
        self.inner.write_zeroes(offset, len, how).await
    }

    async fn trim(&self, offset: u64, len: u64, fua: bool) -> ExportResult<()> {
        self.note(Kind::Discard, offset, len, fua);
        self.inner.trim(offset, len, fua).await
    }

    async fn flush(&self) -> ExportResult<()> {
        self.note(Kind::Flush, 0, 0, false);
        // The trace is on disk at least as far as the data it describes.
        if let Err(e) = self.out.borrow_mut().flush() {
            self.failed.borrow_mut().get_or_insert(e);
        }
        self.inner.flush().await
    }

    async fn block_status(&self, offset: u64, len: u64) -> ExportResult<Extent> {
        self.inner.block_status(offset, len).await
    }
}
