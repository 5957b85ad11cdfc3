//! Fault injection, decided at the edge: when a request is issued, this
//! module says whether it fails, lands short, lands elsewhere or is lost,
//! and records what it injected. The disk's stores only ever see what the
//! decision lets through, so turning faults off (one switch) leaves a
//! perfect disk, and the report lists every fault a run met.
//!
//! Each kind of request draws from its own stream, so that changing the read
//! error rate does not move the write faults.

use std::fmt;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use engine::dev::IoOp;

use super::options::{FaultOptions, PPM};
use crate::exec::Nanos;
use crate::rng::{self, Stream};

/// What was done to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FaultKind {
    /// Failed with EIO; for a write, the first `landed` bytes reached the
    /// disk anyway.
    Io { landed: u64 },
    /// Failed with ENOSPC: it would have ended past the capacity.
    NoSpace,
    /// Reported success but never reached the disk (harsher mode).
    Lost,
    /// Reported success but landed at `to` instead (harsher mode).
    Misdirected { to: u64 },
}

engine::counter_set! {
    /// Injected faults counted by kind: what a campaign's fault coverage
    /// is made of. EIO is split by the request kind it met.
    pub struct FaultCounts {
        eio_read,
        eio_write,
        eio_write_zeroes,
        eio_discard,
        eio_flush,
        eio_truncate,
        enospc,
        lost,
        misdirected,
    }
}

impl FaultCounts {
    /// Count one injected fault.
    pub fn count(&mut self, f: &InjectedFault) {
        *match f.kind {
            FaultKind::Io { .. } => match f.op {
                IoOp::Read => &mut self.eio_read,
                IoOp::Write => &mut self.eio_write,
                IoOp::WriteZeroes => &mut self.eio_write_zeroes,
                IoOp::Discard => &mut self.eio_discard,
                IoOp::Flush => &mut self.eio_flush,
                IoOp::Truncate => &mut self.eio_truncate,
            },
            FaultKind::NoSpace => &mut self.enospc,
            FaultKind::Lost => &mut self.lost,
            FaultKind::Misdirected { .. } => &mut self.misdirected,
        } += 1;
    }

    /// How many kinds were met at least once.
    pub fn kinds(&self) -> u64 {
        self.named().iter().filter(|(_, n)| *n > 0).count() as u64
    }
}

/// One injected fault, for the fault report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InjectedFault {
    /// The request's number on its disk.
    pub request: u64,
    /// Its rank among the disk's requests of its kind, counting from 1
    /// (`NthRequest::n`: what fails the same request again).
    #[serde(default)]
    pub rank: u64,
    pub op: IoOp,
    pub offset: u64,
    pub len: u64,
    pub at: Nanos,
    pub kind: FaultKind,
}

impl fmt::Display for InjectedFault {
    /// One line for fault reports, e.g.
    /// `#12 write 4096+512 at 1200 ns: EIO, 0 bytes landed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} {}+{} at {} ns: ",
            self.request, self.op, self.offset, self.len, self.at
        )?;
        match self.kind {
            FaultKind::Io { landed } if self.op == IoOp::Write || self.op == IoOp::WriteZeroes => {
                write!(f, "EIO, {landed} bytes landed")
            }
            FaultKind::Io { .. } => write!(f, "EIO"),
            FaultKind::NoSpace => write!(f, "ENOSPC"),
            FaultKind::Lost => write!(f, "lost (reported success)"),
            FaultKind::Misdirected { to } => write!(f, "misdirected to {to} (reported success)"),
        }
    }
}

const OPS: usize = IoOp::COUNT;

/// The fault state of one disk: the per-kind streams and request counts.
#[derive(Debug)]
pub(crate) struct FaultState {
    streams: Vec<ChaCha8Rng>,
    counts: [u64; OPS],
    /// The disk's index on its simulation: what a rank fault scoped to one
    /// disk (`NthRequest::device`) names.
    device: u32,
}

impl FaultState {
    /// `device` is the disk's index on its simulation (see
    /// `Sim::next_device_index`).
    pub(crate) fn new(seed: u64, device: u32) -> Self {
        let streams = (0..OPS as u32)
            .map(|op| rng::substream(seed, Stream::Faults, (device << 4) | op))
            .collect();
        Self {
            streams,
            counts: [0; OPS],
            device,
        }
    }

    /// The rank of the last request of kind `op` decided (its `n` in
    /// `FaultOptions::error_at`).
    pub(crate) fn rank(&self, op: IoOp) -> u64 {
        self.counts[op.index()]
    }

    /// Decide the fate of a request (called once per request, at issue).
    /// `sector_size` is the grain of a failed write's landed prefix.
    pub(crate) fn decide(
        &mut self,
        opts: &FaultOptions,
        enabled: bool,
        op: IoOp,
        offset: u64,
        len: u64,
        sector_size: u64,
    ) -> Option<FaultKind> {
        let i = op.index();
        self.counts[i] += 1;
        let n = self.counts[i];
        if !enabled {
            return None;
        }
        let is_write = matches!(op, IoOp::Write | IoOp::WriteZeroes);
        if let Some(cap) = opts.capacity {
            let grows = is_write || op == IoOp::Truncate;
            let end = if op == IoOp::Truncate {
                len
            } else {
                offset + len
            };
            if grows && end > cap {
                return Some(FaultKind::NoSpace);
            }
        }
        let r = &mut self.streams[i];
        let by_rank = opts
            .error_at
            .iter()
            .any(|f| f.op == op && f.n == n && f.device.is_none_or(|d| d == self.device));
        let rate = match op {
            IoOp::Read => opts.read_error_ppm,
            IoOp::Write | IoOp::WriteZeroes | IoOp::Discard => opts.write_error_ppm,
            IoOp::Flush => opts.flush_error_ppm,
            IoOp::Truncate => 0,
        };
        if by_rank || hit(r, rate) {
            let landed = if is_write || op == IoOp::Discard {
                let sectors = len.div_ceil(sector_size);
                (r.gen_range(0..=sectors) * sector_size).min(len)
            } else {
                0
            };
            return Some(FaultKind::Io { landed });
        }
        if is_write {
            if hit(r, opts.lost_write_ppm) {
                return Some(FaultKind::Lost);
            }
            if hit(r, opts.misdirected_write_ppm) {
                let d = u64::from(r.gen_range(1..=opts.misdirect_sectors_max)) * sector_size;
                let to = if r.gen_bool(0.5) && offset >= d {
                    offset - d
                } else {
                    offset + d
                };
                return Some(FaultKind::Misdirected { to });
            }
        }
        None
    }
}

/// Draw a chance of `ppm` in a million; draws nothing when the rate is 0, so
/// a kind of fault that is off does not consume its stream.
fn hit(r: &mut ChaCha8Rng, ppm: u32) -> bool {
    ppm > 0 && r.gen_range(0..PPM) < ppm
}
