//! The unit tests of `sim::disk::payload`.

use oracle::data::{fill_backing, fill_write_buffer, WriteId, SECTOR_SIZE};
use proptest::prelude::*;
use sim::disk::payload::*;
use sim::disk::store::SparseStore;

/// A buffer of every kind of block: guest data of two writes (one
/// continuing across a boundary, one jumping sectors), backing data,
/// zeroes, garbage, a corrupted data block, and an odd tail.
fn mixed() -> Vec<u8> {
    let mut v = vec![0u8; 4 * SECTOR_SIZE];
    fill_write_buffer(&mut v, WriteId(7), 100);
    let mut w = vec![0u8; 2 * SECTOR_SIZE];
    fill_write_buffer(&mut w, WriteId(7), 200);
    v.extend_from_slice(&w);
    let mut b = vec![0u8; SECTOR_SIZE];
    fill_backing(&mut b, 3);
    v.extend_from_slice(&b);
    v.extend_from_slice(&[0u8; 2 * SECTOR_SIZE]);
    v.extend((0..SECTOR_SIZE).map(|i| (i * 7 + 1) as u8));
    let mut torn = vec![0u8; SECTOR_SIZE];
    fill_write_buffer(&mut torn, WriteId(9), 5);
    torn[300] ^= 1;
    v.extend_from_slice(&torn);
    v.extend_from_slice(&[5u8; 100]);
    v
}

#[test]
fn keeps_generated_blocks_as_runs_and_the_rest_raw() {
    let v = mixed();
    let d = Data::new(&v);
    let kinds: Vec<&Kind> = d.runs.iter().map(|r| &r.kind).collect();
    assert_eq!(
        kinds,
        [
            &Kind::Written { id: 7, sector: 100 },
            &Kind::Written { id: 7, sector: 200 },
            &Kind::Backing { sector: 3 },
            &Kind::Zero,
            &Kind::Raw(v[9 * SECTOR_SIZE..].to_vec()),
        ]
    );
    let mut out = vec![0xffu8; v.len()];
    d.copy_out(0, &mut out);
    assert_eq!(out, v);
}

#[test]
fn a_megabyte_of_one_write_is_one_run() {
    let mut v = vec![0u8; 1 << 20];
    fill_write_buffer(&mut v, WriteId(4096), 0);
    let d = Data::new(&v);
    assert_eq!(d.runs.len(), 1);
    assert!(d.heap_bytes() < 256, "{}", d.heap_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// Any range copied out or applied reads exactly as the bytes.
    #[test]
    fn reads_back_exactly(a in 0usize..5000, b in 0usize..5000, base in 0u64..3000) {
        let v = mixed();
        let (from, to) = (a.min(b).min(v.len()), a.max(b).min(v.len()));
        let d = Data::new(&v);
        let mut out = vec![0xaau8; to - from];
        d.copy_out(from as u64, &mut out);
        prop_assert_eq!(&out[..], &v[from..to]);
        let mut store = SparseStore::from_bytes(&vec![0x55u8; 8000]);
        let mut expected = store.clone();
        expected.write(base + from as u64, &v[from..to]);
        d.apply(&mut store, base, from as u64, to as u64);
        prop_assert_eq!(store, expected);
    }

    /// Arbitrary bytes (garbage to the decoder) come back as they were.
    #[test]
    fn arbitrary_bytes_come_back(v in prop::collection::vec(any::<u8>(), 0..3000)) {
        let d = Data::new(&v);
        let mut out = vec![0u8; v.len()];
        d.copy_out(0, &mut out);
        prop_assert_eq!(out, v);
    }
}
