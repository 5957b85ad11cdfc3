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
pub(crate) enum Payload {
    /// Its bytes, compact (see `payload`): a pending write keeps them until
    /// it is durable or dead, however many later writes cover it.
    Data(Rc<Data>),
    Zeroes,
}

/// A write that is in flight or completed but not yet durable.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub(crate) id: u64,
    /// Where it lands (after any misdirection) and how much of it lands.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) payload: Payload,
    pub(crate) fua: bool,
    /// The completion order number, once completed.
    pub(crate) completed: Option<u64>,
    /// Byte ranges `[start, end)` superseded by a newer durable write.
    pub(crate) dead: Vec<(u64, u64)>,
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
pub(crate) struct Durability {
    pub(crate) durable: SparseStore,
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
    pub(crate) fn new(durable: SparseStore) -> Self {
        Self {
            durable,
            pending: BTreeMap::new(),
            completed: BTreeMap::new(),
            pending_bytes: 0,
        }
    }

    /// The pending writes, by request id.
    pub(crate) fn pending(&self) -> &BTreeMap<u64, Pending> {
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
    pub(crate) fn issue(&mut self, id: u64, offset: u64, len: u64, payload: Payload, fua: bool) {
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
    pub(crate) fn complete(&mut self, id: u64, seq: u64, ok: bool) -> Option<Pending> {
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
    pub(crate) fn flush(&mut self, issue_seq: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn data(byte: u8, len: usize) -> Payload {
        Payload::Data(Rc::new(Data::new(&vec![byte; len])))
    }

    fn read(store: &SparseStore, at: u64) -> u8 {
        let mut b = [0u8];
        store.read(at, &mut b);
        b[0]
    }

    /// A FUA write made durable marks its bytes dead in the writes that
    /// completed before it, and only in those; a flush then makes durable
    /// exactly what completed before it was issued, oldest first.
    #[test]
    fn fua_and_flush_follow_completion_order() {
        let mut d = Durability::new(SparseStore::new());
        d.issue(0, 0, 1024, data(1, 1024), false);
        d.issue(1, 0, 1024, data(2, 1024), false);
        d.issue(2, 0, 512, data(3, 512), true);
        d.issue(3, 256, 512, data(4, 512), false);
        d.complete(0, 10, true);
        d.complete(2, 11, true); // FUA: durable now; kills 0..512 of #0.
        d.complete(1, 12, true); // Completed after #2: stays whole.
        assert_eq!(d.pending()[&0].dead, vec![(0, 512)]);
        assert!(d.pending()[&1].dead.is_empty());
        assert!(!d.pending().contains_key(&2));
        assert_eq!(read(&d.durable, 0), 3);
        // A flush issued at 13 takes #0 then #1; #3 is still in flight.
        d.flush(13);
        assert_eq!(d.pending().keys().copied().collect::<Vec<_>>(), vec![3]);
        assert_eq!((read(&d.durable, 0), read(&d.durable, 1000)), (2, 2));
        d.complete(3, 14, true);
        d.flush(15);
        assert!(d.pending().is_empty());
        assert_eq!((read(&d.durable, 300), read(&d.durable, 800)), (4, 2));
    }

    /// Many unflushed writes and one flush: all durable, in completion
    /// order (the last to complete shows). This flush visited every
    /// pending write once per write it made durable before (n^2).
    #[test]
    fn a_flush_of_many_unflushed_writes() {
        let n = 20_000u64;
        let mut d = Durability::new(SparseStore::new());
        for id in 0..n {
            d.issue(id, 0, 512, data((id % 251) as u8, 512), false);
        }
        // Completed in reverse order: #0 last.
        for (seq, id) in (0..n).rev().enumerate() {
            d.complete(id, seq as u64 + 1, true);
        }
        d.flush(n + 1);
        assert!(d.pending().is_empty());
        assert_eq!(read(&d.durable, 0), 0);
    }
}
