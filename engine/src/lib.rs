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
//! | module | holds |
//! | --- | --- |
//! | `dev/` | re-exports `blockdev` (`BlockDev`, `MemDev`, the test wrappers); `FileDev` (fdatasync, fallocate, O_DIRECT; a request goes to a worker with an owned copy of its data, unless it would be the only one in flight, when it runs on the caller's thread from the caller's memory, as aligned `IoBuf`s let O_DIRECT use it); `pool`: `IoPool`, the worker threads (the only part of the engine that starts threads) and the decision to run alone (`IoPool::alone`: yield once so every other ready task runs, then alone only if no job is in flight and no other request is deciding); `lock`: the OFD byte-range locks QEMU's file driver takes (byte 100+i for each permission used, 200+i for each not shared: consistent read, write, write unchanged, resize), so qcsim and QEMU keep each other out of an image one is writing |
//! | `format/` | pure encoding: `header` (v2/v3 header, extensions kept verbatim, feature bits), `entry` (L1/L2 entry bit layouts and the `L2Mapping` enum; the compressed descriptor decoded and encoded), `refcount` (1- to 64-bit refcount packing), `snapshot` (the internal snapshot table: one entry decoded at a time from hostile bytes, each size bounded by QEMU's limits before anything is allocated, or asking for more bytes; a whole table encoded, 8-byte aligned, with the 24 bytes of extra data QEMU writes), `table` (tables of big-endian 64-bit entries to and from bytes) |
//! | `geometry` | sizes derived from the header, offset-to-index helpers named as the spec names them |
//! | `image` | `Image` (its state, `close`), `CreateOptions`, `Backing`; `Meta`, the metadata state under `meta_lock`: the header, its flags (`header_dirty`, `dirty_on_disk`, `poisoned`) and the state owners below, each changed only through its own methods |
//! | `l1l2` | state owner: the L1 table and which of its entries are dirty, the L2 table cache; entry get/set (`l1_entry`, `set_l1_entry`, `l2_entry`, `update_l2_entry`), dirty iteration and mark-clean for writeback, `decode_slot`; no I/O |
//! | `reftable` | state owner: the refcount table and whether it is dirty, the refcount block cache, lazy refcounts; refcount get/set in a cached block, adding a block, replacing the table, dirty iteration; no I/O |
//! | `meta_clusters` | state owner: the host offsets of refcount blocks and L2 tables, for the overlap check (guest data and allocations never land on them) |
//! | `allocator` | state owner: where the free-cluster search starts, the high-water mark of clusters in use (`end_cluster`), where compressed clusters are being packed (`CompressedTail`, QEMU's free byte offset; forgotten when its cluster is freed), the queued frees (`queue_free`, `mark_durable`, `take_ready_frees`); no I/O |
//! | `growth` | state owner: what growing the file has done this session (its length before, whether growing is off, the range it zeroed); no I/O |
//! | `create` | formatting a new image as named steps: check the options, plan the layout, build the header, write tables then the header; without preallocation the file ends after the L1 table's own bytes (not its whole cluster), as QEMU's does |
//! | `prealloc` | `preallocation=metadata\|falloc\|full` (`Preallocation`): `Plan` replays QEMU's allocator (its search start, refcount block placement, refcount table growth and falloc's refcount area) on a model of the refcounts, with no I/O, so that every table, data cluster and even each replaced refcount table lands where QEMU's does, then writes the image (data clusters left sparse, fallocated or zeroed); `fill_zeroes`; `Image::looks_preallocated`, QEMU's test for whether `qemu-img map` asks the file for holes |
//! | `open` | opening an image as named steps: header, features, table sizes and places, L1 and refcount table validation, metadata clusters, assembling the state, recovery (dirty-bit rebuild) |
//! | `cache` | cluster-sized table cache (L2 tables, refcount blocks) with dirty bits and LRU victims; no I/O of its own |
//! | `mapping` | what an L2 entry means here (`decode_l2`, with the data-file rule for offset 0), the device guest data lives on (`data_dev`), L1/L2 lookup (loading and evicting L2 tables of the `l1l2` owner), runs of clusters that map alike, L2 table allocation and copy (snapshot-shared tables) |
//! | `refcount` | refcount get/set (loading and evicting blocks of the `reftable` owner), contiguous cluster allocation (`alloc_data_clusters`: a data file's clusters need none; searching from the `allocator`'s start), refcount block creation, refcount table growth, applying deferred frees, the metadata overlap check |
//! | `grow` | growing the image file ahead of allocation with one no-fallback write_zeroes (zero_cow, seed 001's second point), and trimming it back at close; its state is the `growth` owner |
//! | `inflight` | in-flight guest writes (byte ranges), data-I/O sequence numbers; holds the allocation table |
//! | `ranges` | `RangeSet`: sorted, disjoint byte ranges (what an allocation's writes have filled) |
//! | `allocs` | the allocation table (`AllocTable`): every unlinked allocation (`Alloc`, QEMU's `QCowL2Meta`) by guest start with a unique `AllocId`, its lifecycle (Open, Committing, Doomed; partly linked) changed only through verbs that check the move in debug builds, the named waits on it (`AllocWait`) and when each is over, and `CowFailure` (what a failed COW does to its allocation) |
//! | `alloc_wait` | waiting on the allocation table: each wait in the queue of its name (`Image::alloc_waits`), and who wakes which |
//! | `write` | the write path: dependencies, in-place writes, allocation, COW, commit and link |
//! | `cow/` | copy-on-write: `source` (COW sources: zero, backing, old cluster, compressed; `cow_pieces`; reading them), `plan` (the COW planner: one pure function from an allocation's remaining COW, its facts and the switches to a `CowPlan`: skip, zero, copy, merged head + data + tail; unit-tested without I/O), `exec` (describing an allocation's COW as a `CowJob`, carrying a plan out) |
//! | `read` | the read path, backing reads, compressed clusters; `host_offset` and `is_compressed`, what `qemu-img map` asks of a data cluster |
//! | `compress` | compressed clusters both ways: decoding deflate (type 0) and zstd (type 1, frames until one cluster), output and zstd window capped; encoding one cluster as QEMU reads it back (raw deflate with a 4 KiB window and memory level 9 through `zlib-rs`, since QEMU inflates with window bits -12; one zstd frame at the default level), `None` when it does not fit in a cluster less one byte |
//! | `compressed_write` | `Image::write_compressed` (`qemu-io write -c`, `convert -c`): whole clusters (the disk's last partial one padded with zeroes), no external data file, never over a cluster that has a host cluster (QEMU's EIO), each refusal a typed `CompressedWriteError`; a cluster that does not shrink goes through `write`; bytes placed as QEMU's byte allocator places them (packed after the previous compressed cluster in the host cluster it ended in, the `allocator`'s `CompressedTail`, one reference per host cluster touched), the L2 table got first as QEMU does; the guest cluster held (`begin_write`) and allocations in flight there settled, data written with `meta_lock` dropped, the L2 entry set only after the data write completed |
//! | `data_file` | external data files: create/open checks, host offset = guest offset (`check_data_entry`), raw-external-data upkeep |
//! | `discard` | discard, write_zeroes, `make_empty` (every L2 entry unallocated, the clusters freed once that is durable: what `qemu-img commit` leaves of the image) |
//! | `amend` | `qemu-img amend`'s changes to an open image: `Image::upgrade_to_v3` (snapshot entries lacking version 3's extra data rewritten, then the header with a feature name table), `downgrade_to_v2` (QEMU's refusals, refcounts written and the dirty bit cleared, zero clusters converted (a kept host cluster zeroed and made data; otherwise unallocated, or a zeroed data cluster over a backing file), zero clusters in snapshots refused, progress per L1 entry), `set_refcount_bits` (every refcount read and checked to fit, new blocks and table written past the end counting themselves and the old structures as free, then the header switched and the in-memory refcount state replaced), `set_lazy_refcounts`; the header always last, in one write and a flush |
//! | `backing_file` | `Image::set_backing_file`: the backing file name and format in the header (one header write after everything pending is durable, then a flush; a name that does not fit the header cluster is refused before anything is written) |
//! | `resize` | `Image::resize`: grow (a new L1 table if needed, durable before the header names it; the grown range zeroed over a longer backing file), shrink (clusters and L2 tables past the end dropped; shared with a snapshot, copied first and their refcounts dropped by one); the L1 table keeps its length on a shrink, as QEMU's. Images with internal snapshots resize as QEMU 10's do: each snapshot keeps its own size |
//! | `snapshot` | internal snapshots: `Image::snapshots`, `snapshot_create` (dated by the caller), `snapshot_apply` (the snapshot's L1 table copied to a new active table; the virtual size becomes the snapshot's), `snapshot_delete`; each takes `&mut self`, quiesces (`flush_internal`), holds `meta_lock` and writes refcounts eagerly for its duration even under lazy refcounts. Order: references of a new table counted and durable before anything names it; the snapshot table written to fresh clusters and flushed before one header write switches `nb_snapshots` and `snapshots_offset`; dropped references released once the switch is durable; COPIED cleared durably before a snapshot shares the clusters and set again after the refcount of 1 is durable. Refused with an external data file (`SnapshotError::DataFile`), as QEMU does |
//! | `vmstate` | the VM state area (`qemu-io read -b`/`write -b`, QEMU's savevm): `Image::vm_state_offset` (the first L1 entry's worth of guest address space the disk does not use), `write_vmstate` (the ordinary write path past the disk, after growing the L1 table by half again at a time as QEMU's driver grows it, through `resize`'s `switch_l1`: every table written back, a new table durable with its refcounts, one header write), `read_vmstate` (zeroes past the table). Snapshots copy the whole L1 table, so they keep VM state; refused with an external data file |
//! | `snapshot_refs` | what an L1 table references (`l1_references`: L2 tables and their data clusters, counted per L1 table as QEMU counts), adding references (checked first, with a checked add so that a 64-bit refcount at its maximum cannot wrap, so an overflowing refcount refuses with nothing changed), dropping them (queued frees), and recomputing the active tables' COPIED flags from the refcounts (`recompute_copied`) |
//! | `status` | `block_status`: what a guest range holds (data, zero, unallocated, from the backing chain) and how far, on `map_run`; in-flight allocations count as data (used by `tools::convert`, `qcsim convert`, to skip holes) |
//! | `writeback` | the guest flush and ordered metadata writeback (see the crash rules) |
//! | `rebuild` | refcount rebuild when an image is opened with the dirty bit set, then the active tables' COPIED flags set exactly where the rebuilt refcount is 1 (as QEMU's repair of a dirty image mends them) |
//! | `sync` | FIFO async mutex, a wait queue, and wait queues by key (`WaitMap`, keys in order), single-threaded |
//! | `counters` | `Counters`, plain monotonic counts of one opened image (guest requests, COW areas, zeroing, growth, joins, writebacks) and of its rare paths; `RarePaths` is the rare-path view under stable snake_case names (refcount table growths, refcount blocks created, L2 and refcount block evictions and the dirty ones among them, COW and link failures at commit, allocations given up, commits forced by the open-allocation cap, growth turned off by an error, dirty-bit rebuilds on open). The L1 table has no count: it grows only in `resize`, outside guest I/O |
//! | `guards` | `Guard`, every rule below that the code enforces at one place, with its stable name, the broken variant that breaks it, and `GuardCounts` (in `Counters::guards`): how often each guard's condition arose |
//! | `rules` | the crash rules asserted in debug builds: a ledger of writes, per-device flush epochs and what each table relies on, fed by hooks where the engine writes, flushes, links and frees; each check panics naming its rule |
//! | `tracked` | writes and flushes of guest data, COW and growth, each one device request told to the `rules` ledger when issued and completed |
//! | `broken` | the deliberately broken variants (compiled into every build; only a simulated case selects one): `broken::is`, the one gate every hook asks, and the variants' own code |

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
mod create_options;
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
mod rules;
mod snapshot;
mod snapshot_refs;
pub mod status;
mod sync;
mod tracked;
mod vmstate;
mod write;
mod writeback;

pub use counters::{Counters, Optimisations, RarePaths};
pub use error::{CompressedWriteError, Error, Result, SnapshotError};
pub use format::snapshot::Snapshot;
pub use guards::{Guard, GuardCounts};
pub use image::{Backing, Compat, CreateOptions, Image, MAX_L1_BYTES};
pub use options::{EngineOptions, Switches};
pub use prealloc::{fill_zeroes, Preallocation};
pub use snapshot::find_snapshot;
pub use status::Status;
