//! qcow2-rs in process (`drivers::qcow2rs`): a handful of generated cases
//! run twice to the same trace hash, and what it lacks skipped and counted
//! exactly: every operation of a kind it does not do counted, none of them
//! sent, and cases whose image it cannot open skipped whole with a reason.

use drivers::qcow2rs::Qcow2Rs;
use sim::campaign::{run_campaign_on, run_guarded_on, CampaignPlan};
use sim::case::{Case, Op};
use sim::driver::DriverKind;

/// The seeds run: enough to meet every skip reason but the backing file's
/// and every kind of skipped operation, few enough for a debug build.
const SEEDS: std::ops::Range<u64> = 0..24;

fn plan() -> CampaignPlan {
    CampaignPlan {
        jobs: 2,
        ..CampaignPlan::new(SEEDS)
    }
}

/// How many operations of each kind qcow2-rs lacks `case` holds, in
/// `RunCounts::driver_skips` order and names.
fn lacked(case: &Case) -> Vec<(&'static str, u64)> {
    let ops: Vec<&Op> = case.workload.iter().flatten().collect();
    let count = |f: fn(&Op) -> bool| ops.iter().filter(|op| f(op)).count() as u64;
    [
        (
            "write_zeroes",
            count(|o| matches!(o, Op::WriteZeroes { .. })),
        ),
        ("discard", count(|o| matches!(o, Op::Discard { .. }))),
        (
            "compressed write",
            count(|o| matches!(o, Op::WriteCompressed { .. })),
        ),
        ("snapshot operation", count(Op::is_snapshot)),
        ("amend", count(|o| matches!(o, Op::Amend { .. }))),
        ("resize", count(|o| matches!(o, Op::Resize { .. }))),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .collect()
}

#[test]
fn a_campaign_on_qcow2_rs_replays_and_counts_what_it_skips() {
    let kind = Qcow2Rs::FITTED;
    let first = run_campaign_on(&plan(), &kind, &|| false, &|_, _| {});
    let again = run_campaign_on(&plan(), &kind, &|| false, &|_, _| {});
    assert_eq!(first.cases, SEEDS.end - SEEDS.start);
    assert_eq!(
        first.trace_hash, again.trace_hash,
        "two campaigns over the same seeds went differently"
    );
    assert_eq!(first.case_hashes, again.case_hashes);
    assert!(
        first.failures.iter().all(|f| f.deterministic),
        "a failing case replayed differently"
    );
    // Skipped cases are neither passed nor failed, and each has a reason.
    assert_eq!(first.passed + first.failed + first.skipped, first.cases);
    assert!(first.skipped > 0, "no case was skipped");
    assert_eq!(first.skipped_by_reason.values().sum::<u64>(), first.skipped);
    for why in first.skipped_by_reason.keys() {
        assert!(
            why.contains("external data file")
                || why.contains("extended L2")
                || why.contains("backing file")
                || why.contains("zstd")
                || why.contains("smaller than 4 KiB"),
            "an unexpected reason: {why}"
        );
    }
    assert!(first.passed > 0, "no case passed on qcow2-rs");
    let t = &first.totals.counts;
    assert!(t.driver_skipped_write_zeroes > 0 && t.driver_skipped_discards > 0);
    assert_eq!(
        t.driver_skipped_other, 0,
        "it does reads, writes and flushes"
    );
}

#[test]
fn every_operation_qcow2_rs_lacks_is_skipped_and_counted_by_kind() {
    let kind = Qcow2Rs::FITTED;
    let (mut ran, mut skipped) = (0, 0);
    for seed in SEEDS {
        let case = sim::campaign::case_for(&plan(), seed);
        let report = run_guarded_on(&case, &kind);
        if let Some(why) = &report.skipped {
            assert_eq!(kind.refuses(&case.image).as_ref(), Some(why));
            assert_eq!(
                report.stats.counts.guest_ops, 0,
                "seed {seed}: skipped, yet ran"
            );
            skipped += 1;
            continue;
        }
        if !report.passed() {
            // A failure stops the run before its last groups are spawned:
            // their operations are neither sent nor counted.
            continue;
        }
        ran += 1;
        assert_eq!(report.driver_skips(), lacked(&case), "seed {seed}");
        // The rest were sent (no resize is, so none is past an end): those
        // a crash did not cut short ended, and were counted.
        let sent = case
            .workload
            .iter()
            .flatten()
            .filter(|op| !matches!(op, Op::Crash) && kind.does(op))
            .count() as u64;
        let ended = report.stats.counts.guest_ops;
        assert!(ended <= sent, "seed {seed}: {ended} ended of {sent} sent");
        if !case
            .workload
            .iter()
            .flatten()
            .any(|op| matches!(op, Op::Crash))
        {
            assert_eq!(ended, sent, "seed {seed}");
        }
    }
    assert!(
        ran >= 3 && skipped >= 3,
        "{ran} cases checked, {skipped} skipped"
    );
}

#[test]
fn qcow2_rs_refuses_what_it_cannot_open_and_the_engine_refuses_nothing() {
    let mut case = Case::generate(0, sim::workload::Profile::Random);
    case.image.create.extended_l2 = true;
    assert!(Qcow2Rs::FITTED
        .refuses(&case.image)
        .is_some_and(|w| w.contains("extended L2")));
    assert_eq!(sim::driver::EngineDriver.refuses(&case.image), None);
    assert!(!Qcow2Rs::FITTED.does(&Op::Discard {
        sector: 0,
        sectors: 1,
        fua: false
    }));
    assert!(Qcow2Rs::FITTED.does(&Op::Flush));
}
