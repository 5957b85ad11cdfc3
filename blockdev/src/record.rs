//! A wrapper that records every request it passes on, in order, with the
//! device's length when the request was issued: tests use the record to
//! prove an ordering (data flushed before the L2 entry that points at it),
//! a count (requests per guest write) or an absence (no zeroing over data).
//!
//! Several devices may share one [`RequestLog`], each under its own name,
//! so a test sees how requests to an image and its data file interleave.

use std::cell::RefCell;
use std::rc::Rc;

use crate::{BlockDev, DevError, IoOp, WriteFlags, ZeroFlags};

/// One request as the device saw it when it was issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// The name the recording device was given.
    pub dev: &'static str,
    pub op: IoOp,
    pub offset: u64,
    /// Bytes: the buffer for reads and writes, the range for zeroing and
    /// discards, the new length for truncation, 0 for flushes.
    pub len: u64,
    /// FUA on a write or zeroing.
    pub fua: bool,
    /// `no_fallback` on a zeroing.
    pub no_fallback: bool,
    /// `may_unmap` on a zeroing.
    pub may_unmap: bool,
    /// The inner device's length when the request was issued.
    pub dev_len: u64,
}

/// A shared, append-only list of requests.
pub type RequestLog = Rc<RefCell<Vec<Request>>>;

/// `inner`, with every request appended to a log before it is passed on
/// (so a request that fails is recorded too).
#[derive(Debug)]
pub struct Recorder<D> {
    inner: D,
    name: &'static str,
    log: RequestLog,
}

impl<D: BlockDev> Recorder<D> {
    /// A recorder with a log of its own.
    pub fn new(inner: D) -> Self {
        Self::sharing(inner, "dev", RequestLog::default())
    }

    /// A recorder that appends to `log` under `name`.
    pub fn sharing(inner: D, name: &'static str, log: RequestLog) -> Self {
        Recorder { inner, name, log }
    }

    /// The log (shared: it keeps growing as requests arrive).
    pub fn log(&self) -> RequestLog {
        Rc::clone(&self.log)
    }

    /// A copy of what was recorded so far.
    pub fn requests(&self) -> Vec<Request> {
        self.log.borrow().clone()
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn into_inner(self) -> D {
        self.inner
    }

    fn note(&self, op: IoOp, offset: u64, len: u64, fua: bool, zero: ZeroFlags) {
        let dev_len = self.inner.len();
        self.log.borrow_mut().push(Request {
            dev: self.name,
            op,
            offset,
            len,
            fua,
            no_fallback: zero.no_fallback,
            may_unmap: zero.may_unmap,
            dev_len,
        });
    }
}

impl<D: BlockDev> BlockDev for Recorder<D> {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.note(
            IoOp::Read,
            offset,
            buf.len() as u64,
            false,
            ZeroFlags::default(),
        );
        self.inner.read(offset, buf).await
    }

    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        let len = buf.len() as u64;
        self.note(IoOp::Write, offset, len, flags.fua, ZeroFlags::default());
        self.inner.write(offset, buf, flags).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.note(IoOp::WriteZeroes, offset, len, flags.fua, flags);
        self.inner.write_zeroes(offset, len, flags).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        self.note(IoOp::Discard, offset, len, false, ZeroFlags::default());
        self.inner.discard(offset, len).await
    }

    async fn flush(&self) -> Result<(), DevError> {
        self.note(IoOp::Flush, 0, 0, false, ZeroFlags::default());
        self.inner.flush().await
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.note(IoOp::Truncate, len, 0, false, ZeroFlags::default());
        self.inner.truncate(len).await
    }
}
