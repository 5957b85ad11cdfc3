//! The engine asserts each crash rule where it is kept (`engine/src/rules.rs`,
//! debug builds): a broken variant that breaks a rule panics there, naming
//! it, however the crash that would show the damage is drawn. For each
//! assertion, the variants that break it and the first seed of `qcsim
//! campaign --seeds 0..300 --broken VARIANT` (a debug build) that panics
//! with its message: the seed panics so with the assertions on, does not
//! panic so with them off (the assertion fired, nothing else), and passes
//! on the correct engine with the assertions on.
//!
//! The other tests of this binary turn the assertions off
//! (`rule_checks: false`): they measure what the harness catches alone.
//! Figures (cases each variant fails of 300, with the assertions and
//! without): docs/guards.md, "Crash rules asserted".

use engine::options::Broken;
use sim::campaign::{case_for, run_guarded, CampaignPlan};
use sim::runner::{Failure, RunReport};

/// Each variant, the rule whose assertion it trips first on its seed (and
/// a part of the message that says which check of the rule), and that
/// seed.
const FIRST_PANIC: [(Broken, &str, &str, u64); 20] = [
    (
        Broken::LinkBeforeData,
        "data before link",
        "before its guest data",
        0,
    ),
    (
        Broken::DropPartialCow,
        "data before link",
        "before its COW",
        0,
    ),
    (
        Broken::FreshIgnoresReuse,
        "data before link",
        "before its COW",
        37,
    ),
    (
        Broken::CommitIgnoresWriters,
        "data before link",
        "is in flight",
        15,
    ),
    (Broken::CommitIgnoresWriters, "no overlapping writes", "", 3),
    (Broken::DoubleAlloc, "no overlapping writes", "", 7),
    (Broken::SkipDataFlushBeforeL2, "data before L2", "", 0),
    (Broken::SkipDataFileFlush, "data before L2", "", 7),
    (Broken::EvictWithoutFlush, "refcounts before L2", "", 0),
    (Broken::SkipRefcountFlush, "refcounts before L2", "", 0),
    (
        Broken::SkipReftableFlush,
        "refcounts before L2",
        "refcount table",
        1,
    ),
    (Broken::NoDirtyBit, "refcounts before L2", "", 3),
    (
        Broken::SkipRefcountFlush,
        "blocks before the refcount table",
        "",
        3,
    ),
    (Broken::SkipL2Flush, "L2 before L1", "", 1),
    (
        Broken::HeaderBeforeReftable,
        "tables before the header",
        "",
        1,
    ),
    (
        Broken::ReuseBeforeDurable,
        "frees after the reference is gone",
        "",
        1,
    ),
    (
        Broken::FreeIgnoresInflightIo,
        "frees after the I/O before them",
        "",
        11,
    ),
    (
        Broken::FlushSkipsWhenClean,
        "guest flush makes the writes before it durable",
        "",
        0,
    ),
    (
        Broken::FuaBeforeL2,
        "a FUA request is durable when it completes",
        "L2 table",
        2,
    ),
    (Broken::FuaWithoutPreflush, "data before L2", "", 14),
];

fn plan(broken: Option<Broken>, rule_checks: bool) -> CampaignPlan {
    CampaignPlan {
        broken,
        rule_checks,
        ..CampaignPlan::new(0..300)
    }
}

/// The message of the panic `report` failed with first, if any.
fn panic_of(report: &RunReport) -> Option<&str> {
    match report.failures.first() {
        Some(Failure::Panic { message }) => Some(message),
        _ => None,
    }
}

#[test]
fn each_assertion_fires_where_its_rule_is_broken() {
    for (broken, rule, detail, seed) in FIRST_PANIC {
        let prefix = format!("crash rule broken: {rule}: ");
        let report = run_guarded(&case_for(&plan(Some(broken), true), seed));
        let message = panic_of(&report).unwrap_or_else(|| {
            panic!(
                "{broken:?}: seed {seed} does not panic: {:?}",
                report.failures.first().map(ToString::to_string)
            )
        });
        assert!(
            message.starts_with(&prefix) && message.contains(detail),
            "{broken:?}: seed {seed} panics otherwise: {message}"
        );
        let unchecked = run_guarded(&case_for(&plan(Some(broken), false), seed));
        assert!(
            panic_of(&unchecked).is_none_or(|m| !m.contains("crash rule broken")),
            "{broken:?}: seed {seed} panics with the assertions off"
        );
        let correct = run_guarded(&case_for(&plan(None, true), seed));
        assert!(
            correct.passed(),
            "{broken:?}: seed {seed} fails on the correct engine: {}",
            correct.failures[0]
        );
    }
}

/// Every assertion of the ledger is tripped by some variant above (the
/// rebase's is not: no variant breaks it; `rules`' unit tests break it on
/// the ledger itself).
#[test]
fn every_rule_of_the_ledger_has_a_variant_here() {
    let rules = include_str!("../../../engine/src/rules.rs");
    let mut named: Vec<&str> = rules
        .match_indices("broken_rule!(\n")
        .map(|(i, _)| {
            let rest = &rules[i..];
            let open = rest.find('"').expect("a rule name") + 1;
            let len = rest[open..].find('"').expect("its end");
            &rest[open..open + len]
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    for rule in named {
        assert!(
            FIRST_PANIC.iter().any(|(_, r, _, _)| *r == rule),
            "no variant here trips {rule:?}"
        );
    }
}
