//! A trace run checks what a campaign case checks: a trace replayed with
//! crashes on a deliberately broken engine fails, and on the correct
//! engine the same case passes.
//!
//! The recorded mke2fs does not serve here: it writes almost every sector
//! once, into clusters that read zeroes before, and a crash that loses
//! such a write leaves zeroes, which the model allows (the durable value).
//! The trace below makes the broken variants visible: it frees clusters
//! that held data and makes new writes reuse them, with flushes between.

use engine::options::Broken;
use engine::{CreateOptions, Switches};
use sim::campaign::run_guarded;
use sim::iotrace::format::parse_str;
use sim::iotrace::plan::{plan_case, TracePlan};

/// Seeds tried before giving up.
const MAX_SEEDS: u64 = 200;
const CLUSTER: u64 = 4096;

/// Rounds of: write two clusters, flush, discard one, flush, write a
/// cluster elsewhere (the allocator reuses the freed one), flush.
fn reuse_trace() -> String {
    let mut t = String::new();
    for i in 0..24u64 {
        let a = i * 2 * CLUSTER;
        let b = (1 << 20) + i * CLUSTER;
        t.push_str(&format!(
            "w {a} {}\nf\nd {a} {CLUSTER}\nf\nw {b} {CLUSTER}\nw {} 512\nf\n",
            2 * CLUSTER,
            b + (2 << 20)
        ));
    }
    t
}

fn caught(broken: Broken, switches: Switches) {
    let trace = parse_str(&reuse_trace()).unwrap();
    let found = (0..MAX_SEEDS).find_map(|seed| {
        let mut plan = TracePlan::new(
            seed,
            CreateOptions {
                size: 4 << 20,
                cluster_size: CLUSTER,
                ..CreateOptions::default()
            },
        );
        plan.engine.switches = switches;
        plan.engine.broken = Some(broken);
        plan.engine.rule_checks = false;
        plan.crashes = 12;
        let tc = plan_case(&trace, &plan).unwrap();
        let report = run_guarded(&tc.case);
        (!report.passed()).then_some((tc, report))
    });
    let (tc, report) =
        found.unwrap_or_else(|| panic!("{broken:?} not caught by {MAX_SEEDS} seeds"));
    println!(
        "{broken:?}: caught at seed {}: {}",
        tc.case.seed,
        report.failures[0].to_string().lines().next().unwrap_or("")
    );
    assert!(
        !matches!(report.failures[0], sim::runner::Failure::Panic { .. }),
        "{}",
        report.failures[0]
    );
    let mut correct = tc.case.clone();
    correct.engine.broken = None;
    let control = run_guarded(&correct);
    assert!(control.passed(), "{:#?}", control.failures);
}

/// Without delayed metadata every allocating write links its L2 entry at
/// once: linked before its data landed, a crash shows what the reused
/// cluster held before, and the model says so.
#[test]
fn a_trace_run_catches_link_before_data() {
    caught(Broken::LinkBeforeData, Switches::from_mask(0b11101));
}

/// A crash during a flush's writeback keeps an L2 entry whose refcount
/// block was never flushed, and the checker says so.
#[test]
fn a_trace_run_catches_skip_refcount_flush() {
    caught(Broken::SkipRefcountFlush, Switches::ALL_ON);
}
