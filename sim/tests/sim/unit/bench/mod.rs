//! The unit tests of `sim::bench`'s modules.

mod fua;
mod job;
