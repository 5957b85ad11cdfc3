//! The harness's integration tests (simulated disk, executor, cases,
//! runner, campaigns, shrinking, enumeration, simulated benchmarks), one
//! module per subject, and the library's unit tests (`unit`), in one test
//! binary.

mod bench_bounds;
mod case_amend;
mod case_arbitrary;
mod case_crash_smoke;
mod case_data_file;
mod case_engine_smoke;
mod case_generate;
mod case_hazards;
mod case_json;
mod case_resize;
mod counters_switches;
mod data_file_crash;
mod disk_crash;
mod disk_engine;
mod disk_faults;
mod disk_outliers;
mod disk_semantics;
mod driver_interface;
mod dump_snapshots;
mod enumerate_states;
mod excused_errors;
mod exec_sched;
mod exhaust_slice;
mod guard_crashes;
mod post_crash_pins;
mod robustness;
mod scale;
mod served;
mod shrink_mechanics;
mod trace_import;
mod trace_recorded;
mod trace_run;
mod unit;
mod verify_corpus;
mod verify_qemu_oracle;
