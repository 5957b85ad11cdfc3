//! The unit tests of `sim::exhaust`'s modules.

mod vocab;
