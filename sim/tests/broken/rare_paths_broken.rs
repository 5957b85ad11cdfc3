//! Every broken variant is caught by the default campaign within 200
//! seeds: for each, the first failing seed of `qcsim campaign --seeds
//! 0..200 --broken VARIANT` (default profile, switches as generated) still
//! fails with the variant and passes without it. Should generation stop
//! reaching a variant's path (the refcount table growth, a dirty L2
//! eviction), its seed passes and this fails: rerun the campaign and
//! update the seed only if the new first failing seed is still below 200.
//!
//! Measured on the generation that shapes a quarter of the cases to reach
//! the rare paths (small clusters, wide refcounts, small caches, a fill
//! past the first refcount table): failing seeds of 200, first failing
//! seed: LinkBeforeData 81 (4), SkipRefcountFlush 6 (14), DropPartialCow 73
//! (4), ReuseBeforeDurable 3 (85), DoubleAlloc 95 (4),
//! GrowthForgetsNewBlocks 22 (1), EvictWithoutFlush 5 (50). With latency
//! outliers, the schedule modes and the hazard cycles (branch
//! `w16-sched`): LinkBeforeData 89 (1), SkipRefcountFlush 9 (14),
//! DropPartialCow 78 (9), ReuseBeforeDurable 18 (3), DoubleAlloc 96 (4),
//! GrowthForgetsNewBlocks 19 (1), EvictWithoutFlush 13 (15).

use engine::options::Broken;
use sim::campaign::{case_for, run_guarded, CampaignPlan, SwitchPlan};
use sim::workload::Profile;

/// Each variant and the first seed of 0..200 that catches it.
const FIRST_FAILING: [(Broken, u64); 7] = [
    (Broken::LinkBeforeData, 1),
    (Broken::SkipRefcountFlush, 14),
    (Broken::DropPartialCow, 9),
    (Broken::ReuseBeforeDurable, 3),
    (Broken::DoubleAlloc, 4),
    (Broken::GrowthForgetsNewBlocks, 1),
    (Broken::EvictWithoutFlush, 15),
];

/// The default campaign's plan, with `broken`.
fn plan(broken: Option<Broken>) -> CampaignPlan {
    CampaignPlan {
        seeds: 0..200,
        profile: Profile::Mixed,
        switches: SwitchPlan::AsGenerated,
        shard: (0, 1),
        jobs: 1,
        harsh: false,
        broken,
    }
}

#[test]
fn every_variant_has_a_table_entry() {
    for b in Broken::ALL {
        assert!(
            FIRST_FAILING.iter().any(|(v, _)| *v == b),
            "{b:?} has no seed that catches it"
        );
        assert_eq!(b.name().parse::<Broken>(), Ok(b));
    }
}

#[test]
fn each_variant_is_caught_by_its_first_failing_seed_of_200() {
    for (broken, seed) in FIRST_FAILING {
        assert!(seed < 200);
        let case = case_for(&plan(Some(broken)), seed);
        assert_eq!(case.engine.broken, Some(broken));
        let report = run_guarded(&case);
        assert!(
            !report.passed(),
            "{broken:?}: seed {seed} passes with the variant: has generation stopped reaching its path? rare paths: {}",
            report.stats.rare_paths
        );
        assert!(
            !matches!(report.failures[0], sim::runner::Failure::Panic { .. }),
            "{broken:?}: seed {seed} panicked: {}",
            report.failures[0]
        );
        let correct = case_for(&plan(None), seed);
        assert_eq!(correct.engine.broken, None);
        let control = run_guarded(&correct);
        assert!(
            control.passed(),
            "{broken:?}: seed {seed} fails without the variant too: {}",
            control.failures[0]
        );
    }
}

/// The growth variant is caught because generation reaches the growth:
/// its seed's correct run grows the refcount table.
#[test]
fn the_growth_variants_seed_grows_the_refcount_table() {
    let (_, seed) = FIRST_FAILING
        .iter()
        .find(|(b, _)| *b == Broken::GrowthForgetsNewBlocks)
        .copied()
        .unwrap();
    let report = run_guarded(&case_for(&plan(None), seed));
    assert!(
        report.stats.rare_paths.reftable_growths > 0,
        "{}",
        report.stats.rare_paths
    );
    let (_, seed) = FIRST_FAILING
        .iter()
        .find(|(b, _)| *b == Broken::EvictWithoutFlush)
        .copied()
        .unwrap();
    let report = run_guarded(&case_for(&plan(None), seed));
    assert!(
        report.stats.rare_paths.l2_dirty_evictions > 0,
        "{}",
        report.stats.rare_paths
    );
}
