//! The real-file tools as functions: each test calls a `tools` function on
//! image files in a temporary directory and asserts on the structured
//! result or the typed error, one module per tool; with the library's unit
//! tests (`unit`), in one test binary. Every test that opens files holds
//! `support::serial()`.

mod support;

mod bench;
mod check;
mod convert;
mod create;
mod dump;
mod info;
mod io;
mod rebase_commit;
mod resize;
mod unit;
