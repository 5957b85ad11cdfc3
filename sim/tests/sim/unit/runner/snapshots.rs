//! The unit tests of `sim::runner::snapshots`.

use sim::runner::snapshots::*;

#[test]
fn settling_holds_durable_snapshots_and_decides_the_doubtful() {
    let mut s = Snapshots::default();
    let a = s.taking("a".into(), vec![], 8);
    let b = s.taking("b".into(), vec![], 8);
    let c = s.taking("c".into(), vec![], 8);
    s.set(a, Presence::Exists);
    s.set(c, Presence::Deleted);
    assert_eq!(s.pick(7), Some(a), "only a surely exists");
    // b may exist: found, it exists from now on.
    // b may exist: a running image's word does not settle it...
    s.settle(&["a".into(), "b".into()], false).unwrap();
    assert_eq!(s.get(b).presence, Presence::Maybe);
    // ...a reopened image's does: found, it exists from now on.
    s.settle(&["a".into(), "b".into()], true).unwrap();
    assert_eq!(s.get(b).presence, Presence::Exists);
    // a durable snapshot missing, a deleted one back, a stranger.
    let e = s
        .settle(&["b".into(), "c".into(), "z".into()], true)
        .unwrap_err();
    assert!(e.contains("\"a\" was taken"), "{e}");
    assert!(e.contains("\"c\" was deleted"), "{e}");
    assert!(e.contains("\"z\", which the run never took"), "{e}");
}
