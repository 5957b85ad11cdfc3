//! Handing out host clusters and tracking them until they are linked: the
//! allocator's state and the free queue (`allocator`), the allocation
//! table of unlinked allocations (`allocs`) and waiting on it
//! (`alloc_wait`), in-flight guest writes and data I/O (`inflight`), byte
//! range sets (`ranges`), and growing the file ahead of allocation
//! (`grow`, its state in `growth`).

pub(crate) mod alloc_wait;
pub(crate) mod allocator;
pub mod allocs;
pub(crate) mod grow;
pub(crate) mod growth;
pub mod inflight;
pub mod ranges;
