//! The real-file tools as functions: each test calls a `tools` function on
//! image files in a temporary directory and asserts on the structured
//! result or the typed error, one module per tool, in one test binary.

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
