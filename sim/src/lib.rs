//! qcsim's simulation harness: the simulated disk, the deterministic
//! executor and clock, workloads and cases, the runner and campaigns.

pub mod bench;
pub mod campaign;
pub mod case;
pub mod disk;
pub mod exec;
pub mod files;
pub mod rng;
pub mod runner;
pub mod shrink;
pub mod trace;
pub mod workload;
