//! A small slice of `sim::exhaust` on the correct engine: the workloads
//! generated are exactly those the vocabulary gives (so a change in
//! generation fails here), every crash state checked passes, the counts add
//! up, and the report does not depend on the number of workers.

use engine::Switches;
use sim::exhaust::{
    default_slices, run_exhaust, slices, workload_count, workloads, ExhaustError, ExhaustOptions,
    Geometry, VocabOp,
};

/// One operation of each kind, over each extent: an aligned write of
/// cluster 0, an unaligned write across both clusters, zeroes over cluster
/// 0, a discard of cluster 1.
const SLICE: [&str; 4] = ["W(A)", "U(AB)", "Z(A)", "D(B)"];

fn slice(jobs: usize) -> ExhaustOptions {
    ExhaustOptions {
        slices: slices(
            &[Switches::ALL_ON],
            &[Geometry::parse("4k").unwrap()],
            Some(2),
        ),
        vocabulary: SLICE.iter().map(|v| VocabOp::parse(v).unwrap()).collect(),
        jobs,
        ..ExhaustOptions::default()
    }
}

#[test]
fn the_workloads_are_every_sequence_with_every_flush_placement() {
    let v: Vec<VocabOp> = SLICE.iter().map(|v| VocabOp::parse(v).unwrap()).collect();
    let all = workloads(&v, 2);
    // 4 operations with a flush after or not (8), then 16 pairs with 4
    // flush placements each (64).
    assert_eq!(all.len(), 8 + 64);
    assert_eq!(workload_count(4, 2), 72);
    let names: Vec<String> = all.iter().map(|w| w.to_string()).collect();
    assert_eq!(names[..3], ["W(A)", "W(A) F", "U(AB)"]);
    assert_eq!(
        names[8..12],
        ["W(A) W(A)", "W(A) F W(A)", "W(A) W(A) F", "W(A) F W(A) F"]
    );
    assert_eq!(names[71], "D(B) F D(B) F");
    // The full space: 12 operations, 24 + 576 + 13,824 workloads per
    // geometry of 3 operations, 600 per geometry of 2.
    assert_eq!(VocabOp::all().len(), 12);
    assert_eq!(workload_count(12, 3), 14_424);
    assert_eq!(Geometry::all().len(), 10);
    // All switches on, on every geometry; then all on but delayed
    // metadata, and all on but delayed COW, on the two plain 4 KiB
    // geometries, up to 3 operations.
    let names: Vec<String> = default_slices().iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "11111 4k",
            "11111 4k-backing",
            "11111 64k",
            "11111 64k-backing",
            "11111 64k-extl2",
            "11111 64k-extl2-backing",
            "11111 4k-v2",
            "11111 4k-v2-backing",
            "11111 4k-rc1",
            "11111 4k-rc64",
            "11101 4k",
            "11101 4k-backing",
            "01111 4k",
            "01111 4k-backing",
        ]
    );
    assert_eq!(
        ExhaustOptions::default().workloads_per_slice(),
        [
            14_424, 14_424, 600, 600, 600, 600, 14_424, 14_424, 14_424, 14_424, 14_424, 14_424,
            14_424, 14_424
        ]
    );
    assert_eq!(
        ExhaustOptions::default().workload_count(),
        10 * 14_424 + 4 * 600
    );
    // A restriction keeps the default's slices on those geometries, with
    // the lower bound.
    let r = ExhaustOptions::default().restricted(&[Geometry::parse("4k-backing").unwrap()], 1);
    let names: Vec<String> = r.slices.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        ["11111 4k-backing", "11101 4k-backing", "01111 4k-backing"]
    );
    assert_eq!(r.workload_count(), 3 * 24);
}

#[test]
fn a_slice_passes_and_its_counts_add_up() {
    let r = run_exhaust(&slice(1), &|_, _, _| {}).unwrap();
    assert!(r.passed(), "{:#?}", r.failures);
    let c = r.counts;
    assert_eq!(c.workloads, 72);
    assert_eq!(c.crash_free_failed, 0);
    assert_eq!((c.failed, c.failed_points, c.failed_workloads), (0, 0, 0));
    // One crash point after each workload's last step, and one at each
    // device flush of it: a guest flush issues at least one.
    assert_eq!(c.crash_points - c.device_flush_points, 72);
    assert!(c.device_flush_points >= 36, "{c:?}");
    assert_eq!(c.built, c.checked + c.duplicates);
    assert!(
        c.checked > c.crash_points,
        "some crash point has several states: {c:?}"
    );
    assert!(
        c.by_sector_points > 0 && c.by_sector_points < c.crash_points,
        "{c:?}"
    );
    assert_eq!(r.slices.len(), 1);
    assert_eq!(r.slices[0].counts, c);
    assert_eq!(
        (r.slices[0].switches, r.slices[0].geometry.as_str()),
        (0b11111, "4k")
    );
    assert!(r.failures.is_empty());
    // The same with two workers.
    let two = run_exhaust(&slice(2), &|_, _, _| {}).unwrap();
    assert_eq!(two.counts, c);
}

#[test]
fn bad_options_are_refused() {
    let mut too_many = slice(1);
    too_many.slices[0].max_ops = 4;
    assert!(matches!(
        run_exhaust(&too_many, &|_, _, _| {}),
        Err(ExhaustError::Ops(4))
    ));
    let none = ExhaustOptions {
        slices: Vec::new(),
        ..slice(1)
    };
    assert!(matches!(
        run_exhaust(&none, &|_, _, _| {}),
        Err(ExhaustError::NoSlice)
    ));
}

/// The extra operations (compressed writes and snapshot operations) among
/// guest requests, on both 4 KiB geometries: every crash state of each
/// crash point inside a snapshot operation or a compressed write passes.
#[test]
fn the_extra_operations_pass() {
    let mut vocabulary: Vec<VocabOp> = ["W(A)", "U(A)"]
        .iter()
        .map(|v| VocabOp::parse(v).unwrap())
        .collect();
    vocabulary.extend(VocabOp::extra());
    let names: Vec<String> = VocabOp::extra().iter().map(VocabOp::name).collect();
    assert_eq!(names, ["C(A)", "C(B)", "C(AB)", "S", "R", "X"]);
    let o = ExhaustOptions {
        slices: slices(
            &[Switches::ALL_ON],
            &[
                Geometry::parse("4k").unwrap(),
                Geometry::parse("4k-backing").unwrap(),
            ],
            Some(2),
        ),
        vocabulary,
        jobs: 2,
        ..ExhaustOptions::default()
    };
    let r = run_exhaust(&o, &|_, _, _| {}).unwrap();
    assert!(r.passed(), "{:#?}", r.failures);
    let c = r.counts;
    assert_eq!(c.workloads, 2 * workload_count(8, 2));
    assert_eq!(c.crash_free_failed, 0);
    // A snapshot operation flushes at every step of its metadata update.
    assert!(c.device_flush_points > c.workloads, "{c:?}");
    assert!(c.checked > c.crash_points, "{c:?}");
}
