//! The library's unit tests, one module per module of `sim` they test
//! (`unit::disk::store` tests `sim::disk::store`): here in the integration
//! binary rather than beside their code, so `cargo test` builds the library
//! once, not a second time in test mode.

mod bench;
mod campaign;
mod disk;
mod exhaust;
mod iotrace;
mod rng;
mod runner;
mod shrink;
mod trace;
