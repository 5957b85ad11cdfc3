//! The unit tests of `engine::guards`.

use engine::guards::*;
use engine::options::Broken;

#[test]
fn guards_are_listed_once_named_apart_and_broken_apart() {
    for (i, g) in Guard::ALL.into_iter().enumerate() {
        assert_eq!(g.index(), i, "{g:?} out of declaration order");
    }
    let mut names: Vec<&str> = Guard::ALL.map(Guard::name).to_vec();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), GUARDS);
    let mut broken: Vec<Broken> = Guard::ALL.map(Guard::broken).to_vec();
    broken.sort_by_key(|b| b.name());
    broken.dedup();
    assert_eq!(broken.len(), GUARDS, "two guards share a broken variant");
    for b in Broken::ALL {
        assert!(
            Guard::ALL.iter().any(|g| g.broken() == b),
            "{b:?} breaks no guard"
        );
    }
}

#[test]
fn counts_add_subtract_and_round_trip() {
    let mut c = GuardCounts::default();
    for (i, g) in Guard::ALL.into_iter().enumerate() {
        c.bump(g, i as u64 + 1);
    }
    assert_eq!(c.get(Guard::RebuildDurableBeforeClean), GUARDS as u64);
    let mut d = c;
    d.add(&c);
    assert_eq!(d.since(&c), c);
    assert_eq!(
        GuardCounts::reached(&c)
            .named()
            .iter()
            .map(|x| x.1)
            .sum::<u64>(),
        GUARDS as u64
    );
    assert!(c.never().is_empty());
    assert_eq!(GuardCounts::default().never().len(), GUARDS);
    let json = serde_json::to_string(&c).unwrap();
    assert!(json.starts_with("{\"data_before_link\":1,\"data_flush_before_l2\":2,"));
    assert_eq!(serde_json::from_str::<GuardCounts>(&json).unwrap(), c);
    let err = serde_json::from_str::<GuardCounts>("{\"no_such\":1}").unwrap_err();
    assert!(
        err.to_string().contains("unknown guard \"no_such\""),
        "{err}"
    );
    assert!(c
        .to_string()
        .starts_with("data_before_link 1, data_flush_before_l2 2,"));
}
