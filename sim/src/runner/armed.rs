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

use super::state::{changes_on, flushes_on, Foreground, Img, Run};
use super::step_watch::StepWatch;
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
        let mut before = Marks::on(&disks);
        let mut arose: Option<(ArmedStop, Mark)> = None;
        let end = self.sim.run_until(|| {
            let now = Marks::on(&disks);
            for (g, n) in seen.iter_mut() {
                let count = img.guard_count(*g);
                while arose.is_none() && *n < count {
                    *n += 1;
                    if rng.gen_ratio(1, one_in) {
                        arose = Some((ArmedStop::Guard(*g), before.flush()));
                    }
                }
                *n = count;
            }
            if let (None, Some(w), Some(p)) = (arose, watch.as_mut(), probe.as_ref()) {
                if w.reached(p) {
                    arose = Some((ArmedStop::Step, before.for_watch(w)));
                }
            }
            before = now;
            matches!(arose, Some((_, at)) if now.past(at)) || (!to_end && fg.done())
        });
        let stop = match (end?, arose) {
            (RunEnd::Stopped, Some((stop, at))) if Marks::on(&disks).past(at) => Some(stop),
            // The group ended with the flush never issued (a failed write
            // poisoned the image, or the operation ended): still armed.
            _ => None,
        };
        if stop == Some(ArmedStop::Step) {
            if let Some(w) = watch.as_mut() {
                self.step_crash = w.landed();
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
        let mut before = Marks::on(&disks);
        let mut at = None;
        let end = self.sim.run_until(|| {
            let now = Marks::on(&disks);
            if at.is_none() && watch.reached(&probe) {
                at = Some(before.for_watch(&watch));
            }
            before = now;
            matches!(at, Some(a) if now.past(a))
        })?;
        let went = matches!((end, at), (RunEnd::Stopped, Some(a)) if Marks::on(&disks).past(a));
        if went {
            self.step_crash = watch.landed();
        }
        self.step_watch = Some(watch);
        Ok(went)
    }

    /// Note a crash an armed run took at a flush: the guard is spent, the
    /// crash counted.
    pub(super) fn armed_crash(&mut self, stop: ArmedStop) {
        // A step crash drawn at an operation's start came at its first
        // request, which need not be a flush.
        let at_flush =
            !(stop == ArmedStop::Step && self.step_crash.is_some_and(|c| c.at_request()));
        self.at_flush = at_flush;
        let mut stats = self.shared.stats.borrow_mut();
        stats.counts.crashes_at_flush += u64::from(at_flush);
        match stop {
            ArmedStop::Guard(guard) => {
                self.armed.retain(|&a| a != guard);
                stats.counts.crashes_at_guard += 1;
            }
            ArmedStop::Step => stats.counts.crashes_at_step += 1,
        }
    }
}

/// The disks' flushes and changing requests at one moment.
#[derive(Debug, Clone, Copy)]
struct Marks {
    flushes: u64,
    changes: u64,
}

/// What an armed crash waits to see go past: the flushes, or (a crash
/// drawn at an operation's start) the changing requests, as counted the
/// executor step before the condition arose.
#[derive(Debug, Clone, Copy)]
enum Mark {
    Flush(u64),
    Change(u64),
}

impl Marks {
    fn on(disks: &[crate::disk::SimDisk]) -> Marks {
        Marks {
            flushes: flushes_on(disks),
            changes: changes_on(disks),
        }
    }

    fn flush(self) -> Mark {
        Mark::Flush(self.flushes)
    }

    /// The mark a step crash the watch just saw reached waits for.
    fn for_watch(self, w: &StepWatch) -> Mark {
        if w.at_request() {
            Mark::Change(self.changes)
        } else {
            self.flush()
        }
    }

    /// Whether a request the mark waits for was issued since it.
    fn past(self, at: Mark) -> bool {
        match at {
            Mark::Flush(n) => self.flushes > n,
            Mark::Change(n) => self.changes > n,
        }
    }
}
