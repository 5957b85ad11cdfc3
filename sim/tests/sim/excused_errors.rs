//! A guest operation's error passes only as the echo of an injected fault
//! that could have caused it (one injected while it was in flight, or the
//! failed metadata write that poisoned the image), and every excused error
//! is counted by what explains it.

use sim::case::Case;
use sim::runner::{run_case, RunOptions};
use sim::workload::Profile;

#[test]
fn every_failed_op_of_faulty_cases_is_counted_by_what_excused_it() {
    let mut failed = 0;
    let mut by_fault = 0;
    let mut cases = 0;
    for seed in 0..200 {
        let case = Case::generate(seed, Profile::Random);
        if !case.disk.faults.enabled {
            continue;
        }
        let report = run_case(&case, &RunOptions::default());
        let s = &report.stats;
        assert!(report.passed(), "seed {seed}: {:#?}", report.failures);
        assert_eq!(
            s.excused.total(),
            s.counts.failed_ops,
            "seed {seed}: every failed op is excused by one cause ({})",
            s.excused
        );
        failed += s.counts.failed_ops;
        by_fault += s.excused.total() - s.excused.poisoned;
        cases += 1;
        if cases == 12 {
            break;
        }
    }
    assert_eq!(cases, 12, "too few faulty cases in 200 seeds");
    assert!(failed > 0, "no operation failed in {cases} faulty cases");
    assert!(by_fault > 0, "no error was excused by a fault in flight");
}

/// `faults.enabled: false` switches every fault off for the whole run,
/// whatever the rates say: the runner turns faults off around its own
/// steps (create, recovery) and must turn them back on only for a case
/// that has them. The shrinker's "no faults" step is this one switch.
#[test]
fn a_case_with_faults_disabled_injects_none() {
    let mut seen = 0;
    for seed in 0..200 {
        let mut case = Case::generate(seed, Profile::Random);
        if !case.disk.faults.enabled {
            continue;
        }
        let on = run_case(&case, &RunOptions::default());
        if on.stats.counts.faults_injected == 0 {
            continue;
        }
        case.disk.faults.enabled = false;
        let off = run_case(&case, &RunOptions::default());
        assert!(off.passed(), "seed {seed}: {:#?}", off.failures);
        assert_eq!(
            off.stats.counts.faults_injected, 0,
            "seed {seed}: faults injected with faults.enabled false"
        );
        assert_eq!(off.stats.counts.failed_ops, 0, "seed {seed}: ops failed");
        seen += 1;
        if seen == 6 {
            break;
        }
    }
    assert_eq!(seen, 6, "too few cases with injected faults in 200 seeds");
}
