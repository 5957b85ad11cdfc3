//! Every guard of the engine (`engine::guards`) has a deliberately broken
//! variant, and the default campaign catches it: for each variant, the
//! first failing seed of `qcsim campaign --seeds 0..500 --broken VARIANT`
//! (default profile, switches as generated) still fails with the variant,
//! passes without it, and its correct run makes the broken guard's
//! condition arise. Should generation stop reaching a guard (a refcount
//! table growth, a dirty L2 eviction, a free held back by in-flight I/O:
//! only latency outliers make a request live that long),
//! its seed passes and this fails: rerun the campaign and update the seed
//! only if the new first failing seed is still below 500.
//!
//! The two refcount table guards are caught by crashes armed at them
//! (`CrashOptions::at_guards`), the wait for in-flight I/O before a free
//! by a background read held across the free (`Op::BackgroundRead`): tests
//! below check that their seeds fail that way. A crash at a flush that
//! reaches the first of them is also pinned by a saved case.
//!
//! The figures (failing seeds of 500, first failing seed) are in
//! docs/guards.md's guard table.

use engine::options::Broken;
use engine::Guard;
use sim::campaign::{case_for, run_guarded, CampaignPlan};
use sim::case::{Case, Op};
use sim::runner::{enumerate_crash_states_at, CrashAt, EnumerateOptions, Granularity};

/// Each variant and the first seed of 0..500 that catches it.
const FIRST_FAILING: [(Broken, u64); 30] = [
    (Broken::LinkBeforeData, 4),
    (Broken::SkipDataFlushBeforeL2, 49),
    (Broken::SkipRefcountFlush, 1),
    (Broken::SkipReftableFlush, 11),
    (Broken::SkipL2Flush, 21),
    (Broken::FlushSkipsWhenClean, 0),
    (Broken::ReuseBeforeDurable, 11),
    (Broken::FreeIgnoresInflightIo, 13),
    (Broken::NoDirtyBit, 3),
    (Broken::EvictWithoutFlush, 5),
    (Broken::SkipDataFileFlush, 7),
    (Broken::HeaderBeforeReftable, 1),
    (Broken::GrowthForgetsNewBlocks, 1),
    (Broken::RefblockForgetsItself, 1),
    (Broken::FreshIgnoresReuse, 37),
    (Broken::DoubleAlloc, 4),
    (Broken::NoCutAtAlloc, 4),
    (Broken::CommitIgnoresWriters, 3),
    (Broken::ReadIgnoresAllocs, 6),
    (Broken::DropPartialCow, 4),
    (Broken::FuaBeforeL2, 2),
    (Broken::FuaWithoutPreflush, 14),
    (Broken::SnapshotTableBeforeRefcounts, 81),
    (Broken::CopiedAfterRefcounts, 63),
    (Broken::ApplyDropsOldFirst, 81),
    (Broken::DeleteDropsBeforeTable, 4),
    (Broken::SpillForgetsFirstReference, 6),
    (Broken::FreeKeepsPackingTail, 36),
    (Broken::RebuildCountsSharedOnce, 1),
    (Broken::RebuildCleansFirst, 26),
];

/// The first failing seed of `b`.
fn seed_of(b: Broken) -> u64 {
    FIRST_FAILING
        .iter()
        .find(|(v, _)| *v == b)
        .map(|(_, s)| *s)
        .expect("every variant has a first failing seed")
}

/// The default campaign's plan, with `broken`.
fn plan(broken: Option<Broken>) -> CampaignPlan {
    CampaignPlan {
        broken,
        rule_checks: false,
        ..CampaignPlan::new(0..500)
    }
}

/// The guard `b` breaks.
fn guard_of(b: Broken) -> Guard {
    Guard::ALL
        .into_iter()
        .find(|g| g.broken() == b)
        .expect("every variant breaks a guard")
}

#[test]
fn every_variant_is_in_the_table_once() {
    for b in Broken::ALL {
        let n = FIRST_FAILING.iter().filter(|(v, _)| *v == b).count();
        assert_eq!(n, 1, "{b:?} must be in the table exactly once");
        assert_eq!(b.name().parse::<Broken>(), Ok(b));
    }
}

