//! The unit tests of `engine::format::refcount`.

use engine::format::refcount::*;

#[test]
fn every_width_round_trips_without_touching_neighbours() {
    for order in 0..=6 {
        let bits = 1u32 << order;
        let mut block = vec![0u8; 64];
        let n = 64 * 8 / bits as usize;
        for i in 0..n {
            set(&mut block, bits, i, (i as u64 * 7 + 3) & max(bits));
        }
        for i in 0..n {
            assert_eq!(
                get(&block, bits, i),
                (i as u64 * 7 + 3) & max(bits),
                "bits {bits} index {i}"
            );
        }
    }
}

#[test]
fn sub_byte_widths_pack_from_the_low_bits() {
    let mut block = vec![0u8; 1];
    set(&mut block, 1, 0, 1);
    assert_eq!(block[0], 0b0000_0001);
    set(&mut block, 1, 7, 1);
    assert_eq!(block[0], 0b1000_0001);
    let mut block = vec![0u8; 1];
    set(&mut block, 4, 1, 0xa);
    assert_eq!(block[0], 0xa0);
}
