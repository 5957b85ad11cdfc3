//! The shrinker's mechanics under synthetic predicates (no engine runs
//! needed to judge a candidate): it reaches a minimal case, stays within
//! its run budget, is deterministic, and refuses a case that passes.

use sim::case::{Case, Op};
use sim::shrink::{shrink_with, CaseSize, ShrinkError, ShrinkOptions};
use sim::workload::Profile;

fn big_case() -> Case {
    let mut c = Case::generate(11, Profile::Random);
    c.disk.faults.enabled = true;
    assert!(
        CaseSize::of(&c).ops > 50,
        "the generated case is big enough to shrink"
    );
    c
}

/// A data write in one group and a flush in a later group.
fn write_then_flush(c: &Case) -> bool {
    let first_write = c
        .workload
        .iter()
        .position(|g| g.iter().any(|op| matches!(op, Op::Write { .. })));
    first_write.is_some_and(|w| {
        c.workload[w + 1..]
            .iter()
            .any(|g| g.iter().any(|op| matches!(op, Op::Flush)))
    })
}

#[test]
fn shrinks_to_a_minimal_case() {
    let case = big_case();
    assert!(write_then_flush(&case));
    let mut seen = Vec::new();
    let shrunk = shrink_with(&case, &ShrinkOptions::default(), write_then_flush, |p| {
        seen.push(p.size)
    })
    .expect("the case satisfies the predicate");
    let c = &shrunk.case;
    assert!(write_then_flush(c));
    assert!(c.validate().is_ok());
    assert!(!shrunk.budget_exhausted);
    // One write of one sector, one flush, each in its own group.
    assert_eq!(c.workload.len(), 2, "{:?}", c.workload);
    assert!(matches!(c.workload[0][..], [Op::Write { sectors: 1, .. }]));
    assert_eq!(c.workload[1], vec![Op::Flush]);
    assert!(!c.disk.faults.enabled, "faults were not needed");
    assert!(c.image.create.size < case.image.create.size);
    // Progress came after each accepted step, each smaller than the last.
    assert_eq!(seen.len() as u64, shrunk.steps);
    assert!(seen.windows(2).all(|w| w[1] <= w[0]), "{seen:?}");
    assert_eq!(*seen.last().unwrap(), CaseSize::of(c));
}

#[test]
fn shrinking_is_deterministic() {
    let case = big_case();
    let a = shrink_with(&case, &ShrinkOptions::default(), write_then_flush, |_| {}).unwrap();
    let b = shrink_with(&case, &ShrinkOptions::default(), write_then_flush, |_| {}).unwrap();
    assert_eq!(a.case, b.case);
    assert_eq!((a.runs, a.steps), (b.runs, b.steps));
}

#[test]
fn keeps_what_the_failure_needs() {
    // Needs three writes and a crash: ddmin must keep all four.
    let needs = |c: &Case| {
        let ops: Vec<&Op> = c.workload.iter().flatten().collect();
        ops.iter()
            .filter(|op| matches!(op, Op::Write { .. }))
            .count()
            >= 3
            && ops.iter().any(|op| matches!(op, Op::Crash))
    };
    let case = big_case();
    assert!(needs(&case));
    let shrunk = shrink_with(&case, &ShrinkOptions::default(), needs, |_| {}).unwrap();
    let ops: Vec<&Op> = shrunk.case.workload.iter().flatten().collect();
    assert_eq!(ops.len(), 4, "{ops:?}");
    assert!(needs(&shrunk.case));
    assert!(ops.iter().all(|op| op.range().is_none_or(|(_, n)| n == 1)));
}

#[test]
fn stops_at_the_run_budget() {
    let case = big_case();
    let mut calls = 0u64;
    let shrunk = shrink_with(
        &case,
        &ShrinkOptions {
            max_runs: 5,
            ..ShrinkOptions::default()
        },
        |c| {
            calls += 1;
            write_then_flush(c)
        },
        |_| {},
    )
    .unwrap();
    assert_eq!(calls, 5);
    assert_eq!(shrunk.runs, 5);
    assert!(shrunk.budget_exhausted);
    assert!(write_then_flush(&shrunk.case));
}

#[test]
fn refuses_a_case_that_does_not_fail() {
    let case = big_case();
    let r = shrink_with(&case, &ShrinkOptions::default(), |_| false, |_| {});
    assert!(matches!(r, Err(ShrinkError::Passes)));
}

#[test]
fn refuses_a_passing_case_under_the_runner() {
    let mut case = Case::generate(3, Profile::Random);
    case.disk.faults.enabled = false;
    case.workload = vec![
        vec![Op::Write {
            sector: 0,
            sectors: 8,
            fua: false,
        }],
        vec![Op::Flush],
    ];
    let r = sim::shrink::shrink_failing(&case, &ShrinkOptions::default(), |_| {});
    assert!(matches!(r, Err(ShrinkError::Passes)));
}
