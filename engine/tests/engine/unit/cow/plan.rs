//! The unit tests of `engine::cow::plan`.

use engine::cow::plan::*;
use engine::cow::source::{CowSource, Piece};

const K: u64 = 1024;

fn piece(start: u64, end: u64, src: CowSource) -> Piece {
    Piece { start, end, src }
}

fn cow(start: u64, end: u64, src: CowSource) -> Part {
    Part::Cow(piece(start, end, src))
}

fn one(parts: Vec<Part>) -> Step {
    Step::Write(vec![Write(parts)])
}

/// A new 64 KiB cluster at guest 0 from `src`, written at [16K, 20K).
fn write_job(src: CowSource) -> CowJob {
    CowJob {
        cover: (0, 64 * K),
        pieces: vec![piece(0, 64 * K, src)],
        todo: vec![(0, 16 * K), (20 * K, 64 * K)],
        data: Some((16 * K, 20 * K)),
        in_place: false,
        fresh: false,
        failed_write: false,
    }
}

const DATA: Part = Part::Data((16 * K, 20 * K));

const ALL: CowSwitches = CowSwitches {
    zero_cow: true,
    merge_cow: true,
    drop_cow: false,
};
const NONE: CowSwitches = CowSwitches {
    zero_cow: false,
    merge_cow: false,
    drop_cow: false,
};
const ZERO_ONLY: CowSwitches = CowSwitches {
    zero_cow: true,
    merge_cow: false,
    drop_cow: false,
};

#[test]
fn a_write_covering_the_cover_is_the_data_alone() {
    let mut j = write_job(CowSource::Backing);
    j.todo.clear();
    assert_eq!(plan(&j, ALL).steps, vec![one(vec![DATA])]);
    let j = write_job(CowSource::Backing);
    let drop = CowSwitches {
        drop_cow: true,
        ..ALL
    };
    assert_eq!(plan(&j, drop).steps, vec![one(vec![DATA])]);
}

#[test]
fn merged_head_data_tail_is_one_write() {
    let j = write_job(CowSource::Backing);
    let p = plan(&j, ALL);
    assert_eq!(
        p.steps,
        vec![one(vec![
            cow(0, 16 * K, CowSource::Backing),
            DATA,
            cow(20 * K, 64 * K, CowSource::Backing),
        ])]
    );
    assert_eq!(
        match &p.steps[0] {
            Step::Write(ws) => (ws[0].range(), ws[0].cow_bytes()),
            _ => unreachable!(),
        },
        ((0, 64 * K), 60 * K)
    );
}

#[test]
fn unmerged_pieces_then_data() {
    let src = CowSource::Host(1 << 20);
    let j = write_job(src);
    assert_eq!(
        plan(&j, NONE).steps,
        vec![
            one(vec![cow(0, 16 * K, src)]),
            one(vec![cow(20 * K, 64 * K, src)]),
            one(vec![DATA]),
        ]
    );
}

#[test]
fn zero_cow_zeroes_the_cover_then_writes_the_data() {
    let j = write_job(CowSource::Zero);
    let p = plan(&j, ALL);
    assert_eq!(
        p.steps,
        vec![Step::Zero {
            range: (0, 64 * K),
            then: vec![Write(vec![DATA])],
            or_else: vec![Write(vec![
                cow(0, 16 * K, CowSource::Zero),
                DATA,
                cow(20 * K, 64 * K, CowSource::Zero),
            ])],
        }]
    );
    // Refused without merge_cow: the pieces and the data apart.
    match &plan(&j, ZERO_ONLY).steps[..] {
        [Step::Zero { or_else, .. }] => assert_eq!(or_else.len(), 3),
        other => panic!("{other:?}"),
    }
    // Without zero_cow zero sources are copied like any other.
    let no_zero = CowSwitches {
        zero_cow: false,
        ..ALL
    };
    assert!(matches!(plan(&j, no_zero).steps[..], [Step::Write(_)]));
}

#[test]
fn a_fresh_run_needs_no_cow_request() {
    let mut j = write_job(CowSource::Zero);
    j.fresh = true;
    assert_eq!(
        plan(&j, ALL).steps,
        vec![
            Step::AlreadyZero((0, 16 * K)),
            Step::AlreadyZero((20 * K, 64 * K)),
            one(vec![DATA]),
        ]
    );
}

#[test]
fn unmerged_zero_pieces_are_zeroed_or_skipped_alone() {
    // Two clusters: the head from zeroes, the tail from the backing file.
    let j = CowJob {
        cover: (0, 128 * K),
        pieces: vec![
            piece(0, 64 * K, CowSource::Zero),
            piece(64 * K, 128 * K, CowSource::Backing),
        ],
        todo: vec![(0, 16 * K), (100 * K, 128 * K)],
        data: Some((16 * K, 100 * K)),
        in_place: false,
        fresh: false,
        failed_write: false,
    };
    let data = Part::Data((16 * K, 100 * K));
    let head = cow(0, 16 * K, CowSource::Zero);
    let tail = one(vec![cow(100 * K, 128 * K, CowSource::Backing)]);
    assert_eq!(
        plan(&j, ZERO_ONLY).steps,
        vec![
            Step::Zero {
                range: (0, 16 * K),
                then: vec![],
                or_else: vec![Write(vec![head])],
            },
            tail.clone(),
            one(vec![data]),
        ]
    );
    let mut fresh = j.clone();
    fresh.fresh = true;
    assert_eq!(
        plan(&fresh, ZERO_ONLY).steps,
        vec![Step::AlreadyZero((0, 16 * K)), tail, one(vec![data])]
    );
    // Merged, the zeroes go out with the rest.
    assert_eq!(plan(&fresh, ALL).steps.len(), 1);
}

