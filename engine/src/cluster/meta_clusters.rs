//! The clusters metadata occupies besides the header and the L1 and
//! refcount tables (`MetaClusters`): the host offsets of the refcount
//! blocks and of the L2 tables the active L1 table has pointed at, for the
//! overlap check (`refcount::is_metadata_cluster`): guest data must never
//! be written over them, and the allocator must never hand them out.
//!
//! Invariants: a cluster enters when it becomes a refcount block or an L2
//! table (found at open, created, or copied for a write) and leaves only
//! when its refcount drops to 0 (`refcount::apply_ready_frees`); a table
//! still shared with a snapshot stays in. The header, L1 and refcount
//! tables are checked from the header instead. This module does no I/O.
//!
//! Part of `Meta`, reached only through the metadata lock's guard.

use std::collections::BTreeSet;

pub(crate) struct MetaClusters(BTreeSet<u64>);

impl MetaClusters {
    /// The metadata clusters an open found.
    pub(crate) fn new(found: BTreeSet<u64>) -> Self {
        MetaClusters(found)
    }

    /// The cluster at host offset `off` holds metadata.
    pub(crate) fn contains(&self, off: u64) -> bool {
        self.0.contains(&off)
    }

    /// A refcount block or L2 table now lives at host offset `off`.
    pub(crate) fn insert(&mut self, off: u64) {
        self.0.insert(off);
    }

    /// Refcount blocks now live at these host offsets.
    pub(crate) fn insert_all(&mut self, offs: impl IntoIterator<Item = u64>) {
        self.0.extend(offs);
    }

    /// The cluster at host offset `off` is free: no metadata any more.
    pub(crate) fn remove(&mut self, off: u64) {
        self.0.remove(&off);
    }
}
