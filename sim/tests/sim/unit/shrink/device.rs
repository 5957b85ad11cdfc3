//! The unit tests of `sim::shrink::device`.

use engine::dev::IoOp;
use sim::case::{Case, Op};
use sim::disk::{LatencyOptions, NthRequest};
use sim::shrink::{shrink_with, ShrinkOptions};

use super::testcase::{w, with_groups};

fn noisy() -> Case {
    let mut c = with_groups(vec![vec![w(0, 1), w(8, 1)], vec![Op::Flush]]);
    c.disk.latency = LatencyOptions::hdd();
    c.disk.sector_size = 4096;
    c.disk.faults.enabled = true;
    c.disk.faults.read_error_ppm = 100;
    c.disk.faults.write_error_ppm = 200;
    c.disk.faults.flush_error_ppm = 300;
    c.disk.faults.error_at = vec![
        NthRequest {
            op: IoOp::Write,
            n: 3,
            device: None,
        },
        NthRequest {
            op: IoOp::Flush,
            n: 1,
            device: None,
        },
    ];
    c.validate().unwrap();
    c
}

#[test]
fn keeps_only_the_fault_the_failure_needs() {
    // Fails while flushes may fail: by rate or by rank.
    let needs = |c: &Case| {
        let f = &c.disk.faults;
        f.enabled && (f.flush_error_ppm > 0 || f.error_at.iter().any(|n| n.op == IoOp::Flush))
    };
    let s = shrink_with(&noisy(), &ShrinkOptions::default(), needs, |_| {})
        .unwrap()
        .case;
    let f = &s.disk.faults;
    assert!(f.enabled);
    assert_eq!((f.read_error_ppm, f.write_error_ppm), (0, 0));
    // Either flush fault alone is enough; the rate goes first.
    assert_eq!(f.flush_error_ppm, 0);
    assert_eq!(
        f.error_at,
        vec![NthRequest {
            op: IoOp::Flush,
            n: 1,
            device: None,
        }]
    );
}

#[test]
fn makes_the_device_steady_where_the_failure_allows() {
    // Fails only while seeks cost something: the rest goes plain.
    let s = shrink_with(
        &noisy(),
        &ShrinkOptions::default(),
        |c| c.disk.latency.seek > 0,
        |_| {},
    )
    .unwrap()
    .case;
    let l = &s.disk.latency;
    assert_eq!(l.seek, LatencyOptions::hdd().seek);
    assert_eq!(
        (l.read_min, l.write_min, l.flush_min),
        (l.read_mean, l.write_mean, l.flush_mean)
    );
    assert_eq!((l.extend, l.bandwidth, l.channels), (0, 0, 0));
    assert_eq!(s.disk.sector_size, 512);
    assert!(!s.disk.faults.enabled);
}
