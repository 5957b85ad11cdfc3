//! The command line's tests: `qcsim` run as a process, beside QEMU's tools,
//! one module per subject, in one test binary.

mod support;

mod bad_input;
mod bench_cli;
mod bench_file;
mod campaign;
mod cli_args;
mod cli_data_file;
mod cli_interop;
mod cli_raw;

mod closed_stdout;
mod convert_holes;
mod deploy;
mod dropin;
mod enumerate_cli;
mod exhaust_cli;
mod extended_l2_cli;
mod findings;
mod locking;
mod progress_lines;
mod qemu_driver;
mod readme;
mod run_counters;
mod serve;
mod serve_fua;
mod serve_sim;
mod trace_cli;
mod verify_determinism;
