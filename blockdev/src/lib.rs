//! The block-device interface qcsim's qcow2 engine runs on, the devices and
//! device wrappers every layer shares: the in-memory device, a counting
//! wrapper, a recording wrapper, a fault-injecting wrapper and a seeded
//! yielding wrapper.
//!
//! A `BlockDev` behaves like a file opened for direct block I/O: writes past
//! the end extend it, reads past the end return zeroes, and a completed write
//! is only durable after a flush that was issued after it completed (or when
//! it was written with FUA). Every method takes `&self` because many requests
//! are in flight at once; implementations use interior mutability.
//!
//! This crate sits below the engine and the simulation alike, so the engine's
//! own tests and the simulated disk use one set of devices instead of each
//! hand-rolling its own: the simulated disk (crate `sim`) adds what needs its
//! executor (latencies, crashes, seeded faults); the wrappers here are for
//! tests that need one exact fault or one exact record.

mod counting;
mod faulty;
mod mem;
mod record;
mod yielding;

pub use counting::{CountingDev, DevCounts};
pub use faulty::{Faulty, Injected};
pub use mem::MemDev;
pub use record::{Recorder, Request, RequestLog};
pub use yielding::{YieldDev, YieldN};

use std::fmt;

/// What kind of request met an error, for messages and fault injection.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum IoOp {
    Read,
    Write,
    WriteZeroes,
    Discard,
    Flush,
    Truncate,
}

impl IoOp {
    /// How many kinds there are: the length of a per-kind table.
    pub const COUNT: usize = 6;

    /// This kind's place in a per-kind table, `0..COUNT`.
    pub const fn index(self) -> usize {
        match self {
            IoOp::Read => 0,
            IoOp::Write => 1,
            IoOp::WriteZeroes => 2,
            IoOp::Discard => 3,
            IoOp::Flush => 4,
            IoOp::Truncate => 5,
        }
    }

    /// The kind's name, as it is displayed: without a `String` for the
    /// simulated disk, which hashes it into the trace for every request.
    pub const fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::WriteZeroes => "write_zeroes",
            IoOp::Discard => "discard",
            IoOp::Flush => "flush",
            IoOp::Truncate => "truncate",
        }
    }
}

impl fmt::Display for IoOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An error a device returns. `NotSupported` is not a failure of the device:
/// it is how `write_zeroes` with `no_fallback` says "I cannot do this
/// efficiently", and the caller is expected to fall back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DevError {
    #[error("{op} at offset {offset} (+{len}): I/O error (EIO)")]
    Io { op: IoOp, offset: u64, len: u64 },
    #[error("{op} at offset {offset} (+{len}): no space left on device (ENOSPC)")]
    NoSpace { op: IoOp, offset: u64, len: u64 },
    #[error("{op}: not supported by this device")]
    NotSupported { op: IoOp },
    #[error("{op} at offset {offset}: {message}")]
    Os {
        op: IoOp,
        offset: u64,
        /// The operating system's error number, when there is one.
        errno: Option<i32>,
        message: String,
    },
}

impl DevError {
    pub fn is_not_supported(&self) -> bool {
        matches!(self, DevError::NotSupported { .. })
    }
}

/// Flags of a data write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteFlags {
    /// Force unit access: the write is durable when it completes.
    pub fua: bool,
}

/// Flags of a `write_zeroes` request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ZeroFlags {
    /// The device may deallocate the range (punch a hole) if reads of it
    /// still return zeroes afterwards.
    pub may_unmap: bool,
    /// Answer `NotSupported` rather than writing zero buffers: the caller
    /// only wants the zeroing if it is cheap (seed 001's BDRV_REQ_NO_FALLBACK).
    pub no_fallback: bool,
    /// Force unit access, as for writes.
    pub fua: bool,
}

/// The asynchronous block device the engine is generic over.
///
/// Futures need not be `Send`: the engine runs single-threaded with
/// cooperative concurrency, as QEMU's coroutines do.
#[allow(async_fn_in_trait)]
pub trait BlockDev {
    /// Fill `buf` from `offset`. Bytes past the end of the device read as zero.
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError>;
    /// Write `buf` at `offset`, extending the device if it ends past its end.
    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError>;
    /// Make `len` bytes at `offset` read as zero, extending the device if the
    /// range ends past its end. With `flags.no_fallback` the device answers
    /// `DevError::NotSupported` instead of writing zero buffers.
    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError>;
    /// A hint that the range is no longer needed. Afterwards the range reads
    /// as either its old content or zeroes; callers must not rely on either.
    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError>;
    /// Make every write that completed before this call durable.
    async fn flush(&self) -> Result<(), DevError>;
    /// The current length in bytes, counting writes that were issued.
    fn len(&self) -> u64;
    /// Whether the device is empty (length 0).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Set the length; bytes past a shrunk end are gone, an extension reads
    /// as zeroes.
    async fn truncate(&self, len: u64) -> Result<(), DevError>;
}
