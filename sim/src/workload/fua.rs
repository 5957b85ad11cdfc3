//! FUA requests mixed into any profile's workload (swarm testing): most
//! cases send none, some flag a few of their writes, some nearly all, as
//! a guest's file system (journal commits), a database opened O_DSYNC or
//! a VM whose disk is in write-through mode would. Drawn from its own
//! stream after the workload is built, so a case that draws no FUA is the
//! case it was before FUA existed.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::pick;
use crate::case::Op;

/// Share of cases whose writes get FUA flags at all.
const FUA_CASES: f64 = 0.4;

/// How often a case flags its writes, write_zeroes and discards FUA.
#[derive(Debug, Clone, Copy)]
pub(super) struct FuaMix {
    /// Chance that a given write-like request is flagged.
    rate: f64,
}

impl FuaMix {
    /// With [`FUA_CASES`], a rate from a few requests to nearly all.
    pub fn draw(rng: &mut ChaCha8Rng) -> Option<FuaMix> {
        rng.gen_bool(FUA_CASES).then(|| FuaMix {
            rate: pick(rng, &[0.02, 0.1, 0.3, 0.9]),
        })
    }

    /// Flag the workload's write-like requests at the drawn rate.
    pub fn apply(&self, rng: &mut ChaCha8Rng, workload: &mut [Vec<Op>]) {
        for op in workload.iter_mut().flatten() {
            if op.with_fua(true) != *op && rng.gen_bool(self.rate) {
                *op = op.with_fua(true);
            }
        }
    }
}
