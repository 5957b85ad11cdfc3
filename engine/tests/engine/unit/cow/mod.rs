//! The unit tests of `engine::cow`'s modules.

mod plan;
