//! The simulated disk: a `BlockDev` with a volatile write cache, seeded
//! latencies that reorder completions, Linux flush and FUA semantics, crash
//! images built from its pending writes, and injected faults.
//!
//! `simdisk` serves requests from the volatile view, times and logs them;
//! `durability` holds the durable state and the pending writes with the
//! flush and FUA rules (shared with the log replay); faults are decided at
//! the edge in `faults`; `crash` builds crash states, now or at any past
//! event; `log` holds the write log and counters; `overlap` the write-like
//! requests in flight and any issued over the same bytes at once; `store`
//! the sparse byte storage; `options` the settings.
//!
//! Typical use:
//!
//! ```
//! use engine::dev::{BlockDev, WriteFlags};
//! use sim::disk::DiskOptions;
//! use sim::exec::Sim;
//! use sim::rng::{stream, Stream};
//!
//! let sim = Sim::new(42);
//! let disk = sim.disk(DiskOptions::default()).unwrap();
//! let d = disk.clone();
//! sim.spawn(async move {
//!     d.write(0, &[1; 4096], WriteFlags::default()).await.unwrap();
//!     d.flush().await.unwrap();
//!     d.write(4096, &[2; 4096], WriteFlags::default()).await.unwrap();
//! });
//! sim.run().unwrap();
//! let crash = disk.crash_image(&mut stream(42, Stream::Crash)).unwrap();
//! let reopened = disk.reopen(crash.content);
//! assert!(reopened.len() >= 4096);
//! println!("trace {:016x}", sim.trace_hash());
//! ```

mod crash;
pub mod durability;
mod faults;
mod log;
mod options;
pub mod overlap;
pub mod payload;
mod simdisk;
pub mod store;

pub use crash::{
    CrashError, CrashImage, CrashMode, CrashPoint, CrashStates, CrashSummary, SectorChoice,
};
pub use faults::{FaultCounts, FaultKind, InjectedFault};
pub use log::{DiskCounters, LogEntry};
pub use options::{
    CrashOptions, DeviceRole, DiscardEffect, DiskOptions, FaultOptions, HeldRequest,
    LatencyOptions, LogOptions, NthRequest, OptionsError, OutlierOptions, OutlierRates,
    SupportOptions, TearFill, AT_FLUSH_MAX, CRASH_GUARDS, MAX_HELD_REQUESTS, MAX_LATENCY_NS,
    MAX_OUTLIER_FACTOR, MIN_BANDWIDTH, PPM,
};
pub use overlap::{InFlightWrite, Overlap, OVERLAPS_KEPT};
pub use simdisk::SimDisk;
pub use store::{SparseStore, CHUNK};

use crate::exec::Sim;

impl Sim {
    /// A new empty disk on this simulation.
    pub fn disk(&self, options: DiskOptions) -> Result<SimDisk, OptionsError> {
        SimDisk::new(self, options)
    }
}
