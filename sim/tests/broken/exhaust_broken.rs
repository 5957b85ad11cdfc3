//! Exhaust catches every deliberately broken engine variant. Each test runs
//! the smallest slice of the exhaust space that catches its variant (named
//! in the test), proves that the slice passes on the correct engine and
//! fails with the variant, at the crash point the bug predicts, and that
//! the failure's saved case names the variant and fails again: a crash
//! point's case under `enumerate_crash_states_at` (what `qcsim enumerate
//! --case` runs), a crash-free failure's case under the runner (what `qcsim
//! replay` runs).
//!
//! Every slice is one of the default run's (see `slice`), and
//! `the_default_run_catches_*` run the default run itself on its fewest
//! geometries and operations that catch each variant. Measured with those
//! (failed workloads under all on / all on but delayed_metadata / all on
//! but delayed_cow): LinkBeforeData 6 / 12 / 6, SkipRefcountFlush 16 / 25
//! / 16, DropPartialCow 3 / 3 / 6, DoubleAlloc 28 / 28 / 0,
//! ReuseBeforeDurable 120 / 0 / 120. All on fails with every variant, but
//! with LinkBeforeData only through the COW it also skips: the link
//! durable before its data fails only without delayed metadata (see
//! `the_default_run_catches_link_before_data`).
//!
//! Measured when exhaust was added, each slice:
//! LinkBeforeData 3 failing crash states of 13 checked, SkipRefcountFlush 4
//! of 230, DropPartialCow 2 of 17 and 1 crash-free run, ReuseBeforeDurable
//! 3 of 1,702, DoubleAlloc 2 of 220 and 4 crash-free runs. All within 3
//! operations; ReuseBeforeDurable needs all 3 (a write made durable, a
//! discard freeing its cluster, a write elsewhere reusing it).

use engine::options::Broken;
use engine::Switches;
use sim::campaign::run_guarded;
use sim::exhaust::{run_exhaust, ExhaustOptions, ExhaustReport, Geometry, Point, VocabOp};
use sim::runner::{enumerate_crash_states_at, Failure};

/// The slice: the default run's slice of `switches` on `geometry`, its
/// workloads of up to `max_ops` operations of `vocabulary`; everything else
/// as the default run has it. Fails unless the default run has that slice,
/// with workloads that long: each test's failure is one the default `qcsim
/// exhaust` finds.
fn slice(
    geometry: &str,
    vocabulary: &[&str],
    max_ops: usize,
    switches: Switches,
) -> ExhaustOptions {
    let geometry = Geometry::parse(geometry).expect("a geometry");
    let mut options = ExhaustOptions {
        vocabulary: vocabulary
            .iter()
            .map(|v| VocabOp::parse(v).expect("a vocabulary operation"))
            .collect(),
        jobs: 2,
        ..ExhaustOptions::default()
    }
    .restricted(&[geometry], max_ops);
    options.slices.retain(|s| s.switches == switches);
    assert!(
        options.slices.len() == 1 && options.slices[0].max_ops == max_ops,
        "the default run has no slice of switches {:05b} on {geometry} up to {max_ops} operations",
        switches.mask()
    );
    options
}

/// All switches on but delayed metadata: the default run's second switch
/// set.
fn without_delayed_metadata() -> Switches {
    Switches::ALL_ON
        .with("delayed_metadata", false)
        .expect("a switch")
}

fn run(options: &ExhaustOptions) -> ExhaustReport {
    run_exhaust(options, &|_, _, _| {}).expect("the slice runs")
}

/// What a failure was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The model saw a value it does not allow.
    Model,
    /// The checker found the image corrupt.
    Check,
}

fn kind(f: &Failure) -> Option<Kind> {
    match f {
        Failure::Model { .. } => Some(Kind::Model),
        Failure::Check { .. } => Some(Kind::Check),
        _ => None,
    }
}

/// `broken` fails `options`' slice, which passes on the correct engine;
/// among the failures is workload `workload` at `point` (`None`: its
/// crash-free run), failing as `expected`.
fn caught(
    broken: Broken,
    options: ExhaustOptions,
    workload: &str,
    point: Option<Point>,
    expected: Kind,
) {
    let good = run(&options);
    assert!(
        good.passed(),
        "the correct engine fails: {:#?}",
        good.failures
    );
    assert!(good.counts.checked > 0);
    let bad = run(&ExhaustOptions {
        broken: Some(broken),
        rule_checks: false,
        ..options.clone()
    });
    let c = &bad.counts;
    println!(
        "{broken:?}: {} of {} workloads fail: {} crash-free runs, {} of {} crash states checked \
         in {} crash points",
        c.failed_workloads, c.workloads, c.crash_free_failed, c.failed, c.checked, c.failed_points,
    );
    for f in &bad.failures {
        println!(
            "  {} {}: {}",
            f.workload,
            f.point.map_or("crash-free".to_string(), |p| p.to_string()),
            f.failures[0].to_string().lines().next().unwrap_or("")
        );
    }
    assert!(!bad.passed(), "{broken:?} not caught");
    assert_eq!(c.workloads, good.counts.workloads);
    let f = bad
        .failures
        .iter()
        .find(|f| f.workload == workload && f.point == point)
        .unwrap_or_else(|| panic!("{broken:?}: no failure of {workload} at {point:?}"));
    assert_eq!(kind(&f.failures[0]), Some(expected), "{}", f.failures[0]);
    assert_eq!(
        f.case.engine.broken,
        Some(broken),
        "the saved case names the variant"
    );
    // The saved case fails again, the same way.
    match f.point {
        None => {
            let report = run_guarded(&f.case);
            assert_eq!(report.failures, f.failures);
        }
        Some(p) => {
            let again =
                enumerate_crash_states_at(&f.case, p.crash_at(), &options.enumerate, &mut |_| true)
                    .expect("the crash point is there");
            let first = again.failing.first().expect("a state fails again");
            assert_eq!(Some(first.index), f.first_state);
            assert_eq!(first.failures, f.failures);
        }
    }
}

