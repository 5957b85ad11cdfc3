//! qcsim's simulation harness: the simulated disk, the deterministic
//! executor and clock, workloads and cases, the runner, campaigns,
//! shrinking, enumeration, bounded exhaustive workloads, the simulated
//! benchmarks, and a simulated disk served request by request from outside
//! the simulation (`served`, with its replayable request log).
//!
//! Nothing here reads the wall clock (clippy's `disallowed-methods`, in this
//! crate's `clippy.toml`, refuses it): a case is a pure function of its
//! inputs. The real-file tools live in the `tools` crate, the command line
//! in `qcsim`.
//!
//! docs/simulation.md describes each module in more words: the disk's
//! payloads and latency outliers, the executor's schedules, the runner's
//! epochs and judges, shrinking, enumeration and exhaust.

pub mod bench;
pub mod budget;
pub mod campaign;
pub mod case;
pub mod devices;
pub mod disk;
pub mod driver;
pub mod exec;
pub mod exhaust;
pub mod iotrace;
pub mod rng;
pub mod runner;
pub mod served;
pub mod shrink;
pub mod trace;
pub mod workload;
