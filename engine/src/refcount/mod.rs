//! Reference counts: the refcount table and block cache (`reftable`),
//! reading and changing counts, allocating and freeing (`counts`), what an
//! L1 table references and the COPIED flags (`snapshot_refs`), and the
//! rebuild of an image opened dirty (`rebuild`).

pub(crate) mod counts;
pub(crate) mod rebuild;
pub(crate) mod reftable;
pub(crate) mod snapshot_refs;
