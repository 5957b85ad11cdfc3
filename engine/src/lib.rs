//! qcsim's qcow2 engine: the on-disk format, metadata caches, allocation,
//! copy-on-write and the guest read/write/flush paths, generic over a
//! [`dev::BlockDev`].
//!
//! The engine runs single-threaded with cooperative concurrency: many guest
//! requests may be in flight on one [`Image`] at once and interleave at every
//! await, as QEMU's coroutines do. Nothing in the engine's logic reads a
//! clock, spawns a thread or draws a random number; that belongs to whoever
//! drives it. The one exception is the real-file device, `dev::FileDev`,
//! whose I/O worker threads (`dev::IoPool`) run the blocking system calls:
//! the engine still sees one single-threaded device.

mod alloc_wait;
mod allocator;
mod allocs;
pub mod amend;
mod backing_file;
mod broken;
mod cache;
mod compress;
mod compressed_write;
pub mod counters;
mod cow;
mod create;
mod data_file;
pub mod dev;
mod discard;
pub mod error;
pub mod format;
mod geometry;
mod grow;
mod growth;
pub mod guards;
pub mod image;
mod inflight;
mod l1l2;
mod mapping;
mod meta_clusters;
mod open;
pub mod options;
mod prealloc;
mod ranges;
mod read;
mod rebuild;
mod refcount;
mod reftable;
mod resize;
mod snapshot;
mod snapshot_refs;
pub mod status;
mod sync;
mod vmstate;
mod write;
mod writeback;

pub use counters::{Counters, RarePaths};
pub use error::{CompressedWriteError, Error, Result, SnapshotError};
pub use format::snapshot::Snapshot;
pub use guards::{Guard, GuardCounts};
pub use image::{Backing, Compat, CreateOptions, Image, MAX_L1_BYTES};
pub use options::{EngineOptions, Switches};
pub use prealloc::{fill_zeroes, Preallocation};
pub use snapshot::find_snapshot;
pub use status::Status;
