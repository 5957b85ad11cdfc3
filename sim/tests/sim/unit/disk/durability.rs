//! The unit tests of `sim::disk::durability`.

use std::rc::Rc;

use sim::disk::durability::*;
use sim::disk::payload::Data;
use sim::disk::store::SparseStore;

fn data(byte: u8, len: usize) -> Payload {
    Payload::Data(Rc::new(Data::new(&vec![byte; len])))
}

fn read(store: &SparseStore, at: u64) -> u8 {
    let mut b = [0u8];
    store.read(at, &mut b);
    b[0]
}

/// A FUA write made durable marks its bytes dead in the writes that
/// completed before it, and only in those; a flush then makes durable
/// exactly what completed before it was issued, oldest first.
#[test]
fn fua_and_flush_follow_completion_order() {
    let mut d = Durability::new(SparseStore::new());
    d.issue(0, 0, 1024, data(1, 1024), false);
    d.issue(1, 0, 1024, data(2, 1024), false);
    d.issue(2, 0, 512, data(3, 512), true);
    d.issue(3, 256, 512, data(4, 512), false);
    d.complete(0, 10, true);
    d.complete(2, 11, true); // FUA: durable now; kills 0..512 of #0.
    d.complete(1, 12, true); // Completed after #2: stays whole.
    assert_eq!(d.pending()[&0].dead, vec![(0, 512)]);
    assert!(d.pending()[&1].dead.is_empty());
    assert!(!d.pending().contains_key(&2));
    assert_eq!(read(&d.durable, 0), 3);
    // A flush issued at 13 takes #0 then #1; #3 is still in flight.
    d.flush(13);
    assert_eq!(d.pending().keys().copied().collect::<Vec<_>>(), vec![3]);
    assert_eq!((read(&d.durable, 0), read(&d.durable, 1000)), (2, 2));
    d.complete(3, 14, true);
    d.flush(15);
    assert!(d.pending().is_empty());
    assert_eq!((read(&d.durable, 300), read(&d.durable, 800)), (4, 2));
}

/// Many unflushed writes and one flush: all durable, in completion
/// order (the last to complete shows). This flush visited every
/// pending write once per write it made durable before (n^2).
#[test]
fn a_flush_of_many_unflushed_writes() {
    let n = 20_000u64;
    let mut d = Durability::new(SparseStore::new());
    for id in 0..n {
        d.issue(id, 0, 512, data((id % 251) as u8, 512), false);
    }
    // Completed in reverse order: #0 last.
    for (seq, id) in (0..n).rev().enumerate() {
        d.complete(id, seq as u64 + 1, true);
    }
    d.flush(n + 1);
    assert!(d.pending().is_empty());
    assert_eq!(read(&d.durable, 0), 0);
}
