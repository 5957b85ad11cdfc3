//! One sector's history within an epoch: the writes that touched it since
//! the last crash, and the values they allow at a given moment.
//!
//! Time is the model's event counter ([`Seq`]). A write `w` supersedes an
//! earlier value `c` once `w` completed successfully and was issued after
//! `c` completed: then no device ordering can leave `c` behind `w`. Writes
//! whose lifetimes overlap supersede neither (the device may apply them in
//! either order), and a failed write or a discard supersedes nothing (each
//! may or may not have taken effect). After a crash only durable writes
//! supersede: those done before the last successful flush was issued, and
//! successful FUA writes.

use smallvec::SmallVec;

use super::types::{Status, Value};

/// An entry's place in the epoch's [`Book`].
pub(super) type EntryId = u32;

/// One sector's entries, as places in the [`Book`]. Most sectors have one
/// or two within an epoch (compaction drops superseded ones), so they are
/// kept inline: a heap list per written sector cost a campaign more in
/// allocation and freeing than its checks.
pub(super) type Entries = SmallVec<[EntryId; 4]>;

/// Every entry of the epoch, once: a write puts the same entry in every
/// sector it covers, so the sectors hold its place in the book rather
/// than a copy each. A write's completion then marks one entry, not one
/// per sector, and a sector's record is a few bytes, not a few words per
/// entry. Entries dropped from every sector by compaction stay until the
/// epoch ends (one per guest write and distinct value: as many as the
/// requests the epoch saw).
#[derive(Default)]
pub(super) struct Book(Vec<Entry>);

impl Book {
    pub(super) fn add(&mut self, e: Entry) -> EntryId {
        let id = EntryId::try_from(self.0.len()).expect("fewer than 2^32 writes in one epoch");
        self.0.push(e);
        id
    }

    pub(super) fn get(&self, id: EntryId) -> &Entry {
        &self.0[id as usize]
    }

    pub(super) fn get_mut(&mut self, id: EntryId) -> &mut Entry {
        &mut self.0[id as usize]
    }

    /// The entries `ids` name, in order.
    pub(super) fn all<'a>(&'a self, ids: &'a [EntryId]) -> impl Iterator<Item = &'a Entry> + 'a {
        ids.iter().map(|&id| self.get(id))
    }

    pub(super) fn clear(&mut self) {
        self.0.clear();
    }
}

/// The model's logical clock: one tick per event.
pub(super) type Seq = u64;

/// What a write put in this sector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Put {
    Value(Value),
    Discard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Entry {
    pub put: Put,
    pub issued: Seq,
    /// Completion time and status, None while in flight.
    pub completed: Option<(Seq, Status)>,
    /// Flagged FUA: once it completes successfully it is durable without
    /// a flush.
    pub fua: bool,
}

impl Entry {
    fn completed_before(&self, t: Seq) -> bool {
        matches!(self.completed, Some((c, _)) if c < t)
    }

    /// Whether this entry, done before `t`, hides earlier values from
    /// every moment from `t` on: it succeeded and wrote a value.
    fn hides(&self, t: Seq) -> bool {
        matches!(self.completed, Some((done, Status::Ok)) if done < t)
            && matches!(self.put, Put::Value(_))
    }

    /// Whether a crash keeps this entry's value, given that the writes
    /// done before `d` are durable: it succeeded and wrote a value, and
    /// was done before `d` or flagged FUA.
    fn durable(&self, d: Seq) -> bool {
        matches!(self.completed, Some((done, Status::Ok)) if done < d || self.fua)
            && matches!(self.put, Put::Value(_))
    }

    /// Whether nothing about this entry is left to a crash: done before
    /// `d`, or durable (a FUA write that succeeded).
    pub(super) fn settled_by(&self, d: Seq) -> bool {
        self.completed_before(d) || self.durable(d)
    }

    /// Pushes the values this entry may leave in the sector.
    fn values(&self, unwritten: Value, out: &mut Vec<Value>) {
        match self.put {
            Put::Value(v) => out.push(v),
            Put::Discard => {
                out.push(Value::Zero);
                out.push(unwritten);
            }
        }
    }
}

/// The latest issue time of the entries that hide older values at `t`:
/// a value completed before it is superseded.
fn latest_hiding_issue(book: &Book, ids: &[EntryId], t: Seq) -> Option<Seq> {
    book.all(ids).filter(|w| w.hides(t)).map(|w| w.issued).max()
}

/// The values a sector may hold at time `t` when only the writes done
/// before `t` count: its epoch `base` and every write not superseded.
/// `unwritten` is what the sector reads when the image does not cover it
/// (backing data or zeroes), which a discard may expose.
pub(super) fn settled(
    base: Value,
    book: &Book,
    ids: &[EntryId],
    t: Seq,
    unwritten: Value,
    out: &mut Vec<Value>,
) {
    let latest = latest_hiding_issue(book, ids, t);
    if latest.is_none() {
        out.push(base);
    }
    for e in book.all(ids) {
        match e.completed {
            Some((c, _)) if c < t && latest.is_none_or(|l| l < c) => e.values(unwritten, out),
            _ => {}
        }
    }
}

/// The values of writes not done before `t` (in flight at `t`, or done
/// later) that were issued before `until`.
pub(super) fn pending(
    book: &Book,
    ids: &[EntryId],
    t: Seq,
    until: Seq,
    unwritten: Value,
    out: &mut Vec<Value>,
) {
    for e in book
        .all(ids)
        .filter(|e| !e.completed_before(t) && e.issued < until)
    {
        e.values(unwritten, out);
    }
}

/// The values a crash may leave in a sector when the writes done before
/// `d` are durable, and so is every FUA write that succeeded (whenever it
/// completed): its epoch `base` unless a durable write hides it, and
/// every write issued before `until` that no durable write hides. A
/// durable write hides the writes done before it was issued: no device
/// ordering can put them back over it. With no FUA write this is
/// [`settled`] at `d` and [`pending`] from `d` to `until`.
pub(super) fn after_crash(
    base: Value,
    book: &Book,
    ids: &[EntryId],
    d: Seq,
    until: Seq,
    unwritten: Value,
    out: &mut Vec<Value>,
) {
    let latest = book
        .all(ids)
        .filter(|e| e.durable(d))
        .map(|e| e.issued)
        .max();
    if latest.is_none() {
        out.push(base);
    }
    for e in book.all(ids).filter(|e| e.issued < until) {
        let hidden = matches!((e.completed, latest), (Some((c, _)), Some(l)) if c < l);
        if !hidden {
            e.values(unwritten, out);
        }
    }
}

/// Drops the entries no moment from `t` on can see: done before `t` and
/// superseded by another entry done before `t`.
pub(super) fn compact(book: &Book, ids: &mut Entries, t: Seq) {
    if let Some(latest) = latest_hiding_issue(book, ids, t) {
        ids.retain(|id| !matches!(book.get(*id).completed, Some((c, _)) if c < t && c < latest));
    }
}

/// Sorts and deduplicates a value list.
pub(super) fn normalise(values: &mut Vec<Value>) {
    values.sort_unstable();
    values.dedup();
}
