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
    /// The kind that last reached its step.
    reached: Option<usize>,
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
            let steps = op.steps_on(v2);
            op.step_index(steps[rng.gen_range(0..steps.len())])
        });
        let reached = op.step_index(step) >= target;
        if reached {
            self.reached = Some(i);
        }
        reached
    }

    /// The power went at the flush after the last reached step: that kind
    /// is done for this case.
    pub(super) fn landed(&mut self) {
        if let Some(i) = self.reached.take() {
            self.spent[i] = true;
        }
        self.targets = [None; engine::steps::META_OPS];
    }
}
