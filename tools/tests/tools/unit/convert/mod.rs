//! The unit tests of `tools::convert`'s modules.

mod fresh;
