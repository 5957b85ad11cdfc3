//! The unit tests of `sim::shrink::workload`.

use engine::dev::IoOp;
use sim::case::{Case, Op, MAX_OP_SECTORS};
use sim::shrink::workload::*;
use sim::shrink::{shrink_with, ShrinkOptions};

use super::testcase::{ops, w, with_groups};

fn shrink(case: &Case, fails: impl FnMut(&Case) -> bool) -> Case {
    shrink_with(case, &ShrinkOptions::default(), fails, |_| {})
        .expect("the case fails")
        .case
}

#[test]
fn coalescing_spans_requests_of_one_kind_in_a_group() {
    let z = |sector, sectors| Op::WriteZeroes {
        sector,
        sectors,
        unmap: false,
        fua: false,
    };
    let c = with_groups(vec![
        vec![w(40, 2), Op::Flush, z(0, 1), w(8, 1), w(20, 4)],
        vec![w(100, 1)],
    ]);
    // The whole group: the writes as one in the first write's place,
    // the zeroes (another kind) and the flush untouched, the next
    // group too.
    let m = coalesced_group(&c, 0).unwrap();
    assert_eq!(
        m.workload,
        vec![vec![w(8, 34), Op::Flush, z(0, 1)], vec![w(100, 1)]]
    );
    assert!(
        coalesced_group(&c, 1).is_none(),
        "one request: nothing to merge"
    );
    // A pair: the write at 40 and its nearest neighbour, at 20.
    let p = coalesced_pair(&c, 0, 0).unwrap();
    assert_eq!(p.workload[0], vec![w(20, 22), Op::Flush, z(0, 1), w(8, 1)]);
    assert!(coalesced_pair(&c, 0, 2).is_none(), "no other zeroes");
    // Runs never grow past the longest request a case may hold.
    let far = with_groups(vec![vec![w(0, 1), w(MAX_OP_SECTORS + 1, 1), w(1, 1)]]);
    let m = coalesced_group(&far, 0).unwrap();
    assert_eq!(m.workload, vec![vec![w(0, 2), w(MAX_OP_SECTORS + 1, 1)]]);
    assert!(coalesced_pair(&far, 0, 1).is_none());
}

/// Fails iff writes cover at least 64 sectors in all: no single write
/// can go, but the writes can become one.
#[test]
fn coalescing_shrinks_what_needs_many_sectors_written() {
    let groups = vec![(0..16).map(|k| w(k * 8, 4)).collect::<Vec<_>>()];
    let c = with_groups(groups);
    let written = |c: &Case| {
        c.workload
            .iter()
            .flatten()
            .filter(|op| matches!(op, Op::Write { .. }))
            .filter_map(|op| op.range())
            .map(|(_, n)| n)
            .sum::<u64>()
            >= 64
    };
    assert!(written(&c));
    let s = shrink(&c, written);
    assert_eq!(ops(&s), vec![w(0, 64)]);
}

/// Fails iff a flush fault pinned on disk 0 falls on the last flush
/// (its rank is the number of flushes) and a write is there: removing
/// any flush loses it unless the fault moves down a rank with it.
#[test]
fn reranking_moves_a_pinned_fault_with_the_flush_removed() {
    use sim::disk::NthRequest;
    let mut c = with_groups(vec![vec![Op::Flush, Op::Flush, Op::Flush], vec![w(0, 1)]]);
    c.disk.faults.enabled = true;
    c.disk.faults.error_at = vec![NthRequest {
        op: IoOp::Flush,
        n: 3,
        device: Some(0),
    }];
    let fails = |c: &Case| {
        let flushes = ops(c).iter().filter(|op| matches!(op, Op::Flush)).count() as u64;
        let fault = c.disk.faults.error_at.first().map(|f| f.n);
        c.disk.faults.enabled && fault == Some(flushes) && ops(c).contains(&w(0, 1))
    };
    assert!(fails(&c));
    let s = shrink(&c, fails);
    assert_eq!(ops(&s), vec![Op::Flush, w(0, 1)]);
    assert_eq!(s.disk.faults.error_at[0].n, 1);
    // A fault on every disk (no device) is not the shrinker's to move.
    c.disk.faults.error_at[0].device = None;
    let s = shrink(&c, fails);
    assert_eq!(ops(&s).len(), 4, "{:?}", s.workload);
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
