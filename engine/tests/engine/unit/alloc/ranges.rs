//! The unit tests of `engine::alloc::ranges`.

use engine::alloc::ranges::RangeSet;

#[test]
fn gaps_and_merging() {
    let mut r = RangeSet::default();
    r.insert(10, 20);
    r.insert(30, 40);
    assert_eq!(r.gaps(0, 50), vec![(0, 10), (20, 30), (40, 50)]);
    r.insert(20, 30);
    assert_eq!(r.gaps(0, 50), vec![(0, 10), (40, 50)]);
    assert_eq!(r.gaps(10, 40), vec![]);
    assert_eq!(r.covering_end(15), Some(40));
    assert_eq!(r.covering_end(40), None);
    assert_eq!(r.next_start_after(0), Some(10));
    r.insert(5, 12);
    assert_eq!(r.gaps(0, 50), vec![(0, 5), (40, 50)]);
    assert_eq!(r.parts_in(0, 8), vec![(5, 8)]);
    r.remove(8, 20);
    r.remove(35, 60);
    assert_eq!(r.parts_in(0, 50), vec![(5, 8), (20, 35)]);
    r.remove(0, 100);
    assert_eq!(r.gaps(0, 50), vec![(0, 50)]);
}
