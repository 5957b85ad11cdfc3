//! The device passes: a failing case's simulated disk made as plain as the
//! failure allows, its faults off and its latencies without spread.
//!
//! A steady device is easier to read, and it makes the workload passes
//! work better: every request's latency is a draw from the disk's latency
//! stream, so removing one request shifts the latencies of all that follow
//! and may hide a failure that needed them; with no spread, every draw is
//! the same.

use super::Shrinker;
use crate::case::{Case, Op};
use crate::disk::{DiscardEffect, OutlierOptions, SupportOptions, MAX_OUTLIER_FACTOR};
use crate::exec::SchedulePolicy;
use crate::shrink::Progress;

impl<F: FnMut(&Case) -> bool, P: FnMut(&Progress)> Shrinker<F, P> {
    /// Injected faults off; failing that, each kind of fault alone (the
    /// failure may need one of them, not all).
    pub(super) fn quiet_faults(&mut self) {
        if !self.best.disk.faults.enabled {
            return;
        }
        let mut c = self.best.clone();
        c.disk.faults.enabled = false;
        if self.try_case("quiet_faults", c) {
            return;
        }
        self.try_edits(
            "quiet_faults",
            &[
                &|c| c.disk.faults.read_error_ppm = 0,
                &|c| c.disk.faults.write_error_ppm = 0,
                &|c| c.disk.faults.flush_error_ppm = 0,
                &|c| c.disk.faults.capacity = None,
                &|c| c.disk.faults.lost_write_ppm = 0,
                &|c| c.disk.faults.misdirected_write_ppm = 0,
            ],
        );
        // The requests that fail by rank, one at a time.
        let mut k = 0;
        while k < self.best.disk.faults.error_at.len() {
            let mut c = self.best.clone();
            c.disk.faults.error_at.remove(k);
            if !self.try_case("quiet_faults", c) {
                k += 1;
            }
        }
    }

    /// No request held long (latency outliers off); failing that, none
    /// but the background reads, each held by its own `hold` at the
    /// largest factor; failing that, the requests held by rank dropped in
    /// runs, down to one at a time (`shrink_failing` pins drawn outliers
    /// to ranks first, see `pin_outliers`).
    ///
    /// Why the background reads: a failure that needs a read to outlive a
    /// whole cycle of other requests (its cluster freed, flushed, reused
    /// and rewritten) usually gets it from a drawn outlier, pinned to the
    /// read's rank among the disk's reads. Every operation removed before
    /// it moves that rank, and the hold lands on another read: no removal
    /// keeps the failure, and the shrink stalls (seed 1 of
    /// `free-ignores-inflight-io` stopped at 250 operations). A hold that
    /// belongs to the operation stays with it whatever is removed.
    pub(super) fn quiet_outliers(&mut self) {
        if !self.best.disk.latency.outliers.any() {
            return;
        }
        let mut c = self.best.clone();
        c.disk.latency.outliers = OutlierOptions::default();
        if self.try_case("quiet_outliers", c.clone()) {
            return;
        }
        if hold_background_reads(&mut c) && self.try_case("quiet_outliers", c) {
            return;
        }
        // Runs of held requests, halving the run length down to one (a
        // case pinned from a long run holds hundreds, most of them not
        // needed: one at a time would spend a run on each).
        self.halving_runs(
            |c| c.disk.latency.outliers.held.len(),
            |s, start, chunk| {
                let mut c = s.best.clone();
                let h = &mut c.disk.latency.outliers.held;
                h.drain(start..(start + chunk).min(h.len()));
                s.try_case("quiet_outliers", c)
            },
        );
    }

    /// The plainest timing of crashes and tasks the failure allows: the
    /// uniform schedule, crashes at a drawn time rather than at a flush,
    /// no guard and no operation's step armed to crash.
    pub(super) fn plain_timing(&mut self) {
        self.try_edits(
            "plain_timing",
            &[
                &|c| c.schedule = SchedulePolicy::Random,
                &|c| c.disk.crash.at_flush_ppm = 0,
                &|c| c.disk.crash.at_guards.clear(),
                &|c| c.disk.crash.at_steps = false,
            ],
        );
    }

    /// Latencies without spread (each kind of request always takes its
    /// mean), then each other cost off, then the plainest sector size and
    /// support; torn sectors off.
    pub(super) fn steady_device(&mut self) {
        self.try_edits(
            "steady_device",
            &[
                &steady_latencies,
                &|c| c.disk.latency.seek = 0,
                &|c| c.disk.latency.extend = 0,
                &|c| c.disk.latency.bandwidth = 0,
                &|c| c.disk.latency.channels = 0,
                &|c| c.disk.crash.tear_ppm = 0,
                &|c| c.disk.sector_size = 512,
                &|c| c.disk.support = SupportOptions::default(),
                // Short of the default: a discard that does one thing.
                &|c| {
                    if c.disk.support.discard == DiscardEffect::Either {
                        c.disk.support.discard = DiscardEffect::Zeroes;
                    }
                },
            ],
        );
    }
}

/// Every kind of request always takes its mean latency.
pub(super) fn steady_latencies(c: &mut Case) {
    let l = &mut c.disk.latency;
    l.read_min = l.read_mean;
    l.write_min = l.write_mean;
    l.flush_min = l.flush_mean;
}

/// Every background read of `case` held at the largest factor
/// ([`MAX_OUTLIER_FACTOR`]) by its own `hold`; whether any was not already.
fn hold_background_reads(case: &mut Case) -> bool {
    let mut changed = false;
    for op in case.workload.iter_mut().flatten() {
        if let Op::BackgroundRead { hold, .. } = op {
            changed |= *hold != MAX_OUTLIER_FACTOR;
            *hold = MAX_OUTLIER_FACTOR;
        }
    }
    changed
}
