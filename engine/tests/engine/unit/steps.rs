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
    // What a version 2 image cannot be in is not shown as a boundary
    // never crashed: steps it lacks are left out, refused amends n/a.
    let v2 = c.show_on(true);
    assert!(
        v2.contains("; snapshot_apply: start 0, refcounts 0, l1 0, old_freed 0, flags 0;"),
        "{v2}"
    );
    assert!(v2.contains("; amend_version: start 0, table 0, header 0, old_freed 0; amend_lazy_refcounts: n/a; amend_refcount_bits: n/a; dirty_rebuild: n/a"), "{v2}");
    assert!(
        shown.contains("; amend_version: start 0, refcounts 0, zero_clusters 0, header 0;"),
        "{shown}"
    );
    assert!(
        shown.ends_with("; compressed_packing: start 0, l2 0; check_repair: start 0"),
        "{shown}"
    );
    assert!(
        v2.ends_with(
            "; dirty_rebuild: n/a; compressed_packing: start 0, l2 0; check_repair: start 0"
        ),
        "{v2}"
    );
    let on2 = serde_json::to_value(c.on(true)).unwrap();
    assert_eq!(on2["snapshot_create"]["refcounts"], 2);
    assert!(on2["snapshot_create"].get("dirty_bit").is_none(), "{on2}");
    assert!(on2.get("amend_refcount_bits").is_none(), "{on2}");
    let on3 = serde_json::to_value(c.on(false)).unwrap();
    assert_eq!(on3["amend_refcount_bits"]["table"], 0);
    assert!(on3["amend_version"].get("old_freed").is_none(), "{on3}");
    let json = serde_json::to_string(&c).unwrap();
    assert!(
        json.starts_with("{\"snapshot_create\":{\"start\":0,\"dirty_bit\":0,\"copied_cleared\":0,\"refcounts\":2,"),
        "{json}"
    );
}
