//! A wrapper that injects exactly the faults a test asks for: a rule sees
//! each request (numbered per kind, from 1) and may fail it, refuse an
//! efficient zeroing, or write garbage where the request was going and then
//! fail it (a write that failed part way).
//!
//! The simulated disk's faults are drawn from a seed and land anywhere;
//! this is for the other kind of test, the one that needs the third data
//! write, or every read while a flag is set, to fail.

use std::cell::Cell;

use crate::{BlockDev, DevError, IoOp, WriteFlags, ZeroFlags};

/// What the rule does to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injected {
    /// Fail it with EIO, touching nothing.
    Eio,
    /// Answer `NotSupported` (meaningful for a `no_fallback` zeroing).
    NotSupported,
    /// Write this byte over the request's range, then fail it with EIO
    /// (for writes and zeroing; other requests just fail).
    GarbageThenEio(u8),
}

/// The rule: the request's kind, its number among requests of that kind
/// (1 for the first), offset, length, and the zeroing flags; `None` lets it
/// through.
type Rule = Box<dyn Fn(IoOp, u64, u64, u64, ZeroFlags) -> Option<Injected>>;

/// `inner`, with the faults `rule` picks.
pub struct Faulty<D> {
    inner: D,
    rule: Rule,
    /// Requests seen so far, per kind, indexed as `IoOp::index`.
    seen: [Cell<u64>; IoOp::COUNT],
}

impl<D> std::fmt::Debug for Faulty<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faulty").finish_non_exhaustive()
    }
}

impl<D: BlockDev> Faulty<D> {
    /// `rule(op, nth, offset, len, zero_flags)` decides each request.
    pub fn new(
        inner: D,
        rule: impl Fn(IoOp, u64, u64, u64, ZeroFlags) -> Option<Injected> + 'static,
    ) -> Self {
        Faulty {
            inner,
            rule: Box::new(rule),
            seen: Default::default(),
        }
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    pub fn into_inner(self) -> D {
        self.inner
    }

    /// How many requests of `op` arrived so far.
    pub fn seen(&self, op: IoOp) -> u64 {
        self.seen[op.index()].get()
    }

    fn decide(&self, op: IoOp, offset: u64, len: u64, flags: ZeroFlags) -> Option<Injected> {
        let n = &self.seen[op.index()];
        n.set(n.get() + 1);
        (self.rule)(op, n.get(), offset, len, flags)
    }

    async fn inject(&self, what: Injected, op: IoOp, offset: u64, len: u64) -> DevError {
        match what {
            Injected::NotSupported => DevError::NotSupported { op },
            Injected::Eio => DevError::Io { op, offset, len },
            Injected::GarbageThenEio(byte) => {
                if matches!(op, IoOp::Write | IoOp::WriteZeroes) {
                    let garbage = vec![byte; len as usize];
                    // The garbage is what the failed request left behind; if
                    // even that fails, the request still fails with EIO.
                    let _ = self
                        .inner
                        .write(offset, &garbage, WriteFlags::default())
                        .await;
                }
                DevError::Io { op, offset, len }
            }
        }
    }
}

impl<D: BlockDev> BlockDev for Faulty<D> {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        let len = buf.len() as u64;
        if let Some(what) = self.decide(IoOp::Read, offset, len, ZeroFlags::default()) {
            return Err(self.inject(what, IoOp::Read, offset, len).await);
        }
        self.inner.read(offset, buf).await
    }

    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        let len = buf.len() as u64;
        if let Some(what) = self.decide(IoOp::Write, offset, len, ZeroFlags::default()) {
            return Err(self.inject(what, IoOp::Write, offset, len).await);
        }
        self.inner.write(offset, buf, flags).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        if let Some(what) = self.decide(IoOp::WriteZeroes, offset, len, flags) {
            return Err(self.inject(what, IoOp::WriteZeroes, offset, len).await);
        }
        self.inner.write_zeroes(offset, len, flags).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        if let Some(what) = self.decide(IoOp::Discard, offset, len, ZeroFlags::default()) {
            return Err(self.inject(what, IoOp::Discard, offset, len).await);
        }
        self.inner.discard(offset, len).await
    }

    async fn flush(&self) -> Result<(), DevError> {
        if let Some(what) = self.decide(IoOp::Flush, 0, 0, ZeroFlags::default()) {
            return Err(self.inject(what, IoOp::Flush, 0, 0).await);
        }
        self.inner.flush().await
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        if let Some(what) = self.decide(IoOp::Truncate, len, 0, ZeroFlags::default()) {
            return Err(self.inject(what, IoOp::Truncate, len, 0).await);
        }
        self.inner.truncate(len).await
    }
}
