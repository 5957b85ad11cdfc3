//! The unit tests of `sim::runner`, and of its modules below.

mod faults;
mod snapshots;

use sim::case::Case;
use sim::runner::state::Run;
use sim::runner::*;
use sim::workload::Profile;

/// An engine request that never completes (a hang, or a spent budget)
/// is a failure of the run, not a panic of the harness (it was
/// `expect("a single engine request cannot hang the executor")`).
#[test]
fn a_request_that_never_completes_is_a_failure_not_a_panic() {
    let case = Case::generate(1, Profile::Mixed);
    let opts = RunOptions::default();
    let run = Run::fresh(&case, &opts, &sim::driver::EngineDriver);
    match run.block("waiting forever", std::future::pending::<()>()) {
        Err(Failure::Hang { group: 0, message }) => {
            assert!(message.starts_with("waiting forever: hang"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // The stuck task is gone: the simulation can go on.
    assert_eq!(run.sim.task_count(), 0);
}