#[test]
fn each_variant_is_caught_by_its_first_failing_seed_of_500() {
    for (broken, seed) in FIRST_FAILING {
        assert!(seed < 500);
        let case = case_for(&plan(Some(broken)), seed);
        assert_eq!(case.engine.broken, Some(broken));
        let report = run_guarded(&case);
        assert!(
            !report.passed(),
            "{broken:?}: seed {seed} passes with the variant: has generation stopped reaching its guard? guards: {}",
            report.stats.guards
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
        let guard = guard_of(broken);
        // A dirty rebuild the power cut short (`runner::open_crash`) takes
        // its guard counts with it: the open never returned the image
        // that held them. Every variant acts only once its guard's
        // condition arose, so up to then its run is the correct one, and
        // the condition seen there arose in the correct run too.
        let cut_rebuild = control
            .stats
            .crash_points
            .v3
            .of_op(engine::MetaOp::DirtyRebuild)
            > 0;
        assert!(
            control.stats.guards.get(guard) > 0
                || (cut_rebuild && report.stats.guards.get(guard) > 0),
            "{broken:?}: seed {seed} fails, yet the condition of {} never arose in its correct run",
            guard.name()
        );
    }
}

/// The growth and eviction variants are caught because generation reaches
/// those rare paths: their seeds' correct runs grow the refcount table and
/// evict a dirty L2 table.
#[test]
fn the_rare_path_variants_seeds_reach_their_paths() {
    let report = run_guarded(&case_for(
        &plan(None),
        seed_of(Broken::GrowthForgetsNewBlocks),
    ));
    assert!(
        report.stats.rare_paths.reftable_growths > 0,
        "{}",
        report.stats.rare_paths
    );
    let report = run_guarded(&case_for(&plan(None), seed_of(Broken::EvictWithoutFlush)));
    assert!(
        report.stats.rare_paths.l2_dirty_evictions > 0,
        "{}",
        report.stats.rare_paths
    );
}

/// A flush-ordering bug inside a writeback shows only in a crash at one
/// device flush: with the flush after the refcount table skipped, the
/// second flush of the last group's writeback (after the L2 table, before
/// the L1 entry) has the table and the L2 table pending together, and a
/// state that keeps the L2 table but not the table is corrupt. The case
/// (512-byte clusters, 64-bit refcounts, so refcount blocks are created
/// often; metadata written back after every allocation) was cut from a
/// generated one.
#[test]
fn a_skipped_reftable_flush_is_caught_at_the_writebacks_second_flush() {
    let case =
        Case::from_json(include_str!("cases/skip-reftable-flush.json")).expect("the case parses");
    let opts = EnumerateOptions {
        granularity: Granularity::Auto,
        cap: 256,
    };
    let mut good = case.clone();
    good.engine.broken = None;
    let at = CrashAt::DeviceFlush(2);
    let r = enumerate_crash_states_at(&good, at, &opts, &mut |_| true).unwrap();
    assert!(r.passed(), "{r:#?}");
    assert!(r.checked > 1, "the crash point has pending writes");
    let mut bad = case;
    bad.engine.broken = Some(Broken::SkipReftableFlush);
    bad.engine.rule_checks = false;
    let r = enumerate_crash_states_at(&bad, at, &opts, &mut |_| true).unwrap();
    assert!(!r.failing.is_empty(), "{r:#?}");
}

/// The refcount table variants and the snapshot create's fail at a crash
/// armed at their guard or inside their operation (`at_steps`, at a step
/// drawn for it): without those no crash of their first failing seed
/// lands in their window.
#[test]
fn the_table_and_snapshot_variants_are_caught_at_an_armed_crash() {
    for b in [
        Broken::SkipReftableFlush,
        Broken::HeaderBeforeReftable,
        Broken::SnapshotTableBeforeRefcounts,
    ] {
        let seed = seed_of(b);
        let case = case_for(&plan(Some(b)), seed);
        let report = run_guarded(&case);
        assert!(!report.passed(), "{b:?}: seed {seed} passes");
        let c = report.stats.counts;
        assert!(
            c.crashes_at_guard + c.crashes_at_step > 0,
            "{b:?}: no armed crash"
        );
        let mut unarmed = case.clone();
        unarmed.disk.crash.at_guards.clear();
        unarmed.disk.crash.at_steps = false;
        assert!(
            run_guarded(&unarmed).passed(),
            "{b:?}: seed {seed} fails without the armed crashes too"
        );
    }
}

/// The snapshot create that switches its table before its refcounts is
/// caught on a version 2 image, which has no dirty bit to cover the
/// window, at a crash inside the create.
#[test]
fn the_snapshot_variant_is_caught_on_a_version_2_image_inside_the_create() {
    let b = Broken::SnapshotTableBeforeRefcounts;
    let case = case_for(&plan(Some(b)), seed_of(b));
    assert_eq!(case.image.create.compat, engine::Compat::V2);
    let report = run_guarded(&case);
    assert!(!report.passed());
    assert!(
        report
            .stats
            .crash_points
            .v2
            .of_op(engine::MetaOp::SnapshotCreate)
            > 0,
        "{}",
        report.stats.crash_points.v2
    );
}

/// The free that ignores in-flight I/O is caught through a background read
/// of the freed cluster that a disk held long.
#[test]
fn the_free_ignoring_inflight_io_is_caught_through_a_background_read() {
    let b = Broken::FreeIgnoresInflightIo;
    let seed = seed_of(b);
    let case = case_for(&plan(Some(b)), seed);
    assert!(case
        .workload
        .iter()
        .flatten()
        .any(|op| matches!(op, Op::BackgroundRead { .. })));
    let report = run_guarded(&case);
    assert!(!report.passed(), "seed {seed} passes");
    assert!(report.stats.counts.held_requests > 0);
}

/// Shrinks `broken`'s first failing case with the default options; its
/// size after.
fn shrunk_ops(broken: Broken) -> usize {
    use sim::shrink::{shrink_failing, CaseSize, ShrinkOptions};
    let case = case_for(&plan(Some(broken)), seed_of(broken));
    let (shrunk, kind) =
        shrink_failing(&case, &ShrinkOptions::default(), |_| {}).expect("the seed fails");
    let after = CaseSize::of(&shrunk.case);
    println!(
        "{broken:?} seed {}: {} -> {after} ({kind}) in {} runs",
        case.seed,
        CaseSize::of(&case),
        shrunk.runs
    );
    // The shrunk case still fails so, and passes without the variant.
    assert!(kind.in_report(&run_guarded(&shrunk.case)));
    let mut fixed = shrunk.case.clone();
    fixed.engine.broken = None;
    assert!(
        run_guarded(&fixed).passed(),
        "{broken:?}: {:?}",
        fixed.workload
    );
    after.ops
}

/// The variants of the multi-step metadata operations' ordering rules
/// (issue 36: snapshot create, apply and delete, compressed packing, the
/// dirty-bit rebuild) are caught within the first 200 seeds of the
/// default campaign, and their first failing cases shrink to at most 8
/// operations.
#[test]
fn the_metadata_operation_variants_are_caught_in_200_seeds_and_shrink_to_eight() {
    for broken in [
        Broken::SnapshotTableBeforeRefcounts,
        Broken::CopiedAfterRefcounts,
        Broken::ApplyDropsOldFirst,
        Broken::DeleteDropsBeforeTable,
        Broken::SpillForgetsFirstReference,
        Broken::FreeKeepsPackingTail,
        Broken::RebuildCountsSharedOnce,
        Broken::RebuildCleansFirst,
    ] {
        let seed = seed_of(broken);
        assert!(seed < 200, "{broken:?}: first failing seed {seed}");
        let ops = shrunk_ops(broken);
        assert!(ops <= 8, "{broken:?} shrinks to {ops} operations");
    }
}

/// Four of the table's shrinks that stalled far above 8 operations: three
/// before the shrinker coalesced requests and pinned faults by rank
/// (dozens of short writes filling refcount blocks or growing the refcount
/// table, which `coalesce_ops` makes one, and a failure that needed a
/// flush fault drawn at a rate among 33 concurrent flushes: `pin_faults`,
/// then `thin_groups` removes the flushes with the fault's rank), and the
/// free that ignores in-flight I/O, which stopped at 250 operations until
/// `quiet_outliers` gave the background read its own hold instead of a
/// hold pinned to its rank among the disk's reads.
#[test]
fn the_tables_hardest_shrinks_reach_eight_operations() {
    for broken in [
        Broken::SkipDataFlushBeforeL2,
        Broken::HeaderBeforeReftable,
        Broken::RefblockForgetsItself,
        Broken::FreeIgnoresInflightIo,
    ] {
        let ops = shrunk_ops(broken);
        assert!(ops <= 8, "{broken:?} shrinks to {ops} operations");
    }
}
