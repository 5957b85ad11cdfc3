//! The unit tests of `engine::steps`.

use engine::steps::*;

#[test]
fn operations_and_steps_are_listed_once_in_order() {
    for (i, op) in MetaOp::ALL.into_iter().enumerate() {
        assert_eq!(op.index(), i, "{op:?} out of declaration order");
        assert_eq!(op.steps()[0], Step::Start, "{op:?}");
    }
    for (i, s) in Step::ALL.into_iter().enumerate() {
        assert_eq!(s as usize, i, "{s:?} out of declaration order");
    }
}

#[test]
fn the_probe_follows_nested_operations_and_their_steps() {
    let p = StepProbe::default();
    assert_eq!(p.get(), None);
    p.step(Step::Table); // no operation: nothing to mark
    assert_eq!(p.get(), None);
    {
        let _outer = p.enter(MetaOp::SnapshotCreate);
        p.step(Step::Refcounts);
        {
            let _inner = p.enter(MetaOp::ReftableGrowth);
            assert_eq!(p.get(), Some((MetaOp::ReftableGrowth, Step::Start)));
            p.step(Step::Header);
            assert_eq!(p.get(), Some((MetaOp::ReftableGrowth, Step::Header)));
        }
        assert_eq!(p.get(), Some((MetaOp::SnapshotCreate, Step::Refcounts)));
    }
    assert_eq!(p.get(), None);
}

#[test]
fn crash_points_count_add_and_show_every_step() {
    let mut c = CrashPoints::default();
    c.bump(MetaOp::SnapshotCreate, Step::Refcounts);
    c.bump(MetaOp::SnapshotCreate, Step::Refcounts);
    let mut d = c;
    d.add(&c);
    assert_eq!(d.get(MetaOp::SnapshotCreate, Step::Refcounts), 4);
    assert_eq!(d.total(), 4);
    let shown = c.to_string();
    assert!(
        shown.starts_with("snapshot_create: start 0, dirty_bit 0, copied_cleared 0, refcounts 2,"),
        "{shown}"
    );
    assert!(shown.contains("; dirty_rebuild: start 0, refcounts 0, flags 0, header 0"));
    assert!(c
        .show_on(true)
        .starts_with("snapshot_create: start 0, copied_cleared 0, refcounts 2,"));
    let json = serde_json::to_string(&c).unwrap();
    assert!(
        json.starts_with("{\"snapshot_create\":{\"start\":0,\"dirty_bit\":0,\"copied_cleared\":0,\"refcounts\":2,"),
        "{json}"
    );
}
