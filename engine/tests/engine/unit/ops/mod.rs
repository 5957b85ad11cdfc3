//! The unit tests of `engine::ops`'s modules.

mod prealloc;
