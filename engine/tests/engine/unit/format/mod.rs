//! The unit tests of `engine::format`'s modules.

mod compress;
mod entry;
mod header;
mod refcount;
mod snapshot;
