//! Resizes among a workload's requests (`Op::Resize`, `qemu-img resize`):
//! a grow past what the L1 table maps, writes in the grown range, a
//! shrink that drops data, a grow back whose range reads as zeroes, an
//! apply of a snapshot taken before a resize, and crashes inside a grow
//! and a shrink, counted at their steps and judged like any other.

use engine::{CreateOptions, MetaOp};
use sim::campaign::run_guarded;
use sim::case::{Case, Op};

/// 1 MiB, 4 KiB clusters: one L2 table maps 2 MiB (4096 sectors), so a
/// grow to 4 MiB needs a second L1 entry, a longer table.
const SIZE: u64 = 2048;
const GROWN: u64 = 8192;

/// The case of `seed` on a plain version 3 image of [`SIZE`] sectors (4
/// KiB clusters, no backing file), faults off, no crash but the
/// workload's, which lands at a flush.
fn plain(seed: u64, workload: Vec<Vec<Op>>) -> Case {
    super::case_amend::plain(seed, CreateOptions::default(), workload)
}

fn write(sector: u64, sectors: u64) -> Vec<Op> {
    vec![Op::Write {
        sector,
        sectors,
        fua: false,
    }]
}

fn read(sector: u64, sectors: u64) -> Vec<Op> {
    vec![Op::Read { sector, sectors }]
}

fn resize(sectors: u64) -> Vec<Op> {
    vec![Op::Resize { sectors }]
}

#[test]
fn a_grown_range_holds_its_writes_a_shrink_drops_them_and_a_grow_back_reads_zeroes() {
    let workload = vec![
        write(0, 64),
        write(1500, 8),
        vec![Op::Flush],
        resize(GROWN),
        write(6000, 16),
        read(6000, 16),
        // Across the old end.
        write(2040, 16),
        read(2040, 16),
        // Drops sector 1500's data, and the grown range's.
        resize(1024),
        read(0, 64),
        // Past the end now: not sent.
        write(1500, 8),
        resize(SIZE),
        // 1024.. read as zeroes.
        read(0, SIZE),
    ];
    let case = plain(0, workload);
    let r = run_guarded(&case);
    assert!(r.passed(), "{:?}", r.failures);
    assert_eq!(r.stats.counts.resizes, 3);
    assert_eq!(r.stats.counts.resizes_refused, 0);
    assert_eq!(r.stats.counts.ops_past_end, 1);
    assert_eq!(r.stats.counts.failed_ops, 0);
}

#[test]
fn an_apply_of_a_snapshot_taken_before_a_grow_gives_the_disk_its_size_back() {
    let workload = vec![
        write(0, 64),
        vec![Op::SnapshotCreate],
        write(0, 8),
        resize(GROWN),
        write(7000, 8),
        vec![Op::SnapshotApply { pick: 0 }],
        // The disk is 1 MiB again: this is past its end.
        write(7000, 8),
        read(0, SIZE),
    ];
    let case = plain(0, workload);
    let r = run_guarded(&case);
    assert!(r.passed(), "{:?}", r.failures);
    assert_eq!(r.stats.counts.snapshot_ops, 2);
    assert_eq!(r.stats.counts.ops_past_end, 1);
}

#[test]
fn a_crash_inside_a_grow_and_a_shrink_is_counted_at_its_step_and_judged() {
    let kinds = [(GROWN, MetaOp::L1Growth), (1024, MetaOp::Shrink)];
    for (to, op) in kinds {
        let mut seen = std::collections::BTreeSet::new();
        // The crash stream of each seed picks the flush the power goes
        // at: the first, or a later one.
        for seed in 0..40 {
            let workload = vec![
                write(0, 64),
                write(1500, 8),
                vec![Op::Flush],
                write(40, 32),
                vec![Op::Resize { sectors: to }, Op::Crash],
                read(0, 1024),
            ];
            let case = plain(seed, workload);
            let r = run_guarded(&case);
            assert!(r.passed(), "resize to {to}, seed {seed}: {:?}", r.failures);
            seen.extend(r.stats.crash_points.v3.crashed_steps(op));
            if seen.len() >= 2 {
                break;
            }
        }
        assert!(
            seen.len() >= 2,
            "{}: crashes landed at {seen:?} only",
            op.name()
        );
    }
}

#[test]
fn a_grow_whose_size_survives_a_crash_reads_zeroes_where_the_backing_file_would_show() {
    // A shrink below the backing file's end, then a grow back cut short
    // at one of its flushes: a crash state whose header has the new size
    // must read zeroes in the grown range, not the backing file's data
    // (the range is zeroed before the size is written, as QEMU orders
    // it). The run tells the model the grow completed when the crash
    // image's header has its size (`Shared::growing`).
    // Grows cut short with the new size in the header (the strict case).
    let mut new_size = 0;
    for seed in 0..200 {
        let workload = vec![
            write(0, 64),
            vec![Op::Flush],
            resize(1024),
            vec![Op::Resize { sectors: SIZE }, Op::Crash],
            read(0, 1024),
        ];
        let mut case = plain(seed, workload);
        let data = oracle::data::BackingData {
            sectors: SIZE,
            pattern: oracle::data::BackingPattern::Full,
        };
        case.image.backing = Some(sim::case::BackingSpec::Raw { data });
        case.image.create.backing_file = Some("backing.raw".into());
        case.image.create.backing_format = Some("raw".into());
        // Half at a flush, half at a moment drawn between.
        if seed % 2 == 1 {
            case.disk.crash.at_flush_ppm = 0;
        }
        case.validate().expect("a valid case");
        let r = run_guarded(&case);
        assert!(r.passed(), "seed {seed}: {:?}", r.failures);
        new_size += r.stats.counts.grows_cut_at_new_size;
    }
    assert!(
        new_size >= 20,
        "only {new_size} grows cut short with the new size"
    );
}
