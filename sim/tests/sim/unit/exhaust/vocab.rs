//! The unit tests of `sim::exhaust::vocab`.

use engine::EngineOptions;
use sim::case::Op;
use sim::exhaust::{workload_count, workloads, Geometry, VocabOp};

#[test]
fn workloads_are_every_sequence_with_every_flush_placement() {
    let v = [VocabOp::all()[0], VocabOp::all()[9]];
    let names: Vec<String> = workloads(&v, 2).iter().map(|w| w.to_string()).collect();
    assert_eq!(
        names[..6],
        [
            "W(A)",
            "W(A) F",
            "D(A)",
            "D(A) F",
            "W(A) W(A)",
            "W(A) F W(A)"
        ]
    );
    assert_eq!(names[6..8], ["W(A) W(A) F", "W(A) F W(A) F"]);
    assert_eq!(names.len() as u64, workload_count(2, 2));
    assert_eq!(workload_count(12, 3), 24 + 576 + 13824);
}

#[test]
fn names_parse_back() {
    for op in VocabOp::all().into_iter().chain(VocabOp::extra()) {
        assert_eq!(VocabOp::parse(&op.name()), Some(op));
    }
    assert_eq!(VocabOp::parse("S(A)"), None);
    for g in Geometry::all() {
        assert_eq!(Geometry::parse(&g.name()), Some(g));
    }
    assert_eq!(VocabOp::parse("X(A)"), None);
}

#[test]
fn every_case_is_valid() {
    let mut v = VocabOp::all();
    v.extend(VocabOp::extra());
    for g in Geometry::all() {
        for w in workloads(&v, 1) {
            g.case(&w, &EngineOptions::default()).validate().unwrap();
        }
    }
}

#[test]
fn an_unaligned_write_leaves_a_head_and_a_tail() {
    let u = |name| VocabOp::parse(name).unwrap();
    // 4 KiB clusters: sectors 3..7 of cluster 0; 5..13 across both.
    assert_eq!(
        u("U(A)").ops(8),
        [Op::Write {
            sector: 3,
            sectors: 4,
            fua: false,
        }]
    );
    assert_eq!(
        u("U(AB)").ops(8),
        [Op::Write {
            sector: 5,
            sectors: 8,
            fua: false,
        }]
    );
    // 64 KiB clusters (2 KiB subclusters with extended L2): sector 33
    // is inside subcluster 8, and subclusters 25 to 31 are untouched.
    assert_eq!(
        u("U(B)").ops(128),
        [Op::Write {
            sector: 128 + 33,
            sectors: 64,
            fua: false,
        }]
    );
}
