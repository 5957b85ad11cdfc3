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
//!
//! ## Modules
//!
//! Each folder's `mod.rs` lists its modules; each module's top comment says
//! what it owns.
//!
//! | module | holds |
//! | --- | --- |
//! | `image` | `Image`: its state (`Meta` inside the metadata lock, `MetaGuard`), and its whole public surface, each method a call into the module that implements it |
//! | `guest/` | the guest's requests: `read`, `write` (dependencies, in-place writes, allocation, commit and link), `discard` (and write_zeroes), `fua` (the same made durable as they complete), `compressed_write`, `vmstate`, `status` and `block_status` |
//! | `writeback` | the guest flush and the ordered metadata writeback that keeps the crash rules |
//! | `ops/` | whole-image operations: `create` (`create_options`, `prealloc`), `open`, `amend`, `backing_file`, `resize`, internal snapshots (`snapshot`), external data files (`data_file`) |
//! | `cow/` | copy-on-write: its sources (`source`), the pure planner (`plan`), carrying a plan out (`exec`) |
//! | `refcount/` | refcounts: the table and block cache (`reftable`), get/set, allocation and frees (`counts`), what L1 tables reference (`snapshot_refs`), the dirty-bit rebuild (`rebuild`) |
//! | `alloc/` | clusters handed out until linked: `allocator` (search start, end, free queue), the allocation table (`allocs`, `alloc_wait`), `inflight` writes, `ranges`, growing the file (`grow`, `growth`) |
//! | `cluster/` | guest to host clusters: the L1 table and L2 cache (`l1l2`), the table `cache`, `meta_clusters` (the overlap check), lookups, loads and evictions (`mapping`) |
//! | `format/` | pure encoding: `header`, `entry` (L1/L2), `refcount` packing, `snapshot` (the only parser of the snapshot table), `table`, `geometry`, `compress` (deflate and zstd clusters) |
//! | `dev/` | `BlockDev` re-exported, `FileDev` (fdatasync, fallocate, O_DIRECT), its worker threads (`pool`, the engine's only threads), QEMU's OFD byte-range locks (`lock`) |
//! | `sync` | `CoMutex<T>` (a FIFO lock that owns its state), a wait queue, wait queues by key (`WaitMap`); single-threaded |
//! | `counters`, `guards` | `Counters` and the rare-path view (`RarePaths`), each count declared once; `Guard`, each rule the code enforces at one place, counted |
//! | `steps` | the multi-step metadata operations (`MetaOp`) and their steps, the probe that says which one runs and where (`StepProbe`), crash points counted by both (`CrashPoints`) |
//! | `rules`, `tracked` | debug builds only: the crash rules asserted where they are kept: a ledger of tracked writes, per-device flush epochs and what each table relies on, fed by hooks where the engine writes, flushes, links and frees; each broken rule panics naming it |
//! | `broken` | the deliberately broken variants (only a simulated case selects one): `broken::is`, the one gate, and their code |
//! | `error`, `options` | the typed errors (`Error`, `AmendError`, `SnapshotError`, `CompressedWriteError`); `EngineOptions` and the optimisation `Switches` |

pub mod alloc;
mod broken;
mod cluster;
pub mod counters;
pub mod cow;
pub mod dev;
pub mod error;
pub mod format;
pub mod guards;
mod guest;
pub mod image;
pub mod ops;
pub mod options;
mod refcount;
pub mod rules;
pub mod steps;
pub mod sync;
mod tracked;
mod writeback;

pub use counters::{Counters, Optimisations, RarePaths};
pub use error::{AmendError, CompressedWriteError, Error, Result, SnapshotError};
pub use format::snapshot::Snapshot;
pub use guards::{Guard, GuardCounts};
pub use guest::status::Status;
pub use image::{Backing, Compat, CreateOptions, Image, MAX_L1_BYTES};
pub use ops::prealloc::{fill_zeroes, Preallocation};
pub use ops::snapshot::find_snapshot;
pub use options::{EngineOptions, Switches};
pub use steps::{CrashPoints, MetaOp, Step, StepProbe};
