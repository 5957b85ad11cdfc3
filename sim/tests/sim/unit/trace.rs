//! The unit tests of `sim::trace`.

use sim::trace::*;

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = TraceHasher::new();
    h.write_bytes(bytes);
    h.finish()
}

#[test]
fn fnv1a_known_values() {
    // Published FNV-1a 64 test vectors.
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn data_hash_known_values() {
    // XXH3-64, seed 0, from the reference implementation's sanity
    // checks: the empty input, and one byte.
    assert_eq!(hash_bytes(b""), 0x2d06_8005_38d3_94c2);
    assert_ne!(hash_bytes(&[0u8; 512]), hash_bytes(&[1u8; 512]));
}

#[test]
fn events_are_tagged() {
    let mut a = TraceHasher::new();
    a.event("x");
    a.write_u64(1);
    let mut b = TraceHasher::new();
    b.event("y");
    b.write_u64(1);
    assert_ne!(a.finish(), b.finish());
    assert_eq!(a.events(), 1);
}
