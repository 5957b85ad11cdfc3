//! What the model is told a snapshot apply or a resize writes: the value
//! each sector holds afterwards, as pure functions of the model (and the
//! case's backing data), shared by the in-process runner and the runs of
//! drivers out of process (`qcsim::qemu::run`), which must tell the model
//! the same.

use std::collections::BTreeSet;

use oracle::model::{Model, Value};

use crate::case::Case;

/// What applying a snapshot holding `taken` (sector, value, in order)
/// puts in each sector whose value may change: those the model has a
/// record of and those the snapshot holds written data in (an unwritten
/// sector reads the same in both).
pub fn values_after_apply(model: &Model, taken: &[(u64, Value)]) -> Vec<(u64, Value)> {
    let mut sectors = model.recorded_sectors();
    sectors.extend(taken.iter().map(|&(s, _)| s));
    let mut taken = taken.iter().peekable();
    sectors
        .into_iter()
        .map(|s| {
            while taken.next_if(|&&(t, _)| t < s).is_some() {}
            let v = taken
                .next_if(|&&(t, _)| t == s)
                .map_or_else(|| model.unwritten(s), |&(_, v)| v);
            (s, v)
        })
        .collect()
}

/// What the sectors between sizes `from` and `to` (in sectors) of `case`'s
/// disk hold after a resize: a grow reads zeroes there (a backing file
/// does not show through); a shrink drops them (unwritten, to the model:
/// past the new end nothing reads them, and a later grow zeroes them).
/// Each sector the model has a record of or the backing file has data
/// in; the others read zeroes either way.
pub fn resize_values(model: &Model, case: &Case, from: u64, to: u64) -> Vec<(u64, Value)> {
    let (lo, hi) = (from.min(to), from.max(to));
    let mut sectors: BTreeSet<u64> = model.recorded_sectors().range(lo..hi).copied().collect();
    if let Some(b) = case.backing_data() {
        sectors.extend(lo..hi.min(b.sectors));
    }
    let grow = to > from;
    sectors
        .into_iter()
        .map(|s| {
            (
                s,
                if grow {
                    Value::Zero
                } else {
                    model.unwritten(s)
                },
            )
        })
        .collect()
}
