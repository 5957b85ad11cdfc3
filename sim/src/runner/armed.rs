//! Crashes armed to land where a crash at a random moment or flush seldom
//! does, in groups with no crash of their own: at the flush after an armed
//! guard's condition arises (`CrashOptions::at_guards`), and inside a
//! multi-step metadata operation (`CrashOptions::at_steps`): when the
//! engine's step probe (`engine::steps`) shows an operation, a step of it
//! is drawn, and the power goes at the first device flush issued once the
//! operation reached that step or a later one, so every boundary of every
//! operation a case runs is a target. One step crash per kind of
//! operation per case (`step_watch`).

use std::rc::Rc;

use engine::{Guard, StepProbe};
use rand::Rng;

use super::state::{flushes_on, Foreground, Img, Run};
use crate::exec::{ExecError, RunEnd};

/// What stopped an armed run: a guard's flush, or an operation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArmedStop {
    Guard(Guard),
    Step,
}

impl Run<'_> {
    /// Run the spawned group until the first device flush (on the
    /// crashing disks) after one of the armed guards' condition arose or
    /// an armed operation reached its step, or to its end. Returns what
    /// stopped it. The flush counted is one issued after the executor
    /// step before the one that saw the condition: a flush issued in the
    /// same step is the one.
    pub(super) fn run_armed(
        &mut self,
        img: &Rc<Img>,
        fg: &Foreground,
    ) -> Result<Option<ArmedStop>, ExecError> {
        let disks = self.crashing_disks();
        // With only a step crash armed, the group runs as an unarmed one
        // would (to every task's end when no background read is in
        // flight), so a case whose operations never reach their step runs
        // exactly as it did before steps were armed.
        let to_end = self.armed.is_empty() && self.background.iter().all(|h| h.is_finished());
        // Each armed guard's count as last seen.
        let mut seen: Vec<(Guard, u64)> = self
            .armed
            .iter()
            .map(|&g| (g, img.guard_count(g)))
            .collect();
        let one_in = self.case.disk.crash.at_guard_one_in.max(1);
        let probe = img.step_probe();
        let mut watch = self.step_watch.take();
        let rng = &mut self.guard_rng;
        let mut before = flushes_on(&disks);
        let mut arose: Option<(ArmedStop, u64)> = None;
        let end = self.sim.run_until(|| {
            let now = flushes_on(&disks);
            for (g, n) in seen.iter_mut() {
                let count = img.guard_count(*g);
                while arose.is_none() && *n < count {
                    *n += 1;
                    if rng.gen_ratio(1, one_in) {
                        arose = Some((ArmedStop::Guard(*g), before));
                    }
                }
                *n = count;
            }
            if let (None, Some(w), Some(p)) = (arose, watch.as_mut(), probe.as_ref()) {
                if w.reached(p) {
                    arose = Some((ArmedStop::Step, before));
                }
            }
            before = now;
            matches!(arose, Some((_, at)) if now > at) || (!to_end && fg.done())
        });
        let stop = match (end?, arose) {
            (RunEnd::Stopped, Some((stop, at))) if flushes_on(&disks) > at => Some(stop),
            // The group ended with the flush never issued (a failed write
            // poisoned the image, or the operation ended): still armed.
            _ => None,
        };
        if stop == Some(ArmedStop::Step) {
            if let Some(w) = watch.as_mut() {
                w.landed();
            }
        }
        self.step_watch = watch;
        Ok(stop)
    }

    /// Run a spawned snapshot operation (`probe` its image's) to its end,
    /// or, with a step crash armed, until the flush after its drawn step.
    /// Returns whether the power went.
    pub(super) fn run_alone_armed(&mut self, probe: Option<StepProbe>) -> Result<bool, ExecError> {
        // Taken only with a probe to read: a driver without one keeps the
        // watch for later operations.
        let (Some(probe), true) = (probe, self.step_watch.is_some()) else {
            return self.sim.run().map(|_| false);
        };
        let mut watch = self.step_watch.take().expect("checked above");
        let disks = self.crashing_disks();
        let mut before = flushes_on(&disks);
        let mut at = None;
        let end = self.sim.run_until(|| {
            let now = flushes_on(&disks);
            if at.is_none() && watch.reached(&probe) {
                at = Some(before);
            }
            before = now;
            matches!(at, Some(a) if now > a)
        })?;
        let went = matches!((end, at), (RunEnd::Stopped, Some(a)) if flushes_on(&disks) > a);
        if went {
            watch.landed();
        }
        self.step_watch = Some(watch);
        Ok(went)
    }

    /// Note a crash an armed run took at a flush: the guard is spent, the
    /// crash counted.
    pub(super) fn armed_crash(&mut self, stop: ArmedStop) {
        self.at_flush = true;
        let mut stats = self.shared.stats.borrow_mut();
        stats.counts.crashes_at_flush += 1;
        match stop {
            ArmedStop::Guard(guard) => {
                self.armed.retain(|&a| a != guard);
                stats.counts.crashes_at_guard += 1;
            }
            ArmedStop::Step => stats.counts.crashes_at_step += 1,
        }
    }
}
