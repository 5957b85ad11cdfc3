//! The workload passes: which operations and groups a failing case keeps,
//! where its crashes fall, how long its requests are and where they lie.
//!
//! Each pass is a method of the shrinker that builds candidates with the
//! pure functions below and keeps those under which the case still fails;
//! the functions are unit-tested on their own, and the passes under
//! synthetic predicates (no engine runs).

use super::Shrinker;
use crate::case::{Case, Op, MAX_GROUP_OPS};
use crate::shrink::Progress;

impl<F: FnMut(&Case) -> bool, P: FnMut(&Progress)> Shrinker<F, P> {
    /// Each crash point, alone.
    pub(super) fn drop_crashes(&mut self) {
        let mut k = 0;
        while let Some((g, i)) = crash_positions(&self.best).get(k).copied() {
            let mut c = self.best.clone();
            c.workload[g].remove(i);
            c.workload.retain(|ops| !ops.is_empty());
            if !self.try_case("drop_crashes", c) {
                k += 1;
            }
        }
    }

    /// Everything after a crash, earliest crash first: a failure the check
    /// after that crash already sees needs nothing that follows it. The
    /// first accepted cut is the shortest of these.
    pub(super) fn cut_after_crash(&mut self) {
        for (g, _) in crash_positions(&self.best) {
            if g + 1 < self.best.workload.len() {
                let mut c = self.best.clone();
                c.workload.truncate(g + 1);
                if self.try_case("cut_after_crash", c) {
                    return;
                }
            }
        }
    }

    /// Each crash into the group before it, as far back as the failure
    /// allows (a group holds one crash at most: `validate` refuses more).
    pub(super) fn move_crashes(&mut self) {
        let mut k = 0;
        while let Some((g, i)) = crash_positions(&self.best).get(k).copied() {
            let moved = crash_moved_back(&self.best, g, i);
            if !moved.is_some_and(|c| self.try_case("move_crashes", c)) {
                k += 1;
            }
        }
    }

