//! The write log and the request counters: what the disk was asked to do,
//! when, and how it answered. The oracle reads the log to name the device
//! writes behind a wrong sector; benchmarks print the counters.

use std::fmt;
use std::rc::Rc;

use serde::{Deserialize, Serialize};

use engine::dev::{DevError, IoOp};

use super::faults::FaultKind;
use super::payload::Data;
use crate::exec::Nanos;

/// One request, from issue to completion.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// The request's number on this disk, in issue order from 0.
    pub id: u64,
    pub op: IoOp,
    /// Where the caller sent it (for flush: 0).
    pub offset: u64,
    /// Its length in bytes (for flush: 0; for truncate: the new length).
    pub len: u64,
    /// Force unit access (writes and write_zeroes).
    pub fua: bool,
    /// `ZeroFlags::may_unmap` (write_zeroes).
    pub may_unmap: bool,
    /// `ZeroFlags::no_fallback` (write_zeroes).
    pub no_fallback: bool,
    pub issued: Nanos,
    /// `None` while in flight, or if the run stopped (crashed) first.
    pub completed: Option<Nanos>,
    /// The request's place among every issue and completion on this disk
    /// (one counter for both): a flush makes durable exactly the writes
    /// whose `complete_seq` is below its `issue_seq`. Times can tie; these
    /// cannot.
    pub issue_seq: u64,
    /// See `issue_seq`; `None` while in flight.
    pub complete_seq: Option<u64>,
    /// `None` while in flight.
    pub result: Option<Result<(), DevError>>,
    /// The trace's hash of a write's payload (`trace::hash_bytes`).
    pub data_hash: Option<u64>,
    /// A write's payload, while the log's data budget lasts: shared with
    /// the disk's pending write where that holds all of it ([`Data`]
    /// keeps guest data compact and exact). [`LogEntry::data`] gives the
    /// bytes.
    pub(crate) payload: Option<Rc<Data>>,
    /// The fault injected into this request, if any.
    pub fault: Option<FaultKind>,
    /// For a write-like request: where its payload went, as `(offset,
    /// len)`, after faults (a short landing, a misdirection) and clipping (a
    /// discard stops at the device's end); `None` if nothing landed.
    pub landed: Option<(u64, u64)>,
}

impl LogEntry {
    /// A write's payload bytes, while the log's data budget lasted.
    pub fn data(&self) -> Option<Vec<u8>> {
        self.payload.as_ref().map(|d| {
            let mut out = vec![0; d.len() as usize];
            d.copy_out(0, &mut out);
            out
        })
    }

    /// Whether this request could change the disk's content.
    pub fn is_write(&self) -> bool {
        matches!(
            self.op,
            IoOp::Write | IoOp::WriteZeroes | IoOp::Discard | IoOp::Truncate
        )
    }

    /// Whether it covers any byte of `[offset, offset + len)`, where it was
    /// sent or where it landed (a misdirected write touches both; truncates
    /// cover everything past their new length).
    pub fn touches(&self, offset: u64, len: u64) -> bool {
        let overlaps = |s: u64, n: u64| s < offset + len && offset < s + n;
        match self.op {
            IoOp::Truncate => offset + len > self.len,
            IoOp::Flush | IoOp::Read => false,
            _ => {
                overlaps(self.offset, self.len) || self.landed.is_some_and(|(s, n)| overlaps(s, n))
            }
        }
    }
}

/// The serialisable view of a `LogEntry` (for exported reports): the same
/// fields, the result as its message, the payload left out (its hash stays).
#[derive(Serialize)]
struct LogRecord<'a> {
    id: u64,
    op: IoOp,
    offset: u64,
    len: u64,
    fua: bool,
    may_unmap: bool,
    no_fallback: bool,
    issued: Nanos,
    completed: Option<Nanos>,
    issue_seq: u64,
    complete_seq: Option<u64>,
    /// `"ok"`, the error's message, or absent while in flight.
    result: Option<String>,
    data_hash: Option<u64>,
    fault: &'a Option<FaultKind>,
    landed: Option<(u64, u64)>,
}

impl Serialize for LogEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LogRecord {
            id: self.id,
            op: self.op,
            offset: self.offset,
            len: self.len,
            fua: self.fua,
            may_unmap: self.may_unmap,
            no_fallback: self.no_fallback,
            issued: self.issued,
            completed: self.completed,
            issue_seq: self.issue_seq,
            complete_seq: self.complete_seq,
            result: self.result.as_ref().map(|r| match r {
                Ok(()) => "ok".to_string(),
                Err(e) => e.to_string(),
            }),
            data_hash: self.data_hash,
            fault: &self.fault,
            landed: self.landed,
        }
        .serialize(s)
    }
}