#[test]
fn in_place_zeroing_spares_live_subclusters() {
    // Subclusters of 2 KiB: the write's bytes [15K, 21K) lie over an
    // allocated subcluster of the live cluster at host 1M.
    let host = CowSource::Host(1 << 20);
    let j = CowJob {
        cover: (14 * K, 22 * K),
        pieces: vec![
            piece(14 * K, 16 * K, CowSource::Zero),
            piece(16 * K, 18 * K, host),
            piece(18 * K, 22 * K, CowSource::Zero),
        ],
        todo: vec![(14 * K, 15 * K), (21 * K, 22 * K)],
        data: Some((15 * K, 21 * K)),
        in_place: true,
        fresh: false,
        failed_write: false,
    };
    assert!(!j.may_zero(j.cover));
    assert!(j.may_zero((14 * K, 15 * K)));
    assert!(matches!(plan(&j, ALL).steps[..], [Step::Write(_)]));
    // Apart, the zero-source COW alone may be zeroed.
    assert!(matches!(
        plan(&j, ZERO_ONLY).steps[..],
        [Step::Zero { .. }, Step::Zero { .. }, Step::Write(_)]
    ));
    // Over zero subclusters only, the cover may be zeroed.
    let mut j2 = j.clone();
    j2.pieces = vec![piece(14 * K, 22 * K, CowSource::Zero)];
    assert!(matches!(plan(&j2, ALL).steps[..], [Step::Zero { .. }]));
    // A new cluster is nobody's until linked: its data bytes may be
    // zeroed whatever they held.
    let mut j3 = j;
    j3.in_place = false;
    assert!(j3.may_zero(j3.cover));
    assert!(matches!(plan(&j3, ALL).steps[..], [Step::Zero { .. }]));
}

/// Completing a 2-cluster allocation with 64 KiB clusters: the writes
/// left [10K, 70K), the first cluster from zeroes, the second from the
/// backing file.
fn commit_job() -> CowJob {
    CowJob {
        cover: (0, 128 * K),
        pieces: vec![
            piece(0, 64 * K, CowSource::Zero),
            piece(64 * K, 128 * K, CowSource::Backing),
        ],
        todo: vec![(10 * K, 70 * K)],
        data: None,
        in_place: false,
        fresh: false,
        failed_write: false,
    }
}

#[test]
fn the_commit_merges_each_range_left() {
    let j = commit_job();
    let zero = cow(10 * K, 64 * K, CowSource::Zero);
    let backing = cow(64 * K, 70 * K, CowSource::Backing);
    assert_eq!(plan(&j, ALL).steps, vec![one(vec![zero, backing])]);
    // Apart: piece by piece.
    assert_eq!(
        plan(&j, ZERO_ONLY).steps,
        vec![
            Step::Zero {
                range: (10 * K, 64 * K),
                then: vec![],
                or_else: vec![Write(vec![zero])],
            },
            one(vec![backing]),
        ]
    );
    assert_eq!(
        plan(&j, NONE).steps,
        vec![one(vec![zero]), one(vec![backing])]
    );
    // A range left that reads as zeroes across clusters: one zeroing.
    let mut z = j;
    z.pieces[1].src = CowSource::Zero;
    assert_eq!(
        plan(&z, ALL).steps,
        vec![Step::Zero {
            range: (10 * K, 70 * K),
            then: vec![],
            or_else: vec![Write(vec![zero, cow(64 * K, 70 * K, CowSource::Zero)])],
        }]
    );
    assert_eq!(plan(&z, ZERO_ONLY).steps.len(), 2);
}

#[test]
fn the_commit_skips_fresh_zeroes_unless_a_write_failed() {
    let mut j = commit_job();
    j.fresh = true;
    assert_eq!(
        plan(&j, ZERO_ONLY).steps[0],
        Step::AlreadyZero((10 * K, 64 * K))
    );
    j.failed_write = true;
    assert!(matches!(plan(&j, ZERO_ONLY).steps[0], Step::Zero { .. }));
}

#[test]
fn a_covered_or_dropped_commit_does_nothing() {
    let mut j = commit_job();
    let drop = CowSwitches {
        drop_cow: true,
        ..ALL
    };
    assert_eq!(plan(&j, drop).steps, vec![]);
    j.todo.clear();
    assert_eq!(plan(&j, ALL).steps, vec![]);
}

#[test]
fn pieces_are_clipped_to_the_range() {
    let ps = commit_job().pieces;
    assert_eq!(
        pieces_in(&ps, (60 * K, 66 * K)),
        vec![
            piece(60 * K, 64 * K, CowSource::Zero),
            piece(64 * K, 66 * K, CowSource::Backing),
        ]
    );
    assert_eq!(pieces_in(&ps, (128 * K, 130 * K)), vec![]);
}