/// With delayed metadata off every allocation writes its L2 entry back at
/// once; linked before its data is written, the entry is durable at a
/// device flush of the write while the cluster reads zeroes, not the
/// backing file's data (zeroes would be a value the model allows without
/// a backing file).
#[test]
fn exhaust_catches_link_before_data() {
    caught(
        Broken::LinkBeforeData,
        slice("4k-backing", &["W(A)"], 1, without_delayed_metadata()),
        "W(A)",
        Some(Point::DeviceFlush(3)),
        Kind::Model,
    );
}

/// The refcount block and the L2 table written back with no flush between:
/// at the flush after the L2 table, a state keeps the L2 entry but not the
/// refcount. The L2 table must already be linked for the entry to count,
/// hence a second allocation in it after a flush.
#[test]
fn exhaust_catches_skip_refcount_flush() {
    caught(
        Broken::SkipRefcountFlush,
        slice("4k", &["W(A)", "W(B)"], 2, Switches::ALL_ON),
        "W(A) F W(B) F",
        Some(Point::DeviceFlush(1)),
        Kind::Check,
    );
}

/// The partial write's head and tail are not copied from the backing file:
/// once flushed they read zeroes, which the crash-free run's last read
/// sees.
#[test]
fn exhaust_catches_drop_partial_cow() {
    caught(
        Broken::DropPartialCow,
        slice("4k-backing", &["U(A)"], 1, Switches::ALL_ON),
        "U(A) F",
        None,
        Kind::Model,
    );
}

/// A discard frees cluster A's host cluster before the L2 change is
/// durable, and the write to B reuses it: a crash keeps A mapped there,
/// and A reads B's data.
#[test]
fn exhaust_catches_reuse_before_durable() {
    caught(
        Broken::ReuseBeforeDurable,
        slice("4k", &["W(A)", "D(A)", "W(B)"], 3, Switches::ALL_ON),
        "W(A) F D(A) W(B)",
        Some(Point::AfterStep),
        Kind::Model,
    );
}

/// The unaligned write's allocation waits for its COW until the next flush
/// (delayed COW); the second write into the cluster allocates another,
/// which the first allocation's link replaces, losing the second write.
#[test]
fn exhaust_catches_double_alloc() {
    caught(
        Broken::DoubleAlloc,
        slice("4k", &["U(A)", "W(A)"], 2, Switches::ALL_ON),
        "U(A) W(A)",
        None,
        Kind::Model,
    );
}

/// On a version 2 image (no dirty bit) a snapshot operation's order is all
/// that keeps a crash inside it consistent: a create that switches its
/// table before its increments leaves a cluster named twice and counted
/// once at a flush of the create (the correct engine's crash states there
/// pass, with missing COPIED flags excused and then repaired, as
/// campaigns judge them).
#[test]
fn exhaust_catches_snapshot_table_before_refcounts_on_version_2() {
    caught(
        Broken::SnapshotTableBeforeRefcounts,
        slice("4k-v2", &["W(A)", "S"], 2, Switches::ALL_ON),
        "W(A) S",
        Some(Point::DeviceFlush(9)),
        Kind::Check,
    );
}

/// A create that writes its increments before it clears COPIED: at a flush
/// between, a flag says "refcount 1" on a cluster counted twice.
#[test]
fn exhaust_catches_copied_after_refcounts_on_version_2() {
    caught(
        Broken::CopiedAfterRefcounts,
        slice("4k-v2", &["W(A)", "S"], 2, Switches::ALL_ON),
        "W(A) S",
        Some(Point::DeviceFlush(4)),
        Kind::Check,
    );
}

/// A delete whose decrements are durable before the table without the
/// snapshot: the snapshot still names clusters counted too low.
#[test]
fn exhaust_catches_delete_drops_before_table_on_version_2() {
    caught(
        Broken::DeleteDropsBeforeTable,
        slice("4k-v2", &["S", "X"], 2, Switches::ALL_ON),
        "S X",
        Some(Point::DeviceFlush(3)),
        Kind::Check,
    );
}

