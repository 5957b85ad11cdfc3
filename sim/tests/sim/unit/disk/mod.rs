//! The unit tests of `sim::disk`'s modules.

mod durability;
mod overlap;
mod payload;
mod store;
