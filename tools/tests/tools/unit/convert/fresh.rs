//! The unit tests of `tools::convert::fresh`.

use tools::convert::{is_zero, nonzero_runs};

#[test]
fn zero_detection() {
    assert!(is_zero(&[]));
    assert!(is_zero(&[0; 37]));
    for i in [0, 15, 16, 36] {
        let mut b = [0u8; 37];
        b[i] = 1;
        assert!(!is_zero(&b), "byte {i}");
    }
}

#[test]
fn runs_merge_adjacent_nonzero_blocks() {
    let mut buf = vec![0u8; 10 * 512 + 100];
    buf[0] = 1; // block 0
    buf[512 + 511] = 1; // block 1
    buf[4 * 512] = 1; // block 4
    buf[10 * 512 + 99] = 1; // the short last block
    assert_eq!(
        nonzero_runs(&buf, 512),
        vec![(0, 1024), (2048, 512), (5120, 100)]
    );
    assert!(nonzero_runs(&[0; 4096], 512).is_empty());
    assert_eq!(nonzero_runs(&[7; 1000], 4096), vec![(0, 1000)]);
}
