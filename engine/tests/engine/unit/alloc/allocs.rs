//! The unit tests of `engine::alloc::allocs`.

use engine::alloc::allocs::*;
use engine::format::L2Entry;

const CS: u64 = 64 << 10;

/// A two-cluster allocation at guest `start`, host 1 MiB, written at
/// [start + 4K, start + 100K).
fn new_alloc(start: u64) -> NewAlloc {
    NewAlloc {
        guest_start: start,
        len: 2 * CS,
        host: 1 << 20,
        old: vec![L2Entry::UNALLOCATED; 2],
        cow_areas: vec![(start, start + 4096), (start + 100 * 1024, start + 2 * CS)],
        cover: (start, start + 2 * CS),
        in_place: false,
        fresh: false,
    }
}

#[test]
fn lookups_by_offset_answer_ids_in_guest_order() {
    let mut t = AllocTable::default();
    let b = t.open(new_alloc(4 * CS));
    let a = t.open(new_alloc(0));
    assert_ne!(a, b);
    assert_eq!(t.at(CS + 5), Some(a));
    assert_eq!(t.at(2 * CS), None);
    assert_eq!(t.at(5 * CS), Some(b));
    assert_eq!(t.next_start_after(0), Some(4 * CS));
    assert_eq!(t.first_start(), Some(0));
    assert_eq!(t.starts(), vec![0, 4 * CS]);
    assert_eq!(t.starts_overlapping(CS, 5 * CS), vec![0, 4 * CS]);
    assert_eq!(t.starts_overlapping(2 * CS, 4 * CS), Vec::<u64>::new());
    assert_eq!(t.alloc(b).host_of(4 * CS + 10), (1 << 20) + 10);
    assert_eq!(t.count(), 2);
}

#[test]
fn writers_cover_an_allocation() {
    let mut t = AllocTable::default();
    let id = t.open(new_alloc(0));
    assert!(!t.writer_done(id, Some((4096, 100 * 1024))));
    assert!(!t.ready_to_commit(id));
    assert_eq!(t.join(id, 0, 8192), (1 << 20, 8192));
    assert_eq!(
        t.join(id, 100 * 1024, 1 << 20),
        ((1 << 20) + 100 * 1024, 28 * 1024)
    );
    assert!(!t.writer_done(id, Some((0, 4096))));
    // A failed write fills nothing and taints the run.
    assert!(!t.writer_done(id, None));
    assert!(t.alloc(id).failed_write());
    assert_eq!(t.alloc(id).unwritten(), vec![(100 * 1024, 2 * CS)]);
}

#[test]
fn a_commit_links_and_removes() {
    let mut t = AllocTable::default();
    let id = t.open(new_alloc(0));
    t.writer_done(id, Some((4096, 100 * 1024)));
    t.begin_commit(id);
    t.cow_done(id);
    assert!(t.alloc(id).unwritten().is_empty());
    t.linked_through(id, 1);
    // Linking failed after one cluster: Open again, partly linked.
    t.reopen(id);
    assert_eq!(t.state(id), Some(AllocState::Open));
    assert_eq!(t.alloc(id).linked(), 1);
    t.begin_commit(id);
    t.linked_through(id, 2);
    t.finish(id);
    assert_eq!(t.state(id), None);
    // The guest start is free for a later allocation, with a new id.
    let later = t.open(new_alloc(0));
    assert_ne!(later, id);
    assert_eq!(t.at(0), Some(later));
}

#[test]
fn a_doomed_allocation_is_given_up() {
    let mut t = AllocTable::default();
    let id = t.open(new_alloc(0));
    t.writer_done(id, Some((4096, 100 * 1024)));
    t.begin_commit(id);
    t.doom(id);
    assert_eq!(t.state(id), Some(AllocState::Doomed));
    let a = t.give_up(id);
    assert_eq!((a.linked(), a.clusters()), (0, 2));
    assert_eq!(t.count(), 0);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "illegal move Doomed -> Open")]
fn a_doomed_allocation_is_never_reopened() {
    let mut t = AllocTable::default();
    let id = t.open(new_alloc(0));
    t.writer_done(id, Some((4096, 100 * 1024)));
    t.begin_commit(id);
    t.doom(id);
    t.reopen(id);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "illegal move Committing -> given up")]
fn nobody_gives_up_an_allocation_being_committed() {
    let mut t = AllocTable::default();
    let id = t.open(new_alloc(0));
    t.writer_done(id, Some((4096, 100 * 1024)));
    t.begin_commit(id);
    t.give_up(id);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "illegal move Committing -> Committing")]
fn one_commit_at_a_time() {
    let mut t = AllocTable::default();
    let id = t.open(new_alloc(0));
    t.begin_commit(id);
    t.begin_commit(id);
}
