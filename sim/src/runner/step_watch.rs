//! The step crashes of a case (`CrashOptions::at_steps`): the step drawn
//! for each multi-step metadata operation the engine starts, whether the
//! operation reached it (`armed` acts on it), and the kinds of operation
//! a crash already landed inside (one crash per kind per case, so a case
//! that creates, applies and deletes snapshots crashes inside each).

use engine::StepProbe;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::rng::{self, Stream};

/// The substream of the crash stream that draws the step an armed
/// operation crashes at.
const STEP_CRASH_STREAM: u32 = 3;

/// The step crashes of a case (`CrashOptions::at_steps`).
pub(super) struct StepWatch {
    /// A version 2 image (now: an amend may change it): steps are drawn
    /// among those it has.
    v2: bool,
    rng: ChaCha8Rng,
    /// The kinds a crash landed inside already.
    spent: [bool; engine::steps::META_OPS],
    /// The kind that last reached its step: where a crash now lands.
    reached: Option<StepCrash>,
    /// The step index each operation seen since the probe was last idle
    /// crashes at (an operation inside another keeps its own).
    targets: [Option<usize>; engine::steps::META_OPS],
}

impl StepWatch {
    /// For the case of `seed`, on a version 2 image if `v2` (which has
    /// no dirty-bit steps to crash at).
    pub(super) fn new(seed: u64, v2: bool) -> StepWatch {
        StepWatch {
            v2,
            rng: rng::substream(seed, Stream::Crash, STEP_CRASH_STREAM),
            spent: [false; engine::steps::META_OPS],
            reached: None,
            targets: [None; engine::steps::META_OPS],
        }
    }

    /// For an operation the runner itself carries out in one window (no
    /// probe: `check -r`), whether the power goes inside this one: drawn
    /// with chance one half while the kind is not spent, which it then is.
    pub(super) fn draw_inside(&mut self, op: engine::MetaOp) -> bool {
        let cut = self.armed_for(op) && self.rng.gen_bool(0.5);
        if cut {
            self.spent[op.index()] = true;
        }
        cut
    }

    /// Whether a crash may still land inside `op` in this case.
    pub(super) fn armed_for(&self, op: engine::MetaOp) -> bool {
        !self.spent[op.index()]
    }

    /// The image is version 2 from now on if `v2` (an amend changed it).
    pub(super) fn set_v2(&mut self, v2: bool) {
        self.v2 = v2;
    }

    /// Whether the operation the probe shows has reached its drawn step
    /// (drawing it when the operation is new), for a kind no crash landed
    /// inside yet.
    pub(super) fn reached(&mut self, probe: &StepProbe) -> bool {
        let Some((op, step)) = probe.get() else {
            self.targets = [None; engine::steps::META_OPS];
            return false;
        };
        let i = op.index();
        if self.spent[i] {
            return false;
        }
        let v2 = self.v2;
        let rng = &mut self.rng;
        // A step the image has, as its index among all the operation's
        // steps (a dirty-bit step drawn on version 2 would be reached
        // late, or never).
        let target = *self.targets[i].get_or_insert_with(|| {
            // A case's compressed writes open packing clusters again and
            // again, and the rare shapes after the first (the frees of
            // partly packed clusters, packing into what a free left) need
            // the run to get past it: each opening is crashed with chance
            // one half, so the crash often comes later or not at all.
            if op == engine::MetaOp::CompressedPacking && rng.gen_bool(0.5) {
                return usize::MAX;
            }
            let steps = op.steps_on(v2);
            op.step_index(steps[rng.gen_range(0..steps.len())])
        });
        let reached = op.step_index(step) >= target;
        if reached {
            self.reached = Some(StepCrash {
                op,
                step,
                start: target == 0,
            });
        }
        reached
    }

    /// Whether the power goes at the next device request (a write, a
    /// zeroing, a discard or a flush) rather than the next flush: the
    /// operation was drawn to crash at its start. Many operations issue
    /// no flush before their first step (a refcount table growth writes
    /// its blocks and table and flushes once the table is written; an
    /// upgrade's first flush comes after its header), so at a flush the
    /// probe would already show a later step and the start would never be
    /// crashed: the first request is the moment the operation has begun
    /// to change the disk and nothing of it is durable.
    pub(super) fn at_request(&self) -> bool {
        self.reached.is_some_and(StepCrash::at_request)
    }

    /// The power went at the flush after the last reached step (or at
    /// the first request after its start): that kind is done for this
    /// case. Returns where the crash counts: at the operation's start
    /// when drawn there, whatever step the probe shows by the first
    /// request (an operation whose first request begins its first step,
    /// an upgrade's header write, has a start nothing else could crash);
    /// otherwise where the probe shows it, or, if the operation ended
    /// before the flush (a compressed write's entry waits for the next
    /// writeback), the step it had reached.
    pub(super) fn landed(&mut self) -> Option<StepCrash> {
        self.targets = [None; engine::steps::META_OPS];
        let crash = self.reached.take()?;
        self.spent[crash.op.index()] = true;
        Some(crash)
    }
}

/// Where a step crash landed ([`StepWatch::landed`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct StepCrash {
    op: engine::MetaOp,
    /// The step the operation was in when it reached the drawn one.
    step: engine::Step,
    /// Drawn at its start, so the power went at its first request.
    start: bool,
}

impl StepCrash {
    /// Whether the power went at a request that need not be a flush.
    pub(super) fn at_request(self) -> bool {
        self.start
    }

    /// The operation and step the crash counts at, `now` being what the
    /// probe shows as the power goes.
    pub(super) fn counted(
        self,
        now: Option<(engine::MetaOp, engine::Step)>,
    ) -> (engine::MetaOp, engine::Step) {
        if self.start {
            (self.op, engine::Step::Start)
        } else {
            now.unwrap_or((self.op, self.step))
        }
    }
}
