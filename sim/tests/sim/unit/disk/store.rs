//! The unit tests of `sim::disk::store`.

use sim::disk::store::*;

#[test]
fn read_write_zero_truncate_across_chunks() {
    let mut s = SparseStore::new();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8 + 1).collect();
    s.write(1000, &data);
    assert_eq!(s.len(), 201_000);
    let mut buf = vec![0xff; 10];
    s.read(995, &mut buf);
    assert_eq!(&buf[..5], &[0; 5]);
    assert_eq!(&buf[5..], &data[..5]);
    s.zero(CHUNK - 10, CHUNK + 20);
    let mut buf = vec![0xff; (CHUNK + 40) as usize];
    s.read(CHUNK - 20, &mut buf);
    assert!(buf[..10].iter().all(|&b| b != 0));
    assert!(buf[10..(CHUNK + 30) as usize].iter().all(|&b| b == 0));
    assert!(buf[(CHUNK + 30) as usize..].iter().all(|&b| b != 0));
    s.truncate(1010);
    s.truncate(300_000);
    let mut buf = vec![0xff; 20];
    s.read(1000, &mut buf);
    assert_eq!(&buf[..10], &data[..10]);
    assert_eq!(&buf[10..], &[0; 10]);
    assert_eq!(s.to_bytes().len(), 300_000);
}

#[test]
fn zeroing_a_huge_range_visits_only_present_chunks() {
    let mut s = SparseStore::new();
    s.write(5 * CHUNK + 7, &[9; 10]);
    s.zero(0, 1 << 50);
    assert_eq!(s.len(), 1 << 50);
    assert_eq!(s.allocated(), 0);
    let mut b = [1u8; 4];
    s.read(5 * CHUNK + 7, &mut b);
    assert_eq!(b, [0; 4]);
}

#[test]
fn a_copy_shares_until_written_and_then_differs_only_there() {
    let g = GROUP_CHUNKS * CHUNK;
    let mut a = SparseStore::new();
    a.write(g - 8, &[1; 16]);
    let mut b = a.clone();
    b.write(g - 4, &[2; 8]);
    b.truncate(g - 2);
    let mut buf = [0u8; 16];
    a.read(g - 8, &mut buf);
    assert_eq!(buf, [1; 16]);
    b.read(g - 8, &mut buf);
    assert_eq!(buf, [1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(a.allocated(), 2 * CHUNK);
    assert_eq!(b.allocated(), CHUNK);
}

#[test]
fn equal_stores_hash_alike_however_their_chunks_are_held() {
    let mut a = SparseStore::new();
    a.write(5000, &[7; 100]);
    let mut b = SparseStore::new();
    // A chunk of zeroes held in memory, where `a` has none.
    b.write(0, &[0; 10]);
    b.write(5000, &[7; 100]);
    assert_eq!(a, b);
    assert_eq!(a.content_hash(), b.content_hash());
    let mut c = a.clone();
    c.write(5001, &[8]);
    assert_ne!(a.content_hash(), c.content_hash());
    let mut d = a.clone();
    d.truncate(a.len() + 1);
    assert_ne!(a.content_hash(), d.content_hash(), "the length counts");
}

#[test]
fn equality_is_by_content() {
    let mut a = SparseStore::new();
    a.write(10, &[1; 4]);
    a.zero(10, 4);
    let mut b = SparseStore::new();
    b.zero(0, 14);
    assert_eq!(a, b);
    b.write(3, &[1]);
    assert_ne!(a, b);
    b.zero(3, 1);
    b.truncate(15);
    assert_ne!(a, b, "lengths differ");
}

#[test]
fn clones_share_until_written() {
    let mut a = SparseStore::new();
    a.write(0, &[1; 100]);
    let mut b = a.clone();
    b.write(0, &[2; 1]);
    let mut x = [0u8; 1];
    a.read(0, &mut x);
    assert_eq!(x, [1]);
    b.read(0, &mut x);
    assert_eq!(x, [2]);
}

/// The store against a model of it: a flat vector of bytes.
mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Write(u64, Vec<u8>),
        Zero(u64, u64),
        Truncate(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Offsets around chunk boundaries within three chunks, and around
        // the boundary of the first two groups.
        let g = GROUP_CHUNKS * CHUNK;
        let off = prop_oneof![0..3 * CHUNK, g - 2 * CHUNK..g + 2 * CHUNK];
        prop_oneof![
            (off.clone(), prop::collection::vec(any::<u8>(), 1..3000))
                .prop_map(|(o, d)| Op::Write(o, d)),
            (off.clone(), 1..2 * CHUNK).prop_map(|(o, n)| Op::Zero(o, n)),
            off.prop_map(Op::Truncate),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The store reads back exactly what a flat vector would hold.
        #[test]
        fn behaves_like_a_vector(ops in prop::collection::vec(op(), 1..20)) {
            let mut s = SparseStore::new();
            let mut v: Vec<u8> = Vec::new();
            for op in ops {
                match op {
                    Op::Write(o, d) => {
                        s.write(o, &d);
                        let end = o as usize + d.len();
                        if v.len() < end { v.resize(end, 0); }
                        v[o as usize..end].copy_from_slice(&d);
                    }
                    Op::Zero(o, n) => {
                        s.zero(o, n);
                        let end = (o + n) as usize;
                        if v.len() < end { v.resize(end, 0); }
                        v[o as usize..end].fill(0);
                    }
                    Op::Truncate(n) => {
                        s.truncate(n);
                        v.resize(n as usize, 0);
                    }
                }
                prop_assert_eq!(s.len(), v.len() as u64);
            }
            prop_assert_eq!(s.to_bytes(), v.clone());
            prop_assert_eq!(s.clone(), SparseStore::from_bytes(&v));
            // Reads at every chunk-edge offset, some running past the end:
            // a buffer full of ones must come back as the vector's bytes.
            let g = GROUP_CHUNKS * CHUNK;
            for (o, n) in [(0, 3 * CHUNK), (CHUNK - 1, CHUNK + 2), (g - CHUNK - 3, 2 * CHUNK + 7), (2 * CHUNK + 5, 10)] {
                let mut buf = vec![1u8; n as usize];
                s.read(o, &mut buf);
                let want: Vec<u8> = (o..o + n).map(|i| v.get(i as usize).copied().unwrap_or(0)).collect();
                prop_assert_eq!(buf, want);
            }
        }
    }
}
