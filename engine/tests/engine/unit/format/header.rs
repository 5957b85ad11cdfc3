//! The unit tests of `engine::format::header`.

use engine::format::header::*;

fn header(version: u32, after: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; V2_HEADER_LEN];
    h[..4].copy_from_slice(&MAGIC.to_be_bytes());
    h[4..8].copy_from_slice(&version.to_be_bytes());
    h.extend_from_slice(after);
    h
}

#[test]
fn the_dirty_bit_is_read_only_from_a_version_3_header() {
    // A version 2 image's backing file name right after its header:
    // byte 79 is '/' (0x2f), odd, which read as feature bits would be
    // the dirty bit.
    let name = b"/tmp/qb/corpus/backing.qcow2";
    assert!(!dirty_in(&header(2, name)));
    assert!(dirty_in(&header(3, &incompat::DIRTY.to_be_bytes())));
    assert!(!dirty_in(&header(3, &0u64.to_be_bytes())));
    // Too short, or not qcow2 at all.
    assert!(!dirty_in(&header(3, &[])));
    let mut other = header(3, &incompat::DIRTY.to_be_bytes());
    other[0] ^= 0xff;
    assert!(!dirty_in(&other));
}