impl fmt::Display for LogEntry {
    /// One line for violation messages, e.g.
    /// `#12 write 4096+8192 fua, issued 1200 ns, completed 1300 ns: ok`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.id, self.op)?;
        match self.op {
            IoOp::Flush => {}
            IoOp::Truncate => write!(f, " to {}", self.len)?,
            _ => write!(f, " {}+{}", self.offset, self.len)?,
        }
        for (on, name) in [
            (self.fua, "fua"),
            (self.may_unmap, "unmap"),
            (self.no_fallback, "no_fallback"),
        ] {
            if on {
                write!(f, " {name}")?;
            }
        }
        if let Some(h) = self.data_hash {
            write!(f, " data {h:016x}")?;
        }
        write!(f, ", issued {} ns", self.issued)?;
        match (&self.completed, &self.result) {
            (Some(t), Some(Ok(()))) => write!(f, ", completed {t} ns: ok")?,
            (Some(t), Some(Err(e))) => write!(f, ", completed {t} ns: {e}")?,
            _ => write!(f, ", still in flight")?,
        }
        if let Some(fault) = &self.fault {
            write!(f, " (injected: {fault:?})")?;
        }
        Ok(())
    }
}

/// Exact request counts, as benchmarks print them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskCounters {
    pub reads: u64,
    pub read_bytes: u64,
    /// Data writes (not counting write_zeroes).
    pub writes: u64,
    pub write_bytes: u64,
    /// Data writes and write_zeroes with FUA.
    pub fua_writes: u64,
    /// write_zeroes requests, including those refused as not supported.
    pub write_zeroes: u64,
    pub write_zeroes_bytes: u64,
    /// write_zeroes refused with `NotSupported` (no_fallback on a device
    /// without efficient zeroing).
    pub write_zeroes_unsupported: u64,
    /// Bytes of zero buffers written because zeroing was not efficient.
    pub write_zeroes_fallback_bytes: u64,
    /// Writes and write_zeroes that ended past the device's end when
    /// issued, so extended it (each costs `LatencyOptions::extend`).
    pub extends: u64,
    pub discards: u64,
    pub discard_bytes: u64,
    pub flushes: u64,
    pub truncates: u64,
    /// Requests that failed with an injected fault (EIO, ENOSPC).
    pub errors: u64,
}

impl DiskCounters {
    /// What happened since `earlier` (counts of the same disk), field by
    /// field.
    pub fn since(&self, earlier: &DiskCounters) -> DiskCounters {
        let (a, b) = (earlier, self);
        DiskCounters {
            reads: b.reads - a.reads,
            read_bytes: b.read_bytes - a.read_bytes,
            writes: b.writes - a.writes,
            write_bytes: b.write_bytes - a.write_bytes,
            fua_writes: b.fua_writes - a.fua_writes,
            write_zeroes: b.write_zeroes - a.write_zeroes,
            write_zeroes_bytes: b.write_zeroes_bytes - a.write_zeroes_bytes,
            write_zeroes_unsupported: b.write_zeroes_unsupported - a.write_zeroes_unsupported,
            write_zeroes_fallback_bytes: b.write_zeroes_fallback_bytes
                - a.write_zeroes_fallback_bytes,
            extends: b.extends - a.extends,
            discards: b.discards - a.discards,
            discard_bytes: b.discard_bytes - a.discard_bytes,
            flushes: b.flushes - a.flushes,
            truncates: b.truncates - a.truncates,
            errors: b.errors - a.errors,
        }
    }

    /// The counts of two disks together (an image and its data file).
    pub fn plus(&self, other: &DiskCounters) -> DiskCounters {
        let (a, b) = (self, other);
        DiskCounters {
            reads: a.reads + b.reads,
            read_bytes: a.read_bytes + b.read_bytes,
            writes: a.writes + b.writes,
            write_bytes: a.write_bytes + b.write_bytes,
            fua_writes: a.fua_writes + b.fua_writes,
            write_zeroes: a.write_zeroes + b.write_zeroes,
            write_zeroes_bytes: a.write_zeroes_bytes + b.write_zeroes_bytes,
            write_zeroes_unsupported: a.write_zeroes_unsupported + b.write_zeroes_unsupported,
            write_zeroes_fallback_bytes: a.write_zeroes_fallback_bytes
                + b.write_zeroes_fallback_bytes,
            extends: a.extends + b.extends,
            discards: a.discards + b.discards,
            discard_bytes: a.discard_bytes + b.discard_bytes,
            flushes: a.flushes + b.flushes,
            truncates: a.truncates + b.truncates,
            errors: a.errors + b.errors,
        }
    }
}
