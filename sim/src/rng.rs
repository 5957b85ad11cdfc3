//! Independent random streams derived from one case seed.
//!
//! Every random choice in a simulated run comes from one of these streams,
//! one per concern, so that drawing one more number for (say) the workload
//! does not shift the schedule, the latencies or the faults. A stream is
//! ChaCha8 seeded from the case seed, with the concern's id (and an optional
//! index, for things that come in numbers, such as the disks of successive
//! reopens or the crashes of a run) selecting ChaCha's stream word.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// The concerns a run draws randomness for. The discriminants are part of
/// every saved case's meaning: never renumber them, only append.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Stream {
    /// Which ready task the executor polls next.
    Schedule = 1,
    /// How long each device request takes.
    Latency = 2,
    /// Which device requests fail, and how.
    Faults = 3,
    /// The guest operations of a generated case.
    Workload = 4,
    /// Which crash state a crash keeps.
    Crash = 5,
    /// The per-case fault rates (swarm testing).
    FaultConfig = 6,
    /// The per-case device settings (latencies, sector size, support flags).
    DeviceConfig = 7,
    /// The engine options of a generated case.
    EngineConfig = 8,
    /// The executor's schedule policy of a generated case.
    ScheduleConfig = 9,
    /// Which device requests are held far longer than the rest (latency
    /// outliers), one substream per disk.
    Outliers = 10,
    /// The per-case outlier rates (swarm testing).
    OutlierConfig = 11,
}

/// The stream of `concern` for the case `seed`.
pub fn stream(seed: u64, concern: Stream) -> ChaCha8Rng {
    substream(seed, concern, 0)
}

/// The `index`-th stream of `concern` for the case `seed`: e.g. the latency
/// stream of the disk opened after the third crash.
pub fn substream(seed: u64, concern: Stream, index: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // ChaCha's 64-bit stream id: the concern in the high half, the index in
    // the low half, so (concern, index) pairs never collide.
    rng.set_stream(((concern as u64) << 32) | u64::from(index));
    rng
}
