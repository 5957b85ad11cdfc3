//! The unit tests of `sim::iotrace`'s modules.

mod blkparse;
mod compressed;
mod format;
mod lines;
mod plan;
mod strace;
