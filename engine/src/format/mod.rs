//! The on-disk format: header and extensions, L1/L2 entries, refcount
//! entries, the internal snapshot table, the sizes derived from a header
//! (`geometry`), compressed clusters both ways (`compress`). Pure encoding
//! and decoding; no I/O.

pub mod compress;
pub mod entry;
pub(crate) mod geometry;
pub mod header;
pub mod refcount;
pub mod snapshot;
mod table;

pub use entry::{L1Entry, L2Entry, L2Mapping};
pub use header::Header;
pub(crate) use table::{be64_bytes, read_be64_table};
