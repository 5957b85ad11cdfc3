//! What the server exports: the [`Export`] trait (a byte range with read,
//! write, zeroing, trim, flush and block status, each async on the
//! server's one thread), what an export says about itself
//! ([`ExportInfo`], turned into transmission flags and block sizes), and
//! the errors it answers ([`ExportError`], each with its NBD error value).
//!
//! The server knows nothing else of what it serves: the guest view of an
//! image through the engine is one export, a simulated disk or a raw
//! device would be others.

use std::future::Future;

use crate::wire::{self, Errno};

/// Largest payload of one request (a write's data, a read's reply) the
/// server accepts, and the maximum block size it advertises.
pub const MAX_PAYLOAD: u32 = 32 << 20;

/// What an export offers; fixed for the life of the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Size in bytes.
    pub size: u64,
    pub read_only: bool,
    /// Trim (discard) is worth sending.
    pub trim: bool,
    /// Write zeroes is handled (and with it NO_HOLE).
    pub write_zeroes: bool,
    /// The export can answer FAST_ZERO (failing with ENOTSUP where zeroing
    /// would be no faster than writing).
    pub fast_zero: bool,
    /// Flush and FUA make data durable.
    pub flush: bool,
    /// A flush on one connection makes every completed write of every
    /// connection durable, so a client may spread its requests.
    pub multi_conn: bool,
    /// Smallest request granularity (a power of two).
    pub min_block: u32,
    /// Preferred granularity (a power of two, at least `min_block`).
    pub preferred_block: u32,
    /// A line describing the export, for NBD_INFO_DESCRIPTION.
    pub description: String,
}

impl ExportInfo {
    /// The transmission flags advertised for this export.
    pub fn transmission_flags(&self) -> u16 {
        let mut f = wire::FLAG_HAS_FLAGS | wire::FLAG_SEND_DF;
        if self.flush {
            f |= wire::FLAG_SEND_FLUSH | wire::FLAG_SEND_FUA;
        }
        if self.multi_conn {
            f |= wire::FLAG_CAN_MULTI_CONN;
        }
        if self.read_only {
            f |= wire::FLAG_READ_ONLY;
        } else {
            if self.trim {
                f |= wire::FLAG_SEND_TRIM;
            }
            if self.write_zeroes {
                f |= wire::FLAG_SEND_WRITE_ZEROES;
                if self.fast_zero {
                    f |= wire::FLAG_SEND_FAST_ZERO;
                }
            }
        }
        f
    }

    /// Block sizes advertised: minimum, preferred, maximum.
    pub fn block_sizes(&self) -> (u32, u32, u32) {
        let min = self.min_block.max(1);
        let pref = self.preferred_block.clamp(min, MAX_PAYLOAD);
        (min, pref, MAX_PAYLOAD)
    }
}

/// How a write zeroes request is to be done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZeroRequest {
    /// NO_HOLE: the range must stay allocated (no hole punched).
    pub no_hole: bool,
    /// FAST_ZERO: fail with [`ExportError::NotSupported`] rather than
    /// zero slower than a write would.
    pub fast: bool,
    /// FUA: durable before the reply.
    pub fua: bool,
}

/// One extent of `base:allocation`: `len` bytes from the asked offset
/// that share the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub len: u64,
    /// Not allocated: reading it costs nothing (NBD_STATE_HOLE).
    pub hole: bool,
    /// Reads as zeroes (NBD_STATE_ZERO).
    pub zero: bool,
}

impl Extent {
    pub fn flags(&self) -> u32 {
        (if self.hole { wire::STATE_HOLE } else { 0 })
            | (if self.zero { wire::STATE_ZERO } else { 0 })
    }
}

/// Why an export refused or failed a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("I/O error: {0}")]
    Io(String),
    #[error("no space left: {0}")]
    NoSpace(String),
    #[error("not supported: {0}")]
    NotSupported(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("the export is read-only")]
    ReadOnly,
}

impl ExportError {
    /// The NBD error value sent for it.
    pub fn errno(&self) -> Errno {
        match self {
            ExportError::Io(_) => Errno::Io,
            ExportError::NoSpace(_) => Errno::NoSpc,
            ExportError::NotSupported(_) => Errno::NotSup,
            ExportError::Invalid(_) => Errno::Inval,
            ExportError::ReadOnly => Errno::Perm,
        }
    }
}

pub type ExportResult<T> = Result<T, ExportError>;

/// A byte range the server exports. Requests arrive already checked:
/// inside `info().size`, no longer than [`MAX_PAYLOAD`] where they carry
/// data, no writes to a read-only export. Several run at once on the one
/// executor thread (the futures need not be `Send`), in the order the
/// server starts them; their replies go out as each completes.
pub trait Export {
    fn info(&self) -> ExportInfo;
    fn read(&self, offset: u64, buf: &mut [u8]) -> impl Future<Output = ExportResult<()>>;
    /// With `fua`, the data is durable when this returns.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> impl Future<Output = ExportResult<()>>;
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        how: ZeroRequest,
    ) -> impl Future<Output = ExportResult<()>>;
    fn trim(&self, offset: u64, len: u64, fua: bool) -> impl Future<Output = ExportResult<()>>;
    /// Everything completed before is durable when this returns.
    fn flush(&self) -> impl Future<Output = ExportResult<()>>;
    /// The state of the bytes from `offset` (at most `len` of them; at
    /// least one when `len` is not 0).
    fn block_status(&self, offset: u64, len: u64) -> impl Future<Output = ExportResult<Extent>>;
}
