//! Foreign qcow2 drivers behind the harness's driver interface
//! (`sim::driver`), run in process on the simulated disks under the same
//! workloads, crashes, model and checker as qcsim's engine: each module
//! is one driver's adapter. A crate apart from `sim` so that the foreign
//! crates and their dependencies are built only for what runs them (the
//! `qcsim` binary and this crate's tests), not for every test of the
//! harness, and so that each adapter uses only the interface's public
//! side, as one outside this repository would (docs/driver-guide.md).

pub mod qcow2rs;
