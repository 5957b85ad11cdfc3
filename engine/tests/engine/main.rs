//! The engine's integration tests, one module per subject, and the
//! library's unit tests (`unit`), in one test binary (one link, not one per
//! file). Images go to QEMU's tools through `testkit`; devices with exact
//! faults or records come from `blockdev`.

mod support;

mod amend_crash;
mod block_status;
mod compressed_write;
mod data_file;
mod data_file_entry;
mod deferred_cow_error;
mod extended_l2;
mod file_dev;
mod fua;
mod grow_ahead;
mod header_write_error;
mod hostile_images;
mod qemu_images;
mod rare_paths;
mod raw_subcluster_zero;
mod roundtrip;
mod snapshot;
mod snapshot_crash;
mod unit;
mod xl2_data_file;
mod zstd_clusters;
