//! The engine's devices: the interface and the shared devices come from the
//! `blockdev` crate (re-exported here, so `engine::dev::BlockDev` names the
//! one trait everything implements); the real-file device lives here,
//! because only the engine's command-line users open real files.

mod file;

pub use blockdev::{
    BlockDev, CountingDev, DevCounts, DevError, Faulty, Injected, IoOp, MemDev, Recorder, Request,
    RequestLog, WriteFlags, YieldDev, YieldN, ZeroFlags,
};
pub use file::{FileDev, FileOpenError, FileOptions, IoPool, DIRECT_ALIGN};
