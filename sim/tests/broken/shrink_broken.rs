//! The shrinker on a real failure: the engine variant that drops the COW of
//! a partial cluster (`Broken::DropPartialCow`) loses backing data; the
//! shrunk case is much smaller and still fails the same way.

use engine::options::Broken;
use sim::campaign::run_guarded;
use sim::case::Case;
use sim::shrink::{shrink_failing, CaseSize, FailureKind, ShrinkOptions};
use sim::workload::Profile;

fn failing_case() -> Case {
    (0..40)
        .map(|seed| {
            let mut c = Case::generate(seed, Profile::Backing);
            c.engine.broken = Some(Broken::DropPartialCow);
            c
        })
        .find(|c| !run_guarded(c).passed())
        .expect("DropPartialCow fails some backing case among 40 seeds")
}

#[test]
fn shrinks_a_drop_partial_cow_failure() {
    let case = failing_case();
    let kind = FailureKind::of(&run_guarded(&case).failures[0]);
    let (shrunk, shrunk_kind) =
        shrink_failing(&case, &ShrinkOptions { max_runs: 400 }, |_| {}).expect("the case fails");
    assert_eq!(kind, shrunk_kind);
    let before = CaseSize::of(&case);
    let after = CaseSize::of(&shrunk.case);
    assert!(after.ops < before.ops, "{before} -> {after}");
    assert!(after.ops <= 10, "{before} -> {after}");
    // Still fails the same way, and replays identically from its JSON.
    let again = Case::from_json(&shrunk.case.to_json()).expect("the shrunk case parses");
    assert_eq!(again, shrunk.case);
    let report = run_guarded(&again);
    assert!(kind.in_report(&report), "{:?}", report.failures);
    assert_eq!(report.trace_hash, run_guarded(&shrunk.case).trace_hash);
    // Without the broken switch the shrunk case passes: the failure is the
    // bug's, not the shrinker's.
    let mut fixed = shrunk.case.clone();
    fixed.engine.broken = None;
    assert!(run_guarded(&fixed).passed());
}
