//! The unit tests of `engine::alloc::inflight`.

use engine::alloc::inflight::DropLog;

#[test]
fn drop_log_answers_for_the_range_and_is_safe_past_its_reach() {
    let mut log = DropLog::default();
    let m = log.mark();
    assert!(!log.overlaps_since(m, 0, 100));
    log.record(200, 300);
    assert!(!log.overlaps_since(m, 0, 100), "another range");
    assert!(log.overlaps_since(m, 250, 260));
    assert!(!log.overlaps_since(log.mark(), 250, 260), "before the mark");
    for i in 0..DropLog::KEEP as u64 {
        log.record(1000 + i, 1001 + i);
    }
    // The drop at 200 fell out of the log: the answer for any range is
    // "maybe".
    assert!(log.overlaps_since(m, 0, 100));
    let m2 = log.mark() - 1;
    assert!(!log.overlaps_since(m2, 0, 100));
}
