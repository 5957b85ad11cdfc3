//! Guest data generation: round trips, and garbage never decoding as data.

use oracle::data::{
    decode, fill_backing, fill_write_buffer, fill_written, BackingData, BackingPattern, Claim,
    Content, Garbage, WriteId, SECTOR_SIZE,
};
use proptest::prelude::*;

fn written(id: u64, sector: u64) -> Vec<u8> {
    let mut buf = vec![0u8; SECTOR_SIZE];
    fill_written(&mut buf, WriteId(id), sector);
    buf
}

#[test]
fn zeroes_decode_as_zero() {
    assert_eq!(decode(&[0u8; SECTOR_SIZE]), Content::Zero);
}

#[test]
fn data_differs_across_ids_sectors_and_tags() {
    let a = written(1, 7);
    assert_ne!(a, written(2, 7));
    assert_ne!(a, written(1, 8));
    let mut b = vec![0u8; SECTOR_SIZE];
    fill_backing(&mut b, 7);
    assert_ne!(a, b);
    assert_eq!(decode(&b), Content::Backing { sector: 7 });
}

#[test]
fn write_buffer_holds_one_generated_sector_per_sector() {
    let mut buf = vec![0u8; 4 * SECTOR_SIZE];
    fill_write_buffer(&mut buf, WriteId(9), 100);
    for (i, chunk) in buf.chunks_exact(SECTOR_SIZE).enumerate() {
        assert_eq!(
            decode(chunk),
            Content::Written {
                id: WriteId(9),
                sector: 100 + i as u64
            }
        );
    }
}

#[test]
fn torn_sector_keeps_its_header_claim() {
    let mut torn = written(5, 3);
    torn[256..].copy_from_slice(&written(6, 3)[256..]);
    assert_eq!(
        decode(&torn),
        Content::Garbage(Garbage {
            header_of: Some(Claim::Written {
                id: WriteId(5),
                sector: 3
            }),
            looks_like: None,
        })
    );
}

#[test]
fn backing_patterns_place_data_as_described() {
    let stripes = BackingPattern::Stripes { data: 2, hole: 3 };
    let got: Vec<bool> = (0..7).map(|s| stripes.has_data(s)).collect();
    assert_eq!(got, [true, true, false, false, false, true, true]);
    assert!(!BackingPattern::Stripes { data: 0, hole: 0 }.has_data(0));
    let scattered = BackingPattern::Scattered {
        seed: 1,
        percent: 50,
    };
    let n = (0..1000).filter(|s| scattered.has_data(*s)).count();
    assert!((350..650).contains(&n), "{n} of 1000 sectors hold data");

    let data = BackingData {
        sectors: 4,
        pattern: BackingPattern::Full,
    };
    let mut buf = vec![0xffu8; 6 * SECTOR_SIZE];
    data.fill(&mut buf, 0);
    let decoded: Vec<Content> = buf.chunks_exact(SECTOR_SIZE).map(decode).collect();
    assert_eq!(decoded[3], Content::Backing { sector: 3 });
    assert_eq!(decoded[4], Content::Zero);
    assert_eq!(decoded[5], Content::Zero);
}

proptest! {
    #[test]
    fn round_trip(id in any::<u64>(), sector in any::<u64>()) {
        prop_assert_eq!(decode(&written(id, sector)), Content::Written { id: WriteId(id), sector });
        let mut b = vec![0u8; SECTOR_SIZE];
        fill_backing(&mut b, sector);
        prop_assert_eq!(decode(&b), Content::Backing { sector });
    }

    #[test]
    fn random_bytes_are_garbage(bytes in proptest::collection::vec(any::<u8>(), SECTOR_SIZE)) {
        prop_assume!(bytes.iter().any(|b| *b != 0));
        prop_assert!(matches!(decode(&bytes), Content::Garbage(_)));
    }

    #[test]
    fn any_corruption_is_garbage(
        id in any::<u64>(),
        sector in any::<u64>(),
        at in 0..SECTOR_SIZE,
        flip in 1..=255u8,
    ) {
        let mut buf = written(id, sector);
        buf[at] ^= flip;
        prop_assert!(matches!(decode(&buf), Content::Garbage(_)), "byte {} flipped decoded as data", at);
    }

    #[test]
    fn mixed_halves_are_garbage(a in any::<u64>(), b in any::<u64>(), sector in 0..1000u64, cut in 1..SECTOR_SIZE) {
        prop_assume!(a != b);
        let mut buf = written(a, sector);
        let whole_b = written(b, sector);
        buf[cut..].copy_from_slice(&whole_b[cut..]);
        // A cut inside the prefix both share leaves exactly b's sector.
        if buf == whole_b {
            prop_assert_eq!(decode(&buf), Content::Written { id: WriteId(b), sector });
        } else {
            prop_assert!(matches!(decode(&buf), Content::Garbage(_)));
        }
    }
}
