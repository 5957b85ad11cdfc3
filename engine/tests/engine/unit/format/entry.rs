//! The unit tests of `engine::format::entry`.

use engine::format::entry::*;

/// Every cluster size, hosts at and inside sector and cluster
/// boundaries, lengths from one byte to a cluster less one: the
/// encoding decodes to the same host and to the sectors the bytes
/// touch, and is a valid compressed entry.
#[test]
fn compressed_entries_round_trip() {
    for cluster_bits in 9..=21u32 {
        let cs = 1u64 << cluster_bits;
        for host in [512, 0x1_0000 + 1, 7 * cs - 1, (1 << 40) + 511, 3 * cs + 100] {
            for len in [1, 2, 511, 512, 513, cs / 2 + 3, cs - 1] {
                let e = L2Entry::compressed(host, len, cluster_bits);
                let want = (host + len).div_ceil(512) - host / 512;
                assert_eq!(
                    e.decode(cluster_bits, 3),
                    L2Mapping::Compressed {
                        host,
                        sectors: want
                    },
                    "cluster_bits {cluster_bits} host {host:#x} len {len}"
                );
                assert_eq!(e.word & COPIED, 0);
                assert!(e.validate(0, 0, cs, false, false).is_ok());
                assert!(e.validate(0, 0, cs, true, false).is_ok());
            }
        }
    }
}

/// A hand-made descriptor: 64 KiB clusters put the count at bit 54.
#[test]
fn compressed_entry_bits_are_the_specifications() {
    // 1000 bytes at 0x50100 end in sector 0x282, two past the first (0x280).
    let e = L2Entry::compressed(0x50100, 1000, 16);
    assert_eq!(e.word, 1 << 62 | 2 << 54 | 0x50100);
}
