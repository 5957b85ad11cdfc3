//! The payload of a pending data write, kept compact and exact.
//!
//! A crash may keep, for every sector, the value of any one of the pending
//! writes over it, so the disk must keep every pending write's bytes until
//! a flush makes it durable, even where later writes cover it: a workload
//! that rewrites the same megabyte 4096 times without a flush keeps 4096
//! megabytes in doubt. Almost all of those bytes are guest data, which
//! names itself ([`oracle::data`]): a 512-byte block of it is a pure
//! function of (write id, guest sector), or of the guest sector for
//! backing data. So a payload is kept as runs of such blocks (a few words
//! each), runs of zero blocks, and raw bytes for everything else (metadata,
//! partial blocks). Every block is decoded in full before it is kept as a
//! run ([`decode`] regenerates it and compares every byte), so the bytes
//! read back are exactly the bytes written, whatever they were: a torn or
//! corrupt block of guest data is simply kept raw. Crash states, flushes
//! and the write log see the same bytes as before; only the memory differs.
//!
//! Blocks are counted from the start of the payload, not of the device, so
//! a write that starts off a 512-byte boundary of the guest's sectors keeps
//! its bytes raw (correct, only larger); the engine writes guest data at
//! sector-aligned offsets of its buffers.

use oracle::data::{decode, fill_backing, fill_written, Content, WriteId, SECTOR_SIZE};

/// The grain of recognised blocks: one guest sector.
const BLOCK: u64 = SECTOR_SIZE as u64;

/// What a run of a payload holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Guest data of write `id`: the run's k-th block is that write's data
    /// for guest sector `sector + k`.
    Written { id: u64, sector: u64 },
    /// Backing-file data: the run's k-th block is the backing data of guest
    /// sector `sector + k`.
    Backing { sector: u64 },
    /// Zero bytes.
    Zero,
    /// These bytes, as they are.
    Raw(Vec<u8>),
}

/// One run: `len` bytes from payload offset `start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    start: u64,
    len: u64,
    /// What its bytes are.
    pub kind: Kind,
}

/// A data write's payload (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    len: u64,
    /// Consecutive, covering `[0, len)`, no two neighbours mergeable.
    pub runs: Vec<Run>,
}

impl Data {
    /// The compact form of `bytes`.
    pub fn new(bytes: &[u8]) -> Data {
        let mut runs: Vec<Run> = Vec::new();
        let mut chunks = bytes.chunks_exact(SECTOR_SIZE);
        let mut pos = 0u64;
        for block in &mut chunks {
            let kind = match decode(block) {
                Content::Zero => Kind::Zero,
                Content::Written { id, sector } => Kind::Written { id: id.0, sector },
                Content::Backing { sector } => Kind::Backing { sector },
                Content::Garbage(_) => Kind::Raw(block.to_vec()),
            };
            push(&mut runs, pos, BLOCK, kind);
            pos += BLOCK;
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            push(&mut runs, pos, tail.len() as u64, Kind::Raw(tail.to_vec()));
        }
        // Kept until a flush, possibly by the million: no spare capacity.
        runs.shrink_to_fit();
        for r in &mut runs {
            if let Kind::Raw(b) = &mut r.kind {
                b.shrink_to_fit();
            }
        }
        Data {
            len: bytes.len() as u64,
            runs,
        }
    }

    /// `bytes` kept as they are, without looking at them: for payloads
    /// that are dropped as soon as the write completes.
    pub(crate) fn raw(bytes: &[u8]) -> Data {
        let mut runs = Vec::new();
        if !bytes.is_empty() {
            runs.push(Run {
                start: 0,
                len: bytes.len() as u64,
                kind: Kind::Raw(bytes.to_vec()),
            });
        }
        Data {
            len: bytes.len() as u64,
            runs,
        }
    }

    /// The payload's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Bytes this payload holds in memory beyond its fixed size: the raw
    /// bytes and the run records.
    pub fn heap_bytes(&self) -> u64 {
        let raw: usize = self
            .runs
            .iter()
            .map(|r| match &r.kind {
                Kind::Raw(b) => b.capacity(),
                _ => 0,
            })
            .sum();
        (raw + self.runs.capacity() * std::mem::size_of::<Run>()) as u64
    }

