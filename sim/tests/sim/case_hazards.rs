//! What generated cases are drawn with besides their profile: hazard
//! cycles (a cluster freed and reused, held requests outliving a flush
//! cycle, crashes after a reuse or during a flush, writes spread past the
//! caches), a schedule mode, and latency outliers; and that cases saved
//! before these existed read as they ran.

use sim::case::{Case, Op};
use sim::exec::{ScheduleMode, SchedulePolicy};
use sim::workload::Profile;

/// Whether one group frees a cluster, flushes and writes data: a whole
/// cycle a held request can outlive.
fn has_long_cycle(case: &Case) -> bool {
    case.workload.iter().any(|g| {
        g.iter()
            .any(|op| matches!(op, Op::Discard { .. } | Op::WriteZeroes { .. }))
            && g.contains(&Op::Flush)
            && g.iter().filter(|op| matches!(op, Op::Write { .. })).count() >= 2
            && g.iter().any(|op| matches!(op, Op::Read { .. }))
    })
}

/// Whether a cluster is freed and, two groups on (no flush between) or
/// three (a flush between), another write follows.
fn has_reuse_step(case: &Case) -> bool {
    let w = &case.workload;
    (0..w.len()).any(|i| {
        let freed = w[i].len() == 1
            && matches!(w[i][0], Op::Discard { .. } | Op::WriteZeroes { .. })
            && i >= 2
            && w[i - 1] == [Op::Flush]
            && matches!(w[i - 2][..], [Op::Write { .. }]);
        freed
            && w.get(i + 1)
                .is_some_and(|g| matches!(g[0], Op::Write { .. }) || g[..] == [Op::Flush])
    })
}

#[test]
fn many_generated_cases_carry_hazard_cycles() {
    let cases: Vec<Case> = (0..200)
        .map(|s| Case::generate(s, Profile::Mixed))
        .collect();
    let long = cases.iter().filter(|c| has_long_cycle(c)).count();
    let reuse = cases.iter().filter(|c| has_reuse_step(c)).count();
    assert!(
        long >= 20,
        "{long} of 200 cases hold a whole cycle in one group"
    );
    assert!(
        reuse >= 20,
        "{reuse} of 200 cases free and reuse step by step"
    );
    for c in &cases {
        c.validate().unwrap();
    }
}

#[test]
fn generated_cases_mix_schedule_modes_and_outliers() {
    let cases: Vec<Case> = (0..90).map(|s| Case::generate(s, Profile::Mixed)).collect();
    for mode in ScheduleMode::ALL {
        let n = cases.iter().filter(|c| c.schedule.mode() == mode).count();
        assert!(n >= 15, "{n} of 90 cases under {}", mode.name());
    }
    let outliers = cases
        .iter()
        .filter(|c| c.disk.latency.outliers.any())
        .count();
    assert!(
        (20..=70).contains(&outliers),
        "{outliers} of 90 with outliers"
    );
    // The schedule is part of the case: it survives JSON.
    for c in &cases {
        assert_eq!(&Case::from_json(&c.to_json()).unwrap(), c);
    }
}

#[test]
fn cases_saved_before_schedules_and_outliers_read_as_they_ran() {
    let case = (0..)
        .map(|s| Case::generate(s, Profile::Random))
        .find(|c| !c.schedule.is_random() && c.disk.latency.outliers.any())
        .unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&case.to_json()).unwrap();
    v.as_object_mut().unwrap().remove("schedule");
    v["disk"]["latency"]
        .as_object_mut()
        .unwrap()
        .remove("outliers");
    let old = Case::from_json(&v.to_string()).unwrap();
    assert_eq!(old.schedule, SchedulePolicy::Random);
    assert!(!old.disk.latency.outliers.any());
    // And a case without them writes neither, as before they existed.
    let text = old.to_json();
    assert!(!text.contains("schedule"), "{text}");
    assert!(!text.contains("outliers"), "{text}");
}

#[test]
fn schedules_out_of_bounds_are_refused() {
    let mut case = Case::generate(3, Profile::Random);
    case.schedule = SchedulePolicy::Priority {
        change_points: 0,
        steps_hint: 10,
    };
    let e = case.validate().unwrap_err().to_string();
    assert!(e.contains("change_points"), "{e}");
    case.schedule = SchedulePolicy::Priority {
        change_points: sim::exec::CHANGE_POINTS_MAX + 1,
        steps_hint: 10,
    };
    assert!(case.validate().is_err());
    case.schedule = SchedulePolicy::Priority {
        change_points: 2,
        steps_hint: 0,
    };
    let e = case.validate().unwrap_err().to_string();
    assert!(e.contains("steps_hint"), "{e}");
    case.schedule = SchedulePolicy::Starve {
        task: 3,
        every: 2,
        release_after: 100,
    };
    case.validate().unwrap();
}

#[test]
fn a_campaign_counts_cases_by_schedule_and_outliers() {
    use sim::campaign::{run_campaign, CampaignPlan};
    let plan = CampaignPlan {
        jobs: 2,
        ..CampaignPlan::new(0..24)
    };
    let s = run_campaign(&plan, &|| false, &|_, _| {});
    assert_eq!(s.failed, 0, "{:?}", s.failures.first().map(|f| &f.report));
    let t = &s.totals;
    let by_mode = t.schedule_cases;
    assert_eq!(by_mode.random + by_mode.pct + by_mode.starve, s.cases);
    let expect = |mode| {
        (0..24)
            .filter(|&seed| Case::generate(seed, Profile::Mixed).schedule.mode() == mode)
            .count() as u64
    };
    assert_eq!(by_mode.starve, expect(ScheduleMode::Starve));
    assert_eq!(by_mode.pct, expect(ScheduleMode::Pct));
    assert!(t.outlier_cases > 0 && t.counts.held_requests > 0, "{t:?}");
}
