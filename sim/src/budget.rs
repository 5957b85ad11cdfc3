//! A case's executor budgets: steps and simulated time, each a function
//! of the case (methods of [`Case`]), so that running out of them is the
//! engine's fault (a hang or runaway work), never the harness's. They live
//! with the case, below the runner that runs it under them and the case's
//! own validation that refuses a case whose budget would not fit.

use crate::case::{Case, Op, MAX_REQUEST_BYTES};
use crate::devices::backing_disk;
use crate::exec::{ExecOptions, Nanos};

/// The longest stretch of simulated time a crash group may run before
/// the power goes (the crash horizon the runner draws in).
pub const CRASH_HORIZON_NS: u64 = 3_000_000;

impl Case {
    /// The executor's limits for a run of this case ([`exec_options`]).
    pub fn exec_options(&self) -> ExecOptions {
        exec_options(self)
    }

    /// The simulated time one request of this case's devices can take at
    /// worst ([`worst_request`]).
    pub fn worst_request(&self) -> Nanos {
        worst_request(self)
    }

    /// The time budget, if it fits in u64 nanoseconds ([`time_budget`]).
    pub fn time_budget(&self) -> Option<Nanos> {
        time_budget(self)
    }
}

/// The executor's limits for a run of `case`: a step budget that follows
/// from the case's work (`steps_budget`), and a time budget that follows
/// from it and from the case's devices, so that neither a heavy workload
/// nor a slow device is taken for a livelocked engine.
///
/// Simulated time passes only while a device request is pending (the
/// engine and the runner never sleep otherwise), but for the crash
/// horizons. While a request waits for the bus or a channel, others hold
/// it, so the time that passes is at most the sum over requests of each
/// one's own worst case (`LatencyOptions::worst_request` of the longest
/// request the engine issues, `MAX_REQUEST_BYTES`). Each request that
/// takes time costs its task a poll when it completes (the engine awaits
/// its requests one at a time), so at most `steps_max` of them complete,
/// and at most as many more as the case has operations (counted as at
/// least `CUT_SHORT_LEAST`, the bound of operations when the budget was
/// set) are cut short by crashes; a write_zeroes
/// refused as not supported completes at once but holds the bus or a
/// channel for its transfer, and the engine follows each refusal with a
/// timed request of the same task: at most as many again. A run within
/// the step budget therefore stays within this time budget; only the step
/// budget, never the device's speed, can end a run as a livelock.
///
/// Both budgets are at least the defaults, so a run that fitted the
/// default budgets is unchanged; validation bounds latencies, bandwidth
/// and work (`disk::MAX_LATENCY_NS`, `disk::MIN_BANDWIDTH`,
/// `case::MAX_WORK`) and refuses a case whose time budget would not fit in
/// u64 nanoseconds (it saturates rather than overflows regardless).
fn exec_options(case: &Case) -> ExecOptions {
    ExecOptions {
        steps_max: steps_budget(case),
        time_max: time_budget(case).unwrap_or(Nanos::MAX),
        policy: case.schedule,
    }
}

/// Least count of operations cut short by crashes `time_budget` allows
/// for (what `case::MAX_OPS` was when the budget was set, so that budgets
/// are unchanged for every case that bound allowed).
const CUT_SHORT_LEAST: u64 = 4096;

/// Polls allowed per unit of `Case::work`. Generated cases take at most
/// about 6 (the fixed costs of small cases) and request-heavy ones about 2
/// (measured over 600 generated cases with every switch on, off and as
/// generated, and over 512-byte-cluster cases of 2 MiB writes and of
/// hundreds of crashes): ten times that.
const STEPS_PER_WORK: u64 = 64;

/// The step budget of a run of `case`: the default, or more for a case
/// whose work needs more, so that a heavy case is never taken for a
/// livelock. It was the default whatever the case: a valid case of 400
/// crashes on a 64 MiB disk of 512-byte clusters spent it in its
/// whole-disk reads and was called a livelock of the engine.
fn steps_budget(case: &Case) -> u64 {
    let default = ExecOptions::default().steps_max;
    default.max(case.work().saturating_mul(STEPS_PER_WORK))
}

/// The longest one request of `case` can take, on its disks or on the
/// backing file's.
fn worst_request(case: &Case) -> Nanos {
    let hold = case
        .workload
        .iter()
        .flatten()
        .map(|op| match op {
            Op::BackgroundRead { hold, .. } => *hold,
            _ => 1,
        })
        .max()
        .unwrap_or(1);
    case.disk
        .latency
        .worst_request_held(MAX_REQUEST_BYTES, hold)
        .max(backing_disk(case).latency.worst_request(MAX_REQUEST_BYTES))
}

/// The time budget of a run of `case` (see `exec_options`); `None` when it
/// does not fit in u64 ns, which validation refuses.
fn time_budget(case: &Case) -> Option<Nanos> {
    let ops: usize = case.workload.iter().map(Vec::len).sum();
    let requests = 2 * (steps_budget(case) + CUT_SHORT_LEAST.max(ops as u64));
    let horizons = case.crashes() as u64 * CRASH_HORIZON_NS;
    let budget = requests
        .checked_mul(worst_request(case))?
        .checked_add(horizons)?;
    Some(budget.max(ExecOptions::default().time_max))
}
