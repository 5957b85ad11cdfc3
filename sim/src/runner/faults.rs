//! Faults and the errors they excuse: a guest operation's error is
//! legitimate only as the echo of a fault injected while it was in
//! flight (or of the poisoned image's refusal); what the disks a crash
//! replaced had injected and held.

use super::state::*;

/// Count guest operation `n`'s end and judge its error: legitimate only
/// as the echo of an injected fault, one that met a request while the
/// operation was in flight (its own, or metadata I/O it waited for), or
/// the failed metadata write that poisoned the image earlier in this
/// epoch. `faults_at_issue` are the disks' fault counts when it was
/// issued, `faults_before` those of the epochs before.
pub(super) fn account(
    shared: &Shared,
    disks: &[SimDisk],
    faults_at_issue: &[usize],
    faults_before: u64,
    n: u64,
    op: &Op,
    result: Result<(), engine::Error>,
) {
    shared.stats.borrow_mut().counts.guest_ops += 1;
    let Err(e) = result else {
        return;
    };
    shared.stats.borrow_mut().counts.failed_ops += 1;
    let during = first_fault_since(disks, faults_at_issue);
    let mut stats = shared.stats.borrow_mut();
    match excuse(&e, during, faults_on(disks)) {
        Some(Excuse::Fault(op)) => stats.excused.by_fault(op),
        Some(Excuse::Poisoned) => stats.excused.poisoned += 1,
        None => {
            let why = if faults_before + faults_on(disks) == 0 {
                "no fault injected".to_string()
            } else {
                format!(
                    "no fault injected while it was in flight ({} before it, \
                     none since it was issued)",
                    faults_before + faults_at_issue.iter().sum::<usize>() as u64
                )
            };
            shared.failures.borrow_mut().push(Failure::Engine {
                what: format!("op {n} ({op}) failed with {why}: {e}"),
            });
        }
    }
}

/// What explains a guest operation's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excuse {
    /// A fault met a request of this kind while the operation was in flight.
    Fault(IoOp),
    /// The image was poisoned by a failed metadata write this epoch.
    Poisoned,
}

/// Whether an operation's error `e` is explained: by `during`, the first
/// fault injected while it was in flight, or (for the poisoned image's
/// error) by any of the epoch's `epoch_faults`. None: an engine failure,
/// however many faults the run injected elsewhere.
pub fn excuse(e: &engine::Error, during: Option<IoOp>, epoch_faults: u64) -> Option<Excuse> {
    match (e, during) {
        (_, Some(op)) => Some(Excuse::Fault(op)),
        (engine::Error::Poisoned, None) if epoch_faults > 0 => Some(Excuse::Poisoned),
        _ => None,
    }
}

/// The kind of request that met the first fault injected on `disks` since
/// each held `since[i]` faults, if any.
pub(super) fn first_fault_since(disks: &[SimDisk], since: &[usize]) -> Option<IoOp> {
    disks
        .iter()
        .zip(since)
        .filter_map(|(d, &n)| d.injected_fault(n).map(|f| (f.at, f.op)))
        .min_by_key(|&(at, _)| at)
        .map(|(_, op)| op)
}

pub(super) fn status<T, E>(r: &Result<T, E>) -> Status {
    if r.is_ok() {
        Status::Ok
    } else {
        Status::Failed
    }
}

/// What a guest operation's error is judged against: the disks that may
/// meet a fault for it, the faults of the epochs before, and each disk's
/// fault count when the operation was issued. Every kind of operation,
/// snapshot operations among them, ends through [`FaultLedger::account`].
pub(super) struct FaultLedger {
    disks: Vec<SimDisk>,
    faults_before: u64,
    at_issue: Vec<usize>,
}

impl Run<'_> {
    /// The ledger of an operation about to be spawned.
    pub(super) fn fault_ledger(&self) -> FaultLedger {
        FaultLedger {
            disks: self.crashing_disks(),
            faults_before: self.gone.faults(),
            at_issue: Vec::new(),
        }
    }
}

impl FaultLedger {
    /// The operation is issued now: a fault injected from here until it
    /// ends is what may explain its error.
    pub(super) fn issued(&mut self) {
        self.at_issue = self.disks.iter().map(SimDisk::fault_count).collect();
    }

    /// Count operation `n`'s end and judge its error ([`account`]).
    pub(super) fn account(
        &self,
        shared: &Shared,
        n: u64,
        op: &Op,
        result: Result<(), engine::Error>,
    ) {
        account(
            shared,
            &self.disks,
            &self.at_issue,
            self.faults_before,
            n,
            op,
            result,
        );
    }
}
