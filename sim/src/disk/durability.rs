//! Durability bookkeeping: the durable state and the pending writes (in
//! flight, or completed but not yet durable), with the Linux rules that move
//! writes from one to the other. The live disk drives it as requests issue
//! and complete; a replay of the write log drives it to rebuild the state
//! at any past moment. Both share this one implementation of the rules.
//!
//! - A flush makes durable exactly the writes that completed before it was
//!   issued (in completion order).
//! - A FUA write is durable when it completes.
//! - A pending write that completed before a newer write that became
//!   durable can no longer show through where they overlap: those bytes are
//!   marked *dead* in it, so neither a later flush nor a crash resurrects
//!   them.
//! - A truncate is a metadata change made durable at once; earlier pending
//!   writes lose whatever lay past the new end.

use std::collections::BTreeMap;
use std::rc::Rc;

use super::payload::Data;
use super::store::SparseStore;

/// What a write-like request puts on the disk.
#[derive(Debug, Clone)]
pub enum Payload {
    /// Its bytes, compact (see `payload`): a pending write keeps them until
    /// it is durable or dead, however many later writes cover it.
    Data(Rc<Data>),
    Zeroes,
}

/// A write that is in flight or completed but not yet durable.
#[derive(Debug, Clone)]
pub struct Pending {
    pub(crate) id: u64,
    /// Where it lands (after any misdirection) and how much of it lands.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) payload: Payload,
    pub(crate) fua: bool,
    /// The completion order number, once completed.
    pub(crate) completed: Option<u64>,
    /// Byte ranges `[start, end)` superseded by a newer durable write.
    pub dead: Vec<(u64, u64)>,
}

impl Pending {
    /// The byte ranges of this write that can still show through.
    pub(crate) fn live(&self) -> Vec<(u64, u64)> {
        subtract((self.offset, self.offset + self.len), &self.dead)
    }

    /// Bytes its payload holds in memory (the fixed-size parts aside).
    pub(crate) fn payload_bytes(&self) -> u64 {
        match &self.payload {
            Payload::Data(d) => d.heap_bytes(),
            Payload::Zeroes => 0,
        }
    }

    /// Put the bytes of `[start, end)` (inside this write) into `store`.
    pub(crate) fn apply(&self, store: &mut SparseStore, start: u64, end: u64) {
        debug_assert!(self.offset <= start && end <= self.offset + self.len);
        match &self.payload {
            Payload::Data(d) => d.apply(store, self.offset, start - self.offset, end - self.offset),
            Payload::Zeroes => store.zero(start, end - start),
        }
    }

    /// Copy this write's bytes from `pos` on into `out` (all inside it).
    pub(crate) fn copy_out(&self, pos: u64, out: &mut [u8]) {
        debug_assert!(self.offset <= pos && pos + out.len() as u64 <= self.offset + self.len);
        match &self.payload {
            Payload::Data(d) => d.copy_out(pos - self.offset, out),
            Payload::Zeroes => out.fill(0),
        }
    }
}

/// `range` minus every range of `holes`.
pub(crate) fn subtract(range: (u64, u64), holes: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = vec![range];
    for &(hs, he) in holes {
        let mut next = Vec::with_capacity(out.len() + 1);
        for (s, e) in out {
            if he <= s || e <= hs {
                next.push((s, e));
                continue;
            }
            if s < hs {
                next.push((s, hs));
            }
            if he < e {
                next.push((he, e));
            }
        }
        out = next;
    }
    out
}

/// The durable state and the pending writes.
#[derive(Debug, Clone, Default)]
pub struct Durability {
    /// What every crash keeps: the writes made durable so far.
    pub durable: SparseStore,
    /// By request id.
    pending: BTreeMap<u64, Pending>,
    /// The completed ones among them, by completion order number: a flush
    /// takes a prefix of it, and a write made durable marks bytes dead only
    /// in writes that completed before it, so neither looks at every
    /// pending write (which made a flush after n unflushed writes cost n^2).
    completed: BTreeMap<u64, u64>,
    /// Bytes the pending writes cover (each counted whole), for a bounded
    /// cache's write-back.
    pending_bytes: u64,
}

