//! The unit tests of `sim::shrink`'s passes, on synthetic cases
//! ([`testcase`]).

mod device;
mod image;
mod testcase;
mod workload;
