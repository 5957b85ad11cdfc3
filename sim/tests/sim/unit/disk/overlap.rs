//! The unit tests of `sim::disk::overlap`.

use engine::dev::IoOp;
use sim::disk::overlap::*;

fn w(id: u64, offset: u64, len: u64) -> InFlightWrite {
    InFlightWrite {
        id,
        op: IoOp::Write,
        offset,
        len,
        issued: id,
    }
}

#[test]
fn only_requests_in_flight_over_shared_bytes_overlap() {
    let mut t = InFlightWrites::default();
    t.issue(w(0, 0, 4096));
    // Touching end to end is no overlap.
    t.issue(w(1, 4096, 4096));
    assert_eq!(t.overlaps().1, 0);
    t.complete(0);
    // Over request 0's bytes, but it completed.
    t.issue(w(2, 0, 512));
    assert_eq!(t.overlaps().1, 0);
    // One byte of request 1.
    t.issue(w(3, 8191, 1));
    let (kept, n) = t.overlaps();
    assert_eq!(n, 1);
    assert_eq!(kept[0].earlier.id, 1);
    assert_eq!(kept[0].later.id, 3);
    assert_eq!(
            kept[0].to_string(),
            "write 8191+1 (request 3, issued at 3 ns) issued while write 4096+4096 (request 1, issued at 1 ns) was in flight"
        );
}

#[test]
fn an_empty_request_overlaps_nothing_and_only_the_first_are_kept() {
    let mut t = InFlightWrites::default();
    t.issue(w(0, 0, 1 << 20));
    t.issue(w(1, 512, 0));
    assert_eq!(t.overlaps().1, 0);
    for i in 0..20 {
        t.issue(w(2 + i, i * 512, 512));
    }
    let (kept, n) = t.overlaps();
    // Each of the 20 overlaps request 0; from the second on each also
    // overlaps none of the others (disjoint sectors).
    assert_eq!(n, 20);
    assert_eq!(kept.len(), OVERLAPS_KEPT);
}
