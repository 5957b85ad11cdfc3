//! The unit tests of `tools::io`'s modules.

mod format;
mod parse;
mod scan;
