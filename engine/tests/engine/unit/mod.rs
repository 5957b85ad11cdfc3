//! The library's unit tests, one module per module of `engine` they test
//! (`unit::cow::plan` tests `engine::cow::plan`): here in the integration
//! binary rather than beside their code, so `cargo test` builds the library
//! once, not a second time in test mode.

mod alloc;
mod counters;
mod cow;
mod dev;
mod error;
mod format;
mod guards;
mod guest;
mod ops;
mod rules;
mod steps;
mod sync;
