//! The harness on QEMU's own qcow2 driver (`--driver qemu`): a case's
//! workload sent by our NBD client to `qemu-nbd`, whose qcow2 image lives
//! on the simulated disk (`qemu::disk`, served over NBD in this process);
//! at each crash point `qemu-nbd` is killed with SIGKILL, crash states are
//! built from the disk as the power went, and each is judged by the model,
//! the checker and `qemu-img check`; `qemu::run` holds the case's run.
//!
//! What differs from the in-process engine (docs/drivers.md): QEMU's own scheduling is not seeded, so a seed fixes the
//! workload, the disk's latencies and the crash states drawn, not QEMU's
//! interleaving; the operations of a concurrency group are sent one after
//! another (the client keeps one request in flight); a crash comes between
//! two operations; faults are not injected (no error from QEMU is
//! excused). A backing file is a real file beside the image, never
//! crashed; an external data file is a second simulated disk, losing
//! power with the image's. Each epoch's request logs (one per disk) are
//! kept, so a failing case's crash states are rebuilt bit for bit without
//! QEMU (`qcsim disk-replay`).
//!
//! `--driver imago` runs the same way with the imago library in place of
//! `qemu-nbd` (`qemu::imago`): its storage is an NBD client of the same
//! simulated disk, the `Guest` trait of `qemu::guest` is what both present.
//! Snapshot operations, amends and resizes, which NBD has no request for,
//! run through `qemu-img` on the image where it lies (over NBD, on the
//! epoch's disks) between the driver's close and its reopening, for
//! either driver (`run::alone_op`).

pub mod disk;
pub mod guest;
pub mod imago;
pub mod run;
