//! The workload passes: which operations and groups a failing case keeps,
//! where its crashes fall, how long its requests are and where they lie.
//!
//! Each pass is a method of the shrinker that builds candidates with the
//! pure functions below and keeps those under which the case still fails;
//! the functions are unit-tested on their own, and the passes under
//! synthetic predicates (no engine runs).

use engine::dev::IoOp;

use super::Shrinker;
use crate::case::{Case, Op, MAX_GROUP_OPS, MAX_OP_SECTORS};
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

    /// FUA flags off: all at once, then each one. A failure that needs a
    /// FUA request keeps it, and the case says so; one that does not reads
    /// as a plain write.
    pub(super) fn plain_requests(&mut self) {
        let all = without_fua(&self.best, None);
        if self.try_case("plain_requests", all) {
            return;
        }
        for (g, i) in positions(&self.best) {
            if self.best.workload[g][i].is_fua() {
                let c = without_fua(&self.best, Some((g, i)));
                self.try_case("plain_requests", c);
            }
        }
    }

    /// Runs of whole groups, halving the run length (ddmin).
    pub(super) fn drop_groups(&mut self) {
        self.halving_runs(
            |c| c.workload.len(),
            |s, start, chunk| {
                let mut c = s.best.clone();
                let end = (start + chunk).min(c.workload.len());
                c.workload.drain(start..end);
                s.try_case("drop_groups", c)
            },
        );
    }

    /// Runs of operations across groups, halving the run length down to
    /// one operation at a time, so that no single operation (a flush
    /// included) can go once a round ends.
    pub(super) fn drop_ops(&mut self) {
        self.halving_runs(total_ops, |s, start, chunk| {
            let c = without_ops(&s.best, start, chunk);
            s.try_case("drop_ops", c)
        });
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
        while k < total_ops(&self.best) {
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

    /// Runs of operations removed as `drop_ops` removes them (halving the
    /// run length down to one), with the requests failed by rank on one
    /// disk (`NthRequest::device`, as `pin_faults` leaves them) moved down
    /// by as many ranks as the run held requests of their kind (or one
    /// more), once nothing else shrinks: guest flushes removed before a
    /// pinned flush fault move the fault to a later flush, and the one as
    /// many flushes earlier usually does the same. Which removals keep the
    /// failure is not monotonic (one flush fewer may shift the schedule
    /// where four fewer do not), hence runs of every length.
    pub(super) fn rerank_drop_ops(&mut self) {
        let pinned = |c: &Case| c.disk.faults.error_at.iter().any(|f| f.device.is_some());
        if !pinned(&self.best) {
            return;
        }
        self.halving_runs(total_ops, |s, start, chunk| {
            let removed: Vec<Op> = s
                .best
                .workload
                .iter()
                .flatten()
                .skip(start)
                .take(chunk)
                .copied()
                .collect();
            let base = without_ops(&s.best, start, chunk);
            (0..=1).any(|extra| {
                let mut c = base.clone();
                let mut moved = false;
                for f in &mut c.disk.faults.error_at {
                    let count = removed
                        .iter()
                        .filter(|op| issued_kind(op) == Some(f.op))
                        .count() as u64;
                    let d = count + extra;
                    if f.device.is_some() && count > 0 && f.n > d {
                        f.n -= d;
                        moved = true;
                    }
                }
                moved && s.try_case("rerank_drop_ops", c)
            })
        });
    }

    /// Each group's requests of one kind thinned to one of them (each in
    /// turn), the rest of the group kept, with pinned rank faults of that
    /// kind moved down by the number removed (or one more), once nothing
    /// else shrinks: the complement of `drop_ops`' runs, which never
    /// remove the flushes on both sides of a write at once.
    pub(super) fn thin_groups(&mut self) {
        let mut g = 0;
        while g < self.best.workload.len() {
            let kinds: Vec<IoOp> = {
                let mut k: Vec<IoOp> = self.best.workload[g]
                    .iter()
                    .filter_map(issued_kind)
                    .collect();
                k.sort_by_key(|op| op.index());
                k.dedup();
                k
            };
            for kind in kinds {
                let of_kind: Vec<usize> = (0..self.best.workload[g].len())
                    .filter(|&i| issued_kind(&self.best.workload[g][i]) == Some(kind))
                    .collect();
                if of_kind.len() < 2 {
                    continue;
                }
                let removed = of_kind.len() as u64 - 1;
                let pinned = self
                    .best
                    .disk
                    .faults
                    .error_at
                    .iter()
                    .any(|f| f.device.is_some() && f.op == kind);
                let extras: &[u64] = if pinned { &[0, 1] } else { &[0] };
                'keep: for &keep in &of_kind {
                    for &extra in extras {
                        let mut c = self.best.clone();
                        let ops = std::mem::take(&mut c.workload[g]);
                        c.workload[g] = ops
                            .into_iter()
                            .enumerate()
                            .filter(|&(i, op)| i == keep || issued_kind(&op) != Some(kind))
                            .map(|(_, op)| op)
                            .collect();
                        for f in &mut c.disk.faults.error_at {
                            if f.device.is_some() && f.op == kind {
                                f.n = f.n.saturating_sub(removed + extra).max(1);
                            }
                        }
                        if self.try_case("thin_groups", c) {
                            break 'keep;
                        }
                    }
                }
            }
            g += 1;
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

    /// Operations of one kind in one group as one operation spanning them
    /// (fewer operations, more sectors: `CaseSize` counts operations
    /// first). A failure that needs many clusters allocated, a refcount
    /// block filled or a refcount table grown, needs the allocations and
    /// not the requests that made them; at small cluster sizes it takes
    /// dozens of short writes, which no removal of one can shrink. Per
    /// group: every run of requests that fits one request (nearest in
    /// sector order, at most `MAX_OP_SECTORS`) merged at once, else each
    /// request with its nearest neighbour of the same kind.
    pub(super) fn coalesce_ops(&mut self) {
        let mut g = 0;
        while g < self.best.workload.len() {
            if let Some(c) = coalesced_group(&self.best, g) {
                self.try_case("coalesce_ops", c);
            }
            let mut i = 0;
            while g < self.best.workload.len() && i < self.best.workload[g].len() {
                let c = coalesced_pair(&self.best, g, i);
                if !c.is_some_and(|c| self.try_case("coalesce_ops", c)) {
                    i += 1;
                }
            }
            g += 1;
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

    /// Each request's end, then its start, trimmed by a quarter of its
    /// length, an eighth, ... a sector, while it still fails: a request
    /// coalesced from many, or one that must reach a cluster boundary,
    /// needs most of its length, not all, and no half of it will do. Many
    /// runs per request, so only in a round where nothing else shrank.
    pub(super) fn trim_ops(&mut self) {
        for (g, i) in positions(&self.best) {
            while let Some((sector, n)) = self.best.workload[g][i].range() {
                let trimmed = [false, true].into_iter().any(|from_start| {
                    let mut d = n / 4;
                    while d >= 1 {
                        let s = if from_start { sector + d } else { sector };
                        let mut c = self.best.clone();
                        c.workload[g][i] = at_sector(with_length(c.workload[g][i], n - d), s);
                        if self.try_case("trim_ops", c) {
                            return true;
                        }
                        d /= 2;
                    }
                    false
                });
                if !trimmed {
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

/// `case` with the FUA flag off on the operation at `at`, or on every
/// operation when None.
pub(super) fn without_fua(case: &Case, at: Option<(usize, usize)>) -> Case {
    let mut c = case.clone();
    for (g, ops) in c.workload.iter_mut().enumerate() {
        for (i, op) in ops.iter_mut().enumerate() {
            if at.is_none_or(|p| p == (g, i)) {
                *op = op.with_fua(false);
            }
        }
    }
    c
}

/// Where the crash operations are, as (group, index).
pub(super) fn crash_positions(case: &Case) -> Vec<(usize, usize)> {
    positions(case)
        .into_iter()
        .filter(|&(g, i)| matches!(case.workload[g][i], Op::Crash))
        .collect()
}

/// How many operations `case` holds, across its groups.
fn total_ops(case: &Case) -> usize {
    case.workload.iter().map(Vec::len).sum()
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
pub fn merged(case: &Case, g: usize) -> Option<Case> {
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
pub fn crash_moved_back(case: &Case, g: usize, i: usize) -> Option<Case> {
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
pub fn shifted_down(case: &Case, unit: u64) -> Option<Case> {
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
pub fn cluster_sectors(case: &Case) -> u64 {
    case.image.create.cluster_size / oracle::data::SECTOR_SIZE as u64
}

/// Sectors one L2 table maps.
fn l2_reach_sectors(case: &Case) -> u64 {
    let c = &case.image.create;
    let entry = if c.extended_l2 { 16 } else { 8 };
    c.cluster_size / entry * cluster_sectors(case)
}

/// The kind of device request a guest operation issues on the disk its
/// data lives on (a write of zeroes may fall back to a write: the rank of
/// zeroes is the one counted).
fn issued_kind(op: &Op) -> Option<IoOp> {
    match op {
        Op::Write { .. } => Some(IoOp::Write),
        Op::Read { .. } | Op::BackgroundRead { .. } => Some(IoOp::Read),
        Op::WriteZeroes { .. } => Some(IoOp::WriteZeroes),
        Op::Discard { .. } => Some(IoOp::Discard),
        Op::WriteCompressed { .. } => Some(IoOp::Write),
        Op::Flush => Some(IoOp::Flush),
        // A snapshot operation, an amend or a resize issues many requests
        // of every kind.
        Op::Crash
        | Op::SnapshotCreate
        | Op::SnapshotApply { .. }
        | Op::SnapshotDelete { .. }
        | Op::Amend { .. }
        | Op::Resize { .. } => None,
    }
}

/// Whether `a` and `b` are requests one request of their kind can stand
/// for: the same kind (and the same unmap flag for zeroes, the same hold
/// for background reads, the same FUA flag for writes).
fn same_kind(a: &Op, b: &Op) -> bool {
    if a.is_fua() != b.is_fua() {
        return false;
    }
    match (a, b) {
        (Op::Write { .. }, Op::Write { .. })
        | (Op::Read { .. }, Op::Read { .. })
        | (Op::Discard { .. }, Op::Discard { .. }) => true,
        (Op::WriteZeroes { unmap: x, .. }, Op::WriteZeroes { unmap: y, .. }) => x == y,
        (Op::BackgroundRead { hold: x, .. }, Op::BackgroundRead { hold: y, .. }) => x == y,
        _ => false,
    }
}

/// The request of `op`'s kind spanning `a` and `b`'s ranges, if it is no
/// longer than `MAX_OP_SECTORS`.
fn spanning(op: Op, a: (u64, u64), b: (u64, u64)) -> Option<Op> {
    let start = a.0.min(b.0);
    let end = (a.0 + a.1).max(b.0 + b.1);
    (end - start <= MAX_OP_SECTORS).then(|| at_sector(with_length(op, end - start), start))
}

/// `case` with op (g, i) and the request of its kind in group `g` nearest
/// to it in sector order (ties: the later one in the group) as one
/// request in op i's place; None if there is none, or the span is too
/// long.
pub fn coalesced_pair(case: &Case, g: usize, i: usize) -> Option<Case> {
    let ops = &case.workload[g];
    let a = ops[i].range()?;
    let (j, b) = ops
        .iter()
        .enumerate()
        .filter(|&(j, op)| j != i && same_kind(&ops[i], op))
        .filter_map(|(j, op)| op.range().map(|r| (j, r)))
        .min_by_key(|&(j, (s, n))| {
            let gap = if s >= a.0 + a.1 {
                s - (a.0 + a.1)
            } else {
                a.0.saturating_sub(s + n)
            };
            (gap, std::cmp::Reverse(j))
        })?;
    let op = spanning(ops[i], a, b)?;
    let mut c = case.clone();
    c.workload[g][i] = op;
    c.workload[g].remove(j);
    Some(c)
}

/// `case` with each kind's requests in group `g`, taken in sector order,
/// merged into as few requests as fit `MAX_OP_SECTORS` each (a run takes
/// the place of its first request in the group); None if no two merge.
pub fn coalesced_group(case: &Case, g: usize) -> Option<Case> {
    let ops = &case.workload[g];
    let mut out: Vec<Option<Op>> = ops.iter().copied().map(Some).collect();
    let mut placed = vec![false; ops.len()];
    let mut merged_any = false;
    for i in 0..ops.len() {
        if placed[i] || ops[i].range().is_none() {
            continue;
        }
        // This kind's requests not yet placed, in sector order.
        let mut kind: Vec<(u64, usize)> = (i..ops.len())
            .filter(|&j| !placed[j] && same_kind(&ops[i], &ops[j]))
            .filter_map(|j| ops[j].range().map(|(s, _)| (s, j)))
            .collect();
        kind.sort_unstable();
        // Runs of them, each as long as one request may be.
        let mut runs: Vec<(Op, Vec<usize>)> = Vec::new();
        for (_, j) in kind {
            placed[j] = true;
            let r = ops[j].range().expect("a request");
            let grown = runs
                .last()
                .and_then(|(op, _)| spanning(*op, op.range().expect("a request"), r));
            match (grown, runs.last_mut()) {
                (Some(op), Some(run)) => {
                    run.0 = op;
                    run.1.push(j);
                }
                _ => runs.push((ops[j], vec![j])),
            }
        }
        for (op, members) in runs.into_iter().filter(|(_, m)| m.len() > 1) {
            merged_any = true;
            let first = *members.iter().min().expect("two members");
            for k in members {
                out[k] = None;
            }
            out[first] = Some(op);
        }
    }
    if !merged_any {
        return None;
    }
    let mut c = case.clone();
    c.workload[g] = out.into_iter().flatten().collect();
    Some(c)
}

/// `op` covering `n` sectors from the same first sector. A compressed
/// write is valid only as one whole cluster: `Case::validate` refuses the
/// candidate otherwise.
pub(super) fn with_length(op: Op, n: u64) -> Op {
    op.range()
        .map_or(op, |(sector, _)| op.with_range(sector, n))
}

/// `op` with the same length from `sector`.
pub(super) fn at_sector(op: Op, sector: u64) -> Op {
    op.range().map_or(op, |(_, n)| op.with_range(sector, n))
}
