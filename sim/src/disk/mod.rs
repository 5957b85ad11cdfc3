//! The simulated disk: a `BlockDev` with a volatile write cache, seeded
//! latencies that reorder completions, Linux flush and FUA semantics, crash
//! images built from its pending writes, and injected faults.
//!
//! Pristine state (durable, volatile, pending writes) lives in `simdisk`;
//! faults are decided at the edge in `faults`; `crash` builds crash states;
//! `log` holds the write log and counters; `options` the settings.

mod crash;
mod faults;
mod log;
mod options;
mod simdisk;
mod store;

pub use crash::{CrashError, CrashImage, CrashMode, CrashStates, SectorChoice};
pub use faults::{FaultKind, InjectedFault};
pub use log::{DiskCounters, LogEntry};
pub use options::{
    CrashOptions, DiscardEffect, DiskOptions, FaultOptions, LatencyOptions, LogOptions, NthRequest,
    OptionsError, SupportOptions, TearFill, PPM,
};
pub use simdisk::SimDisk;
pub use store::{SparseStore, CHUNK};

use crate::exec::Sim;

impl Sim {
    /// A new empty disk on this simulation.
    pub fn disk(&self, options: DiskOptions) -> Result<SimDisk, OptionsError> {
        SimDisk::new(self, options)
    }
}
