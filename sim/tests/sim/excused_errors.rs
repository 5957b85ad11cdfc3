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
            s.failed_ops,
            "seed {seed}: every failed op is excused by one cause ({})",
            s.excused
        );
        failed += s.failed_ops;
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