    /// Visit the bytes of `[from, to)` (payload offsets) in order, as
    /// `(offset, Some(bytes))`, or `(offset, None)` with a length for zero
    /// bytes, so that callers may zero without building a buffer.
    fn visit(&self, from: u64, to: u64, mut f: impl FnMut(u64, Piece<'_>)) {
        debug_assert!(from <= to && to <= self.len);
        if from == to {
            return;
        }
        // The run holding `from`: the last that starts at or before it.
        let first = self.runs.partition_point(|r| r.start <= from) - 1;
        let mut block = [0u8; SECTOR_SIZE];
        for run in &self.runs[first..] {
            if run.start >= to {
                break;
            }
            let (s, e) = (from.max(run.start), to.min(run.start + run.len));
            match &run.kind {
                Kind::Zero => f(s, Piece::Zero(e - s)),
                Kind::Raw(b) => f(
                    s,
                    Piece::Bytes(&b[(s - run.start) as usize..(e - run.start) as usize]),
                ),
                Kind::Written { .. } | Kind::Backing { .. } => {
                    let mut at = s;
                    while at < e {
                        let k = (at - run.start) / BLOCK;
                        match run.kind {
                            Kind::Written { id, sector } => {
                                fill_written(&mut block, WriteId(id), sector + k)
                            }
                            Kind::Backing { sector } => fill_backing(&mut block, sector + k),
                            _ => unreachable!("matched above"),
                        }
                        let within = (at - run.start) % BLOCK;
                        let n = (BLOCK - within).min(e - at);
                        f(
                            at,
                            Piece::Bytes(&block[within as usize..(within + n) as usize]),
                        );
                        at += n;
                    }
                }
            }
        }
    }

    /// Copy the bytes from payload offset `pos` into `out`.
    pub fn copy_out(&self, pos: u64, out: &mut [u8]) {
        self.visit(pos, pos + out.len() as u64, |at, piece| {
            let i = (at - pos) as usize;
            match piece {
                Piece::Zero(n) => out[i..i + n as usize].fill(0),
                Piece::Bytes(b) => out[i..i + b.len()].copy_from_slice(b),
            }
        });
    }

    /// Put the bytes of payload offsets `[from, to)` into `store` at
    /// `base + offset`.
    pub fn apply(&self, store: &mut super::store::SparseStore, base: u64, from: u64, to: u64) {
        // Contiguous bytes are gathered and written together: one store
        // write per run of data rather than per block.
        let mut pending: Vec<u8> = Vec::new();
        let mut pending_at = from;
        self.visit(from, to, |at, piece| match piece {
            Piece::Zero(n) => {
                if !pending.is_empty() {
                    store.write(base + pending_at, &pending);
                    pending.clear();
                }
                store.zero(base + at, n);
            }
            Piece::Bytes(b) => {
                if pending.is_empty() {
                    pending_at = at;
                }
                pending.extend_from_slice(b);
                if pending.len() >= APPLY_BATCH {
                    store.write(base + pending_at, &pending);
                    pending.clear();
                }
            }
        });
        if !pending.is_empty() {
            store.write(base + pending_at, &pending);
        }
    }
}

/// Most bytes `apply` gathers before it writes them to the store.
const APPLY_BATCH: usize = 64 << 10;

/// Part of a payload, as `Data::visit` hands it out.
enum Piece<'a> {
    Zero(u64),
    Bytes(&'a [u8]),
}

/// Append a run of `len` bytes of `kind` at `pos`, merged into the last
/// run when it continues it.
fn push(runs: &mut Vec<Run>, pos: u64, len: u64, kind: Kind) {
    if let Some(last) = runs.last_mut() {
        debug_assert_eq!(last.start + last.len, pos);
        let blocks = last.len / BLOCK;
        let merged = match (&mut last.kind, &kind) {
            (Kind::Zero, Kind::Zero) => true,
            (Kind::Raw(a), Kind::Raw(b)) => {
                a.extend_from_slice(b);
                true
            }
            (Kind::Written { id, sector }, Kind::Written { id: i, sector: s }) => {
                *id == *i && *sector + blocks == *s && last.len.is_multiple_of(BLOCK)
            }
            (Kind::Backing { sector }, Kind::Backing { sector: s }) => {
                *sector + blocks == *s && last.len.is_multiple_of(BLOCK)
            }
            _ => false,
        };
        if merged {
            last.len += len;
            return;
        }
    }
    runs.push(Run {
        start: pos,
        len,
        kind,
    });
}