impl Durability {
    /// `durable` as the durable state, and no write pending.
    pub fn new(durable: SparseStore) -> Self {
        Self {
            durable,
            pending: BTreeMap::new(),
            completed: BTreeMap::new(),
            pending_bytes: 0,
        }
    }

    /// The pending writes, by request id.
    pub fn pending(&self) -> &BTreeMap<u64, Pending> {
        &self.pending
    }

    /// Forget pending write `id` (a disk without crash tracking drops each
    /// write once it has reached the volatile view).
    pub(crate) fn forget(&mut self, id: u64) {
        if let Some(p) = self.pending.remove(&id) {
            self.pending_bytes -= p.len;
            if let Some(c) = p.completed {
                self.completed.remove(&c);
            }
        }
    }

    /// A write-like request `id` was issued; it will land `len` bytes of
    /// `payload` at `offset` (after faults), unless it never completes.
    pub fn issue(&mut self, id: u64, offset: u64, len: u64, payload: Payload, fua: bool) {
        if len == 0 {
            return;
        }
        assert!(
            !self.pending.contains_key(&id),
            "request #{id} issued twice"
        );
        self.pending_bytes += len;
        self.pending.insert(
            id,
            Pending {
                id,
                offset,
                len,
                payload,
                fua,
                completed: None,
                dead: Vec::new(),
            },
        );
    }

    /// Request `id` completed as event `seq`, successfully or not (a failed
    /// write may still have landed what `issue` said). Returns the write,
    /// for the caller to apply to its volatile view.
    pub fn complete(&mut self, id: u64, seq: u64, ok: bool) -> Option<Pending> {
        let p = self.pending.get_mut(&id)?;
        assert!(p.completed.is_none(), "request #{id} completed twice");
        p.completed = Some(seq);
        let p = p.clone();
        let earlier = self.completed.insert(seq, id);
        assert!(earlier.is_none(), "two completions numbered {seq}");
        if p.fua && ok {
            self.make_durable(&[id]);
        }
        Some(p)
    }

    /// A flush issued as event `issue_seq` completed successfully.
    pub fn flush(&mut self, issue_seq: u64) {
        // Writes that completed before the flush was issued, oldest first.
        let ids: Vec<u64> = self
            .completed
            .range(..issue_seq)
            .map(|(_, &id)| id)
            .collect();
        self.make_durable(&ids);
        debug_assert!(self
            .pending
            .values()
            .all(|p| p.completed.is_none_or(|c| c > issue_seq)));
    }

    /// A cache of at most `max` bytes writes back its oldest completed
    /// writes (in completion order, as a flush would take them) until the
    /// pending ones fit, or only writes in flight are left.
    pub(crate) fn write_back(&mut self, max: u64) {
        while self.pending_bytes > max {
            let Some((_, &id)) = self.completed.iter().next() else {
                break;
            };
            self.make_durable(&[id]);
        }
    }

    /// A truncate `id` to `len` bytes completed successfully.
    pub(crate) fn truncate(&mut self, id: u64, len: u64) {
        self.durable.truncate(len);
        for p in self.pending.values_mut() {
            if p.id < id && p.offset + p.len > len {
                p.dead.push((len.max(p.offset), p.offset + p.len));
            }
        }
    }

    /// Move the completed pending writes `ids` (in completion order) into
    /// the durable state, marking their bytes dead in older pending writes.
    fn make_durable(&mut self, ids: &[u64]) {
        for id in ids {
            let p = self.pending.remove(id).expect("a pending write");
            self.pending_bytes -= p.len;
            let done = p.completed.expect("only completed writes become durable");
            self.completed.remove(&done);
            for (s, e) in p.live() {
                p.apply(&mut self.durable, s, e);
            }
            let (s, e) = (p.offset, p.offset + p.len);
            // Those that completed before it; in a flush, which takes them
            // oldest first, none is left.
            for (_, q) in self.completed.range(..done) {
                let q = self
                    .pending
                    .get_mut(q)
                    .expect("completed writes are pending");
                if q.offset < e && s < q.offset + q.len {
                    q.dead.push((s.max(q.offset), e.min(q.offset + q.len)));
                }
            }
        }
    }
}
