//! The engine's devices: the interface and the shared devices come from the
//! `blockdev` crate (re-exported here, so `engine::dev::BlockDev` names the
//! one trait everything implements); the real-file device and the image
//! locks QEMU's file driver takes live here, because only the engine's
//! real-file users open files.

pub mod file;
pub mod lock;
pub mod pool;

pub use blockdev::{
    BlockDev, CountingDev, DevCounts, DevError, Faulty, Injected, IoOp, MemDev, Recorder, Request,
    RequestLog, WriteFlags, YieldDev, YieldN, ZeroFlags,
};
pub use file::{FileDev, FileId, FileOpenError, FileOptions, IoBuf, DIRECT_ALIGN};
pub use lock::{LockError, LockRequest, Perms};
pub use pool::IoPool;
