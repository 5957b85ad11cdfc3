//! The deliberately broken engine variants (feature `broken`), each caught
//! by the harness: `cargo test -p sim --features broken --test broken`.

mod enumerate_broken;
mod exhaust_broken;
mod failure_data_broken;
mod guards_broken;
mod shrink_broken;
mod snapshot_broken;
mod trace_broken;
mod verify_broken;
