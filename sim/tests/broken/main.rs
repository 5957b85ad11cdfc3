//! The deliberately broken engine variants, each caught by the harness:
//! `cargo test --workspace --test broken` (left out of `cargo test --workspace`
//! by `test = false` in sim/Cargo.toml, to keep the README's test command in its
//! build budget; it runs in about 15 s). In a debug build each also trips the
//! engine's assertion of the crash rule it breaks (`rules_broken`); the other
//! modules turn those assertions off, to see what the harness catches alone.

mod enumerate_broken;
mod exhaust_broken;
mod failure_data_broken;
mod guards_broken;
mod overlap_broken;
// The assertions exist in debug builds only.
#[cfg(debug_assertions)]
mod rules_broken;
mod shrink_broken;
mod snapshot_broken;
mod trace_broken;
mod verify_broken;
