//! The unit tests of `engine::alloc`'s modules.

mod allocs;
mod inflight;
mod ranges;
