//! The unit tests of `sim::campaign`.

use sim::campaign::combined_trace_hash;

#[test]
fn combined_hash_ignores_finishing_order_but_not_content() {
    let mut a = vec![(3, 30), (1, 10), (2, 20)];
    let mut b = vec![(1, 10), (2, 20), (3, 30)];
    assert_eq!(combined_trace_hash(&mut a), combined_trace_hash(&mut b));
    let mut c = vec![(1, 10), (2, 21), (3, 30)];
    assert_ne!(combined_trace_hash(&mut b), combined_trace_hash(&mut c));
    // A case's hash is bound to its seed: swapping two cases' hashes
    // is a different campaign.
    let mut d = vec![(1, 20), (2, 10), (3, 30)];
    assert_ne!(combined_trace_hash(&mut b), combined_trace_hash(&mut d));
}