/// An apply whose decrements of the old active table are durable before
/// the new table: the old one, still active, names clusters counted too
/// low.
#[test]
fn exhaust_catches_apply_drops_old_first_on_version_2() {
    caught(
        Broken::ApplyDropsOldFirst,
        slice("4k-v2", &["W(A)", "S", "R"], 3, Switches::ALL_ON),
        "S W(A) R",
        Some(Point::DeviceFlush(6)),
        Kind::Check,
    );
}

/// `broken` fails the default run restricted to `geometries` and workloads
/// of up to `max_ops` operations: every vocabulary operation, every switch
/// set of the default run on those geometries. Only the broken engine runs
/// here: the correct one passes the whole default run (docs/measured.md),
/// and the slice tests above run it on their slices.
fn default_run_catches(broken: Broken, geometries: &[&str], max_ops: usize) -> ExhaustReport {
    let geometries: Vec<Geometry> = geometries
        .iter()
        .map(|g| Geometry::parse(g).expect("a geometry"))
        .collect();
    let options = ExhaustOptions {
        jobs: 2,
        broken: Some(broken),
        rule_checks: false,
        ..ExhaustOptions::default()
    }
    .restricted(&geometries, max_ops);
    let bad = run(&options);
    let c = &bad.counts;
    println!(
        "{broken:?}, default run on {} slices up to {max_ops} ops: {} of {} workloads fail, {} \
         crash-free runs, {} of {} crash states checked",
        options.slices.len(),
        c.failed_workloads,
        c.workloads,
        c.crash_free_failed,
        c.failed,
        c.checked,
    );
    for s in &bad.slices {
        println!(
            "  {:05b} {}: {} failed workloads",
            s.switches, s.geometry, s.counts.failed_workloads
        );
    }
    for f in bad.failures.iter().take(8) {
        println!(
            "  {:05b} {} {} {}: {}",
            f.switches,
            f.geometry,
            f.workload,
            f.point.map_or("crash-free".to_string(), |p| p.to_string()),
            f.failures[0].to_string().lines().next().unwrap_or("")
        );
    }
    assert!(!bad.passed(), "the default run misses {broken:?}");
    bad
}

/// The variant also counts the COW areas of its allocation as written
/// (it links before any data), so an unaligned write over the backing file
/// reads zeroes in its head and tail under every switch set, even with no
/// crash. The bug it is named for, the link durable before the data, shows
/// only with the second switch set: without unaligned writes, all on
/// passes (delayed metadata writes the L2 entry back at the flush, after
/// the data write has completed) and all on but delayed metadata fails.
#[test]
fn the_default_run_catches_link_before_data() {
    let bad = default_run_catches(Broken::LinkBeforeData, &["4k-backing"], 1);
    let failed = |r: &ExhaustReport, mask: u8| {
        r.slices
            .iter()
            .find(|s| s.switches == mask)
            .map(|s| s.counts.failed_workloads)
    };
    let (all_on, second) = (Switches::ALL_ON.mask(), without_delayed_metadata().mask());
    // U(A), U(B), U(AB), each with a flush after or not.
    assert_eq!(failed(&bad, all_on), Some(6));
    assert!(failed(&bad, second) > Some(6), "{:?}", bad.slices);
    let ordering = run(&ExhaustOptions {
        vocabulary: VocabOp::all()
            .into_iter()
            .filter(|op| op.name().starts_with(|c| c != 'U'))
            .collect(),
        broken: Some(Broken::LinkBeforeData),
        rule_checks: false,
        ..ExhaustOptions::default().restricted(&[Geometry::parse("4k-backing").unwrap()], 1)
    });
    assert_eq!(failed(&ordering, all_on), Some(0), "{:?}", ordering.slices);
    assert!(failed(&ordering, second) > Some(0), "{:?}", ordering.slices);
    let f = &ordering.failures[0];
    assert_eq!(
        (f.switches, f.workload.as_str(), f.point),
        (second, "W(A)", Some(Point::DeviceFlush(3)))
    );
}

#[test]
fn the_default_run_catches_skip_refcount_flush() {
    default_run_catches(Broken::SkipRefcountFlush, &["4k"], 2);
}

#[test]
fn the_default_run_catches_drop_partial_cow() {
    default_run_catches(Broken::DropPartialCow, &["4k-backing"], 1);
}

#[test]
fn the_default_run_catches_double_alloc() {
    default_run_catches(Broken::DoubleAlloc, &["4k"], 2);
}

// ReuseBeforeDurable needs three operations (a write, its discard, a
// write that reuses the cluster): the default run's 3-operation `4k`
// slices, 14,424 workloads for each of three switch sets, take minutes in
// a test build. The smallest-slice test above runs the one workload of
// that slice that shows it (`W(A) F D(A) W(B)`), taken from the default
// run's own slice; the whole default run with the variant is a command:
// `cargo run --release --bin qcsim -- exhaust --broken
// reuse-before-durable` (it fails, 120 failing workloads under all on).
