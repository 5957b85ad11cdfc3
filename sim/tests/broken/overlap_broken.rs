//! The simulated disk's overlap check (`sim::disk::Overlap`) catches a
//! broken order where it happens: with the variants below, the engine
//! issues a write over host bytes another of its writes still has in
//! flight, and the case fails naming both requests, whether or not a
//! crash state then shows the damage. The seeds are the first of
//! `qcsim campaign --seeds 0..500 --broken VARIANT` whose failures
//! include an overlap.

use engine::options::Broken;
use sim::campaign::{case_for, run_guarded, CampaignPlan};
use sim::runner::Failure;

fn plan(broken: Option<Broken>) -> CampaignPlan {
    CampaignPlan {
        broken,
        rule_checks: false,
        ..CampaignPlan::new(0..500)
    }
}

#[test]
fn overlapping_writes_the_engine_caused_fail_the_case() {
    // A link that does not wait for the cluster's other writers lets a
    // second allocation's COW run over the first one's data; two
    // allocations of one host cluster write it twice at once.
    for (broken, seed) in [(Broken::CommitIgnoresWriters, 3), (Broken::DoubleAlloc, 7)] {
        let report = run_guarded(&case_for(&plan(Some(broken)), seed));
        let overlap = report
            .failures
            .iter()
            .find(|f| matches!(f, Failure::Overlap { .. }));
        let Some(Failure::Overlap {
            disk,
            count,
            overlaps,
        }) = overlap
        else {
            panic!(
                "{broken:?}: seed {seed} reports no overlap: {:?}",
                report
                    .failures
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            );
        };
        assert!(*count > 0 && !overlaps.is_empty(), "{broken:?}: {disk}");
        assert!(overlaps[0].contains("was in flight"), "{}", overlaps[0]);
        let control = run_guarded(&case_for(&plan(None), seed));
        assert!(
            control.passed(),
            "{broken:?}: seed {seed} fails without the variant: {}",
            control.failures[0]
        );
    }
}
