//! The simulated benchmarks of `qcsim bench --sim`: sequential 4 KiB guest
//! writes at queue depth 1 and one flush, on a fresh 64 KiB-cluster image on
//! a `SimDisk`, with every optimisation on, all off, and each turned off
//! alone. Device counts come from the disk's `DiskCounters` (exact), engine
//! counts from `Image::counters()`; both are taken as the difference between
//! the end of the job and the moment the image was open, so creating and
//! opening the image are not counted.
//!
//! `fua` runs the FUA jobs (4 KiB writes flagged FUA beside write then
//! flush). `job` runs one (workload, switches) pair and returns a `Row`; `table`
//! renders rows for people; `seed001` is seed 001's write_zeroes against
//! zero buffers on the SSD model and the rotating disk
//! (`LatencyOptions::rotating`, the HDD column's model).
//!
//! The other benchmark, `qcsim bench FILE` (qemu-img bench's job on a real
//! image file, timed by the wall clock), lives in the `tools` crate: this
//! crate reads no clock.

pub mod fua;
mod job;
mod seed001;
mod table;

pub use fua::{render_fua_table, run_fua_job, run_fua_jobs, Durability, Fill, FuaRow, Pattern};
pub use job::{
    backing_byte, guest_byte, run_job, run_job_with, sequential_ops, sequential_ops_of, BenchError,
    GuestOp, JobSetup, Observed, Row, Workload, CLUSTER_SIZE, REQUEST_SIZE,
};
pub use seed001::{gain, seed_001, Seed001, SEED_001_FIGURES};
pub use table::{render_table, COLUMN_KEY};

use engine::Switches;

/// The switch settings a benchmark reports, in order: all on, all off, then
/// each switch off alone (in `Switches::NAMES` order).
pub fn switch_rows() -> Vec<Switches> {
    let mut v = vec![Switches::ALL_ON, Switches::ALL_OFF];
    for name in Switches::NAMES {
        v.push(
            Switches::ALL_ON
                .with(name, false)
                .expect("NAMES holds known switch names"),
        );
    }
    v
}

/// Rows beyond the seven: on these jobs delayed_cow cancels every COW
/// area, leaving zero_cow and merge_cow nothing to do, so their worth shows
/// only against a base with delayed_cow off.
pub fn extra_switch_rows() -> Vec<Switches> {
    let no_delay = Switches::ALL_ON
        .with("delayed_cow", false)
        .expect("known switch");
    let no_zero = no_delay.with("zero_cow", false).expect("known switch");
    let no_merge = no_zero.with("merge_cow", false).expect("known switch");
    vec![no_zero, no_merge]
}

/// Every row of the benchmark for `workloads`, `size` bytes per job; with
/// `extra`, the `extra_switch_rows` too, and the `Workload::EXTRA` jobs.
pub fn run_all(
    workloads: &[Workload],
    size: u64,
    hdd: bool,
    extra: bool,
) -> Result<Vec<Row>, BenchError> {
    run_all_with(workloads, size, hdd, extra, &mut |_, _| {})
}

/// [`run_all`], calling `progress(done, total)` after each job: the
/// command line's progress bar.
pub fn run_all_with(
    workloads: &[Workload],
    size: u64,
    hdd: bool,
    extra: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    let mut workloads = workloads.to_vec();
    if extra {
        for w in Workload::EXTRA {
            if !workloads.contains(&w) {
                workloads.push(w);
            }
        }
    }
    let mut settings = switch_rows();
    if extra {
        settings.extend(extra_switch_rows());
    }
    let total = (workloads.len() * settings.len()) as u64;
    for &w in &workloads {
        for &s in &settings {
            rows.push(run_job(w, size, s, hdd)?);
            progress(rows.len() as u64, total);
        }
    }
    Ok(rows)
}
