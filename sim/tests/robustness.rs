//! Robustness of the harness itself (issue 10): cases that validation
//! accepts must run to a verdict (no panic, no endless loop, bounded
//! memory), a livelock verdict must mean the engine is at fault, and what
//! cannot run must be refused with a message naming the field.

use std::time::Duration;

use sim::campaign::{run_campaign, CampaignPlan, SwitchPlan};
use sim::case::{Case, CaseError};
use sim::workload::Profile;

/// An error and its `source()` chain, as anyhow's `{:#}` prints it (and
/// so as the `qcsim` binary reports errors).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

#[test]
fn case_json_errors_name_their_cause_once() {
    let e = Case::from_json("?").unwrap_err();
    assert!(matches!(e, CaseError::Json(_)), "{e}");
    let text = chain(&e);
    assert_eq!(
        text.matches("expected value at line 1 column 1").count(),
        1,
        "{text}"
    );
    // What the binary prints.
    let printed = format!("{:#}", anyhow::Error::from(e));
    assert_eq!(printed, "case JSON: expected value at line 1 column 1");

    let dir = tempfile::tempdir().unwrap();
    let e = Case::load(&dir.path().join("none.json")).unwrap_err();
    assert!(matches!(e, CaseError::Io { .. }), "{e}");
    let text = chain(&e);
    assert!(text.contains("none.json"), "{text}");
    assert_eq!(text.matches("(os error 2)").count(), 1, "{text}");
}

#[test]
fn enumerate_errors_name_their_cause_once() {
    let e = sim::runner::EnumerateError::from(sim::disk::CrashError::NotTracked);
    let text = chain(&e);
    assert_eq!(text.matches("crash tracking").count(), 1, "{text}");
}

/// The shared seed counter must not wrap past `u64::MAX`: the campaign of
/// the last seed below `u64::MAX` runs exactly that one case and returns.
/// (The time limit only keeps a regression from running forever: with a
/// wrapping counter the second worker's draw moved it to 0 and the first
/// worker went on with seeds 0, 1, 2, ...)
#[test]
fn a_campaign_at_the_top_of_the_seed_space_runs_its_range_and_ends() {
    let plan = CampaignPlan {
        seeds: u64::MAX - 1..u64::MAX,
        time_limit: Some(Duration::from_secs(20)),
        profile: Profile::Mixed,
        switches: SwitchPlan::AsGenerated,
        shard: (0, 1),
        jobs: 2,
        harsh: false,
    };
    let summary = run_campaign(&plan, &|_, _| {});
    assert_eq!(summary.cases, 1, "{summary:?}");
    assert_eq!(summary.passed + summary.failed, 1);
}

/// A shard no seed belongs to (`n == 0`, or `i >= n`) runs nothing and
/// returns at once; `n == 0` divided by zero in the workers before.
#[test]
fn a_campaign_with_an_empty_shard_runs_nothing() {
    for shard in [(0, 0), (3, 2)] {
        let plan = CampaignPlan {
            seeds: 0..u64::MAX,
            time_limit: Some(Duration::from_secs(20)),
            profile: Profile::Mixed,
            switches: SwitchPlan::AsGenerated,
            shard,
            jobs: 2,
            harsh: false,
        };
        let summary = run_campaign(&plan, &|_, _| {});
        assert_eq!(summary.cases, 0, "shard {shard:?}");
    }
}
