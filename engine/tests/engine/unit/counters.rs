//! The unit tests of `engine::counters`.

use engine::counters::*;

#[test]
fn every_rare_path_is_named_added_and_shown() {
    // Distinct values per field, so a field left out of `rare_paths`,
    // `named` or `add` (or two swapped) shows.
    let c = Counters {
        reftable_growths: 1,
        refblocks_created: 2,
        l2_evictions: 3,
        l2_dirty_evictions: 4,
        refblock_evictions: 5,
        refblock_dirty_evictions: 6,
        cow_failures: 7,
        link_failures: 8,
        allocs_dropped: 9,
        open_alloc_cap_commits: 10,
        growth_disabled: 11,
        dirty_rebuilds: 12,
        ..Counters::default()
    };
    let r = c.rare_paths();
    let values: Vec<u64> = r.named().iter().map(|(_, n)| *n).collect();
    assert_eq!(values, (1..=12).collect::<Vec<u64>>());
    let mut sum = r;
    sum.add(&r);
    let doubled: Vec<u64> = sum.named().iter().map(|(_, n)| *n).collect();
    assert_eq!(doubled, (1..=12).map(|n| 2 * n).collect::<Vec<u64>>());
    assert!(r
        .to_string()
        .starts_with("reftable_growths 1, refblocks_created 2,"));
    assert_eq!(c.since(&c), Counters::default());
    let some = RarePaths {
        cow_failures: 5,
        ..RarePaths::default()
    };
    let reached = RarePaths::reached(&some);
    assert_eq!(reached.cow_failures, 1);
    assert_eq!(reached.named().iter().map(|(_, n)| n).sum::<u64>(), 1);
}
