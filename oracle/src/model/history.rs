//! One sector's history within an epoch: the writes that touched it since
//! the last crash, and the values they allow at a given moment.
//!
//! Time is the model's event counter ([`Seq`]). A write `w` supersedes an
//! earlier value `c` once `w` completed successfully and was issued after
//! `c` completed: then no device ordering can leave `c` behind `w`. Writes
//! whose lifetimes overlap supersede neither (the device may apply them in
//! either order), and a failed write or a discard supersedes nothing (each
//! may or may not have taken effect).

use smallvec::SmallVec;

use super::types::{OpId, Status, Value};

/// One sector's entries. Most sectors have one or two within an epoch
/// (compaction drops superseded ones), so they are kept inline: a heap
/// list per written sector cost a campaign more in allocation and freeing
/// than its checks.
pub(super) type Entries = SmallVec<[Entry; 2]>;

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
    pub op: OpId,
    pub put: Put,
    pub issued: Seq,
    /// Completion time and status, None while in flight.
    pub completed: Option<(Seq, Status)>,
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
fn latest_hiding_issue(entries: &[Entry], t: Seq) -> Option<Seq> {
    entries
        .iter()
        .filter(|w| w.hides(t))
        .map(|w| w.issued)
        .max()
}

/// The values a sector may hold at time `t` when only the writes done
/// before `t` count: its epoch `base` and every write not superseded.
/// `unwritten` is what the sector reads when the image does not cover it
/// (backing data or zeroes), which a discard may expose.
pub(super) fn settled(
    base: Value,
    entries: &[Entry],
    t: Seq,
    unwritten: Value,
    out: &mut Vec<Value>,
) {
    let latest = latest_hiding_issue(entries, t);
    if latest.is_none() {
        out.push(base);
    }
    for e in entries.iter() {
        match e.completed {
            Some((c, _)) if c < t && latest.is_none_or(|l| l < c) => e.values(unwritten, out),
            _ => {}
        }
    }
}

/// The values of writes not done before `t` (in flight at `t`, or done
/// later) that were issued before `until`.
pub(super) fn pending(
    entries: &[Entry],
    t: Seq,
    until: Seq,
    unwritten: Value,
    out: &mut Vec<Value>,
) {
    for e in entries
        .iter()
        .filter(|e| !e.completed_before(t) && e.issued < until)
    {
        e.values(unwritten, out);
    }
}

/// Drops the entries no moment from `t` on can see: done before `t` and
/// superseded by another entry done before `t`.
pub(super) fn compact(entries: &mut Entries, t: Seq) {
    if let Some(latest) = latest_hiding_issue(entries, t) {
        entries.retain(|e| !matches!(e.completed, Some((c, _)) if c < t && c < latest));
    }
}

/// Sorts and deduplicates a value list.
pub(super) fn normalise(values: &mut Vec<Value>) {
    values.sort_unstable();
    values.dedup();
}