    /// Runs of whole groups, halving the run length (ddmin).
    pub(super) fn drop_groups(&mut self) {
        let mut chunk = self.best.workload.len().div_ceil(2);
        while chunk >= 1 {
            let mut start = 0;
            while start < self.best.workload.len() {
                let mut c = self.best.clone();
                let end = (start + chunk).min(c.workload.len());
                c.workload.drain(start..end);
                if !self.try_case("drop_groups", c) {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }

    /// Runs of operations across groups, halving the run length down to
    /// one operation at a time, so that no single operation (a flush
    /// included) can go once a round ends.
    pub(super) fn drop_ops(&mut self) {
        let total = |c: &Case| c.workload.iter().map(Vec::len).sum::<usize>();
        let mut chunk = total(&self.best).div_ceil(2);
        while chunk >= 1 {
            let mut start = 0;
            while start < total(&self.best) {
                let c = without_ops(&self.best, start, chunk);
                if !self.try_case("drop_ops", c) {
                    start += chunk;
                }
            }
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }

    /// Each operation alone, under each of the `reseeds` seeds after the
    /// case's own, once nothing else shrinks. A run's scheduling, latencies,
    /// faults and crash states all derive from the seed (`rng`), and
    /// removing any operation shifts every draw after it, so a failure that
    /// hangs on one interleaving or crash state often vanishes with any
    /// single operation; under a neighbouring seed the smaller case may hit
    /// an interleaving that fails the same way. The predicate is unchanged:
    /// only a candidate that fails as the original did is kept, and it
    /// replays as it is, its seed included.
    pub(super) fn reseed_drop_ops(&mut self, reseeds: u64) {
        let mut k = 0;
        while k < self.best.workload.iter().map(Vec::len).sum::<usize>() {
            let base = without_ops(&self.best, k, 1);
            let seed = self.best.seed;
            let kept = (1..=reseeds).any(|d| {
                let mut c = base.clone();
                c.seed = seed.wrapping_add(d);
                self.try_case("reseed_drop_ops", c)
            });
            if !kept {
                k += 1;
            }
        }
    }

    /// Each pair of adjacent groups as one; a merged group is tried with
    /// the next one too.
    pub(super) fn merge_groups(&mut self) {
        let mut g = 0;
        while g + 1 < self.best.workload.len() {
            let c = merged(&self.best, g);
            if !c.is_some_and(|c| self.try_case("merge_groups", c)) {
                g += 1;
            }
        }
    }

    /// Each request's length down to one sector, or halved while it still
    /// fails: its first sector alone, then its last alone, then its first
    /// half, then its second half (a failure may need where a request
    /// ends, not where it starts).
    pub(super) fn shorten_ops(&mut self) {
        for (g, i) in positions(&self.best) {
            while let Some((sector, n)) = self.best.workload[g][i].range() {
                if n <= 1 {
                    break;
                }
                let half = n / 2;
                let shorter = [
                    (sector, 1),
                    (sector + n - 1, 1),
                    (sector, half),
                    (sector + half, n - half),
                ];
                let accepted = shorter.into_iter().position(|(s, len)| {
                    let mut c = self.best.clone();
                    c.workload[g][i] = at_sector(with_length(c.workload[g][i], len), s);
                    self.try_case("shorten_ops", c)
                });
                // One sector is as short as it gets; a half may halve again.
                if accepted.is_none_or(|k| k < 2) {
                    break;
                }
            }
        }
    }

    /// Requests toward sector 0: all of them down together by whole L2
    /// tables' reach, then whole clusters, then sectors (what lies in one
    /// cluster or table stays together); then each request alone, its
    /// cluster toward 0 (keeping its place in the cluster), then its place
    /// in the cluster toward the cluster's start.
    pub(super) fn lower_offsets(&mut self) {
        let cluster = cluster_sectors(&self.best);
        for unit in [l2_reach_sectors(&self.best), cluster, 1] {
            if let Some(c) = shifted_down(&self.best, unit) {
                self.try_case("lower_offsets", c);
            }
        }
        for (g, i) in positions(&self.best) {
            let Some((sector, _)) = self.best.workload[g][i].range() else {
                continue;
            };
            // The cluster: to 0, else halved while it still fails.
            let (index, within) = (sector / cluster, sector % cluster);
            let index = self.lower("lower_offsets", g, i, index, |x| x * cluster + within);
            // The place in the cluster: likewise.
            self.lower("lower_offsets", g, i, within, |x| index * cluster + x);
        }
    }

    /// Moves op (g, i) to `place(x)` for `x` from `value` toward 0 (0
    /// first, then halving while it still fails); returns the `x` it
    /// reached.
    fn lower(
        &mut self,
        pass: &'static str,
        g: usize,
        i: usize,
        mut value: u64,
        place: impl Fn(u64) -> u64,
    ) -> u64 {
        let try_at = |s: &mut Self, x: u64| {
            let mut c = s.best.clone();
            c.workload[g][i] = at_sector(c.workload[g][i], place(x));
            s.try_case(pass, c)
        };
        if value == 0 || try_at(self, 0) {
            return 0;
        }
        while value > 1 && try_at(self, value / 2) {
            value /= 2;
        }
        value
    }
}

/// Every operation's place, as (group, index), in workload order.
fn positions(case: &Case) -> Vec<(usize, usize)> {
    case.workload
        .iter()
        .enumerate()
        .flat_map(|(g, ops)| (0..ops.len()).map(move |i| (g, i)))
        .collect()
}

/// Where the crash operations are, as (group, index).
pub(super) fn crash_positions(case: &Case) -> Vec<(usize, usize)> {
    positions(case)
        .into_iter()
        .filter(|&(g, i)| matches!(case.workload[g][i], Op::Crash))
        .collect()
}

/// `case` without the `count` operations from flat position `start`;
/// groups left empty are removed.
pub(super) fn without_ops(case: &Case, start: usize, count: usize) -> Case {
    let mut c = case.clone();
    let mut pos = 0;
    for ops in &mut c.workload {
        let mut kept = Vec::with_capacity(ops.len());
        for op in ops.drain(..) {
            if pos < start || pos >= start + count {
                kept.push(op);
            }
            pos += 1;
        }
        *ops = kept;
    }
    c.workload.retain(|ops| !ops.is_empty());
    c
}

/// `case` with groups `g` and `g + 1` as one group (their operations in
/// order, so every operation keeps its number), or None if the merged
/// group would hold two crashes or more than `MAX_GROUP_OPS` operations.
pub(super) fn merged(case: &Case, g: usize) -> Option<Case> {
    let w = &case.workload;
    let crashes = w[g..=g + 1]
        .iter()
        .flatten()
        .filter(|op| matches!(op, Op::Crash))
        .count();
    if crashes > 1 || w[g].len() + w[g + 1].len() > MAX_GROUP_OPS {
        return None;
    }
    let mut c = case.clone();
    let next = c.workload.remove(g + 1);
    c.workload[g].extend(next);
    Some(c)
}

/// `case` with the crash at (g, i) moved to the end of group `g - 1`
/// (group `g` dropped if nothing else was in it), or None if `g` is the
/// first group or the one before already crashes.
pub(super) fn crash_moved_back(case: &Case, g: usize, i: usize) -> Option<Case> {
    if g == 0
        || case.workload[g - 1]
            .iter()
            .any(|op| matches!(op, Op::Crash))
    {
        return None;
    }
    let mut c = case.clone();
    let crash = c.workload[g].remove(i);
    c.workload[g - 1].push(crash);
    c.workload.retain(|ops| !ops.is_empty());
    Some(c)
}

/// `case` with every request moved down by the same multiple of `unit`
/// sectors, as far as the lowest request allows; None if that is 0.
pub(super) fn shifted_down(case: &Case, unit: u64) -> Option<Case> {
    let lowest = case
        .workload
        .iter()
        .flatten()
        .filter_map(|op| op.range())
        .map(|(s, _)| s)
        .min()?;
    let delta = lowest / unit * unit;
    if delta == 0 {
        return None;
    }
    let mut c = case.clone();
    for op in c.workload.iter_mut().flatten() {
        if let Some((s, _)) = op.range() {
            *op = at_sector(*op, s - delta);
        }
    }
    Some(c)
}

/// Sectors per cluster of the case's image.
fn cluster_sectors(case: &Case) -> u64 {
    case.image.create.cluster_size / oracle::data::SECTOR_SIZE as u64
}

/// Sectors one L2 table maps.
fn l2_reach_sectors(case: &Case) -> u64 {
    let c = &case.image.create;
    let entry = if c.extended_l2 { 16 } else { 8 };
    c.cluster_size / entry * cluster_sectors(case)
}

/// `op` covering `n` sectors from the same first sector.
pub(super) fn with_length(op: Op, n: u64) -> Op {
    match op {
        Op::Write { sector, .. } => Op::Write { sector, sectors: n },
        Op::Read { sector, .. } => Op::Read { sector, sectors: n },
        Op::BackgroundRead { sector, hold, .. } => Op::BackgroundRead {
            sector,
            sectors: n,
            hold,
        },
        Op::WriteZeroes { sector, unmap, .. } => Op::WriteZeroes {
            sector,
            sectors: n,
            unmap,
        },
        Op::Discard { sector, .. } => Op::Discard { sector, sectors: n },
        Op::Flush | Op::Crash => op,
    }
}

/// `op` with the same length from `sector`.
pub(super) fn at_sector(op: Op, sector: u64) -> Op {
    match op {
        Op::Write { sectors, .. } => Op::Write { sector, sectors },
        Op::Read { sectors, .. } => Op::Read { sector, sectors },
        Op::BackgroundRead { sectors, hold, .. } => Op::BackgroundRead {
            sector,
            sectors,
            hold,
        },
        Op::WriteZeroes { sectors, unmap, .. } => Op::WriteZeroes {
            sector,
            sectors,
            unmap,
        },
        Op::Discard { sectors, .. } => Op::Discard { sector, sectors },
        Op::Flush | Op::Crash => op,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testcase::{ops, w, with_groups};
    use super::*;
    use crate::shrink::{shrink_with, ShrinkOptions};

    fn shrink(case: &Case, fails: impl FnMut(&Case) -> bool) -> Case {
        shrink_with(case, &ShrinkOptions::default(), fails, |_| {})
            .expect("the case fails")
            .case
    }

    #[test]
    fn merged_keeps_order_and_refuses_two_crashes() {
        let c = with_groups(vec![
            vec![w(0, 1), Op::Crash],
            vec![w(8, 1)],
            vec![Op::Crash],
        ]);
        let m = merged(&c, 0).expect("one crash in all");
        assert_eq!(
            m.workload,
            vec![vec![w(0, 1), Op::Crash, w(8, 1)], vec![Op::Crash]]
        );
        assert!(merged(&m, 0).is_none(), "two crashes in one group");
    }

    #[test]
    fn crash_moves_back_only_into_a_crash_free_group() {
        let c = with_groups(vec![
            vec![w(0, 1)],
            vec![Op::Crash, w(8, 1)],
            vec![Op::Crash],
        ]);
        let m = crash_moved_back(&c, 1, 0).unwrap();
        assert_eq!(
            m.workload,
            vec![vec![w(0, 1), Op::Crash], vec![w(8, 1)], vec![Op::Crash]]
        );
        assert!(crash_moved_back(&c, 0, 0).is_none());
        // Group 1 empties and goes.
        let c = with_groups(vec![vec![w(0, 1)], vec![Op::Crash], vec![w(8, 1)]]);
        let m = crash_moved_back(&c, 1, 0).unwrap();
        assert_eq!(m.workload, vec![vec![w(0, 1), Op::Crash], vec![w(8, 1)]]);
        let c = with_groups(vec![vec![Op::Crash], vec![Op::Crash]]);
        assert!(crash_moved_back(&c, 1, 0).is_none());
    }

    #[test]
    fn shifted_down_keeps_distances_in_units() {
        let c = with_groups(vec![vec![w(130, 2), Op::Flush, w(200, 1)]]);
        let s = shifted_down(&c, 128).unwrap();
        assert_eq!(ops(&s), vec![w(2, 2), Op::Flush, w(72, 1)]);
        let s = shifted_down(&c, 1).unwrap();
        assert_eq!(ops(&s), vec![w(0, 2), Op::Flush, w(70, 1)]);
        assert!(shifted_down(&c, 256).is_none());
    }

    /// Fails iff a write over sector 40 and a later write over sector 41
    /// are both there, in different groups, with a crash after both.
    fn two_writes_then_crash(c: &Case) -> bool {
        let ops: Vec<(usize, Op)> = c
            .workload
            .iter()
            .enumerate()
            .flat_map(|(g, ops)| ops.iter().map(move |op| (g, *op)))
            .collect();
        let covers = |op: &Op, s: u64| {
            matches!(op, Op::Write { .. }) && op.range().is_some_and(|(a, n)| a <= s && s < a + n)
        };
        let a = ops.iter().position(|(_, op)| covers(op, 40));
        let b = ops.iter().rposition(|(_, op)| covers(op, 41));
        let crash = ops.iter().rposition(|(_, op)| matches!(op, Op::Crash));
        match (a, b, crash) {
            (Some(a), Some(b), Some(k)) => a < b && ops[a].0 != ops[b].0 && k > b,
            _ => false,
        }
    }

    #[test]
    fn keeps_both_writes_and_drops_the_rest() {
        let mut groups: Vec<Vec<Op>> = (0..12)
            .map(|g| vec![w(g * 16, 8), w(32 + g, 10), Op::Flush])
            .collect();
        groups[3].push(Op::Crash);
        groups[11].push(Op::Crash);
        let c = with_groups(groups);
        assert!(two_writes_then_crash(&c));
        let s = shrink(&c, two_writes_then_crash);
        assert!(two_writes_then_crash(&s));
        // Two writes and the crash: nothing else is needed (1-minimal).
        assert_eq!(ops(&s).len(), 3, "{:?}", s.workload);
        // The crash moved back as far as it may: into the second write's
        // group, since a group holds its writes and a crash together.
        assert_eq!(s.workload.len(), 2, "{:?}", s.workload);
    }

    /// Fails iff some write covers sector 5 of a cluster other than the
    /// first one: lowering must stop at cluster 1, sector 5 within it.
    #[test]
    fn lowers_offsets_as_far_as_the_failure_allows() {
        let mut c = with_groups(vec![vec![w(7, 1)], vec![Op::Flush]]);
        c.image.create.cluster_size = 64 << 10;
        c.image.create.size = 64 << 20;
        let cluster = cluster_sectors(&c);
        let target = |s: u64| s >= cluster && s % cluster == 5;
        let fails = |c: &Case| {
            c.workload
                .iter()
                .flatten()
                .filter(|op| matches!(op, Op::Write { .. }))
                .filter_map(|op| op.range())
                .any(|(a, n)| (a..a + n).any(target))
        };
        let mut start = c.clone();
        start.workload = vec![vec![w(37 * cluster + 5, 3)], vec![w(9 * cluster + 1, 1)]];
        assert!(fails(&start), "{:?} {cluster}", start.workload);
        let s = shrink(&start, fails);
        assert_eq!(ops(&s), vec![w(cluster + 5, 1)]);
    }

    #[test]
    fn merges_groups_when_the_failure_allows() {
        let c = with_groups(vec![vec![w(0, 1)], vec![w(8, 1)], vec![w(16, 1)]]);
        // Fails while all three writes are there, in any grouping.
        let s = shrink(&c, |c| {
            c.workload
                .iter()
                .flatten()
                .filter(|op| op.range().is_some())
                .count()
                == 3
        });
        assert_eq!(s.workload.len(), 1, "{:?}", s.workload);
        // Fails only while the first write is alone in its group.
        let s = shrink(&c, |c| c.workload.first() == Some(&vec![w(0, 1)]));
        assert_eq!(s.workload, vec![vec![w(0, 1)]]);
    }

    /// Fails iff writes A and B are there, and C too unless the seed is
    /// odd: C can go only under another seed.
    #[test]
    fn reseeding_drops_what_the_seed_needed() {
        let mut c = with_groups(vec![vec![w(0, 1)], vec![w(8, 1)], vec![w(16, 1)]]);
        c.seed = 10;
        let has = |c: &Case, s: u64| ops(c).contains(&w(s, 1));
        let fails = |c: &Case| has(c, 0) && has(c, 8) && (has(c, 16) || c.seed % 2 == 1);
        let s = shrink(&c, fails);
        assert_eq!(ops(&s), vec![w(0, 1), w(8, 1)]);
        assert_eq!(s.seed, 11, "the first seed after the case's own");
        // Without reseeding, C stays and so does the seed.
        let options = ShrinkOptions {
            reseeds: 0,
            ..ShrinkOptions::default()
        };
        let s = shrink_with(&c, &options, fails, |_| {}).unwrap().case;
        assert_eq!(ops(&s), vec![w(0, 1), w(8, 1), w(16, 1)]);
        assert_eq!(s.seed, 10);
    }
}
