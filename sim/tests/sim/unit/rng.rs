//! The unit tests of `sim::rng`.

use rand::RngCore;
use sim::rng::*;

#[test]
fn streams_are_independent_and_reproducible() {
    let a1 = stream(7, Stream::Schedule).next_u64();
    let a2 = stream(7, Stream::Schedule).next_u64();
    let b = stream(7, Stream::Latency).next_u64();
    let c = substream(7, Stream::Schedule, 1).next_u64();
    let d = stream(8, Stream::Schedule).next_u64();
    assert_eq!(a1, a2);
    assert_ne!(a1, b);
    assert_ne!(a1, c);
    assert_ne!(a1, d);
}
