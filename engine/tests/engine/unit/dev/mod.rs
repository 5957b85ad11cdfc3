//! The unit tests of `engine::dev`'s modules.

mod file;
mod lock;
mod pool;
