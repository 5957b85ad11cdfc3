//! The library's unit tests, one module per module of `tools` they test
//! (`unit::io::parse` tests `tools::io::parse`): here in the integration
//! binary rather than beside their code, so `cargo test` builds the library
//! once, not a second time in test mode.

mod bench;
mod check;
mod convert;
mod create;
mod files;
mod info;
mod io;
mod measure;
mod progress;
mod qemu_args;
