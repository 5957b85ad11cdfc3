//! Fuzz target `image_open`: bytes taken as an image file and opened
//! read-write by the engine, then a few reads, writes, zero writes,
//! discards and a flush, then a close. The engine must refuse a malformed
//! image with an error, never panic, and never hang (the requests run on
//! the simulation's executor, which reports a request that can never
//! finish).
//!
//! Input layout: the first `SCRIPT_LEN` bytes are the request script, the
//! rest is the image. Sizes are bounded: the engine's metadata memory
//! limit, requests of at most 64 KiB, and a device that refuses to grow
//! past `DEVICE_MAX` (an image may point its tables anywhere; a write far
//! past the end must not become a huge allocation in the test device).
//!
//! Not tested here: whether the data read back is right (the `case` target
//! and the runner judge that), backing files (not attached), concurrency
//! (one request at a time).

#![no_main]

use std::rc::Rc;

use engine::dev::{BlockDev, DevError, IoOp, MemDev, WriteFlags, ZeroFlags};
use engine::{EngineOptions, Image};
use libfuzzer_sys::fuzz_target;
use sim::exec::Sim;

/// Bytes of request script before the image.
const SCRIPT_LEN: usize = 24;
/// Bytes per scripted request: kind, offset (2), length.
const STEP: usize = 4;
/// Largest the in-memory device may grow.
const DEVICE_MAX: u64 = 64 << 20;

/// A `MemDev` that refuses writes and truncates past `DEVICE_MAX`.
struct Bounded(MemDev);

impl Bounded {
    fn check(&self, op: IoOp, offset: u64, len: u64) -> Result<(), DevError> {
        match offset.checked_add(len) {
            Some(end) if end <= DEVICE_MAX => Ok(()),
            _ => Err(DevError::NoSpace { op, offset, len }),
        }
    }
}

impl BlockDev for Bounded {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.0.read(offset, buf).await
    }

    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        self.check(IoOp::Write, offset, buf.len() as u64)?;
        self.0.write(offset, buf, flags).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.check(IoOp::WriteZeroes, offset, len)?;
        self.0.write_zeroes(offset, len, flags).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        self.0.discard(offset, len).await
    }

    async fn flush(&self) -> Result<(), DevError> {
        self.0.flush().await
    }

    fn len(&self) -> u64 {
        self.0.len()
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.check(IoOp::Truncate, len, 0)?;
        self.0.truncate(len).await
    }
}

fn run<T: 'static>(sim: &Sim, what: &str, f: impl std::future::Future<Output = T> + 'static) -> T {
    match sim.block_on(f) {
        Ok(v) => v,
        Err(e) => panic!("{what} never finished: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < SCRIPT_LEN {
        return;
    }
    let (script, image) = data.split_at(SCRIPT_LEN);
    let sim = Sim::new(0);
    let dev = Bounded(MemDev::from_bytes(image.to_vec()));
    let opts = EngineOptions {
        metadata_memory_limit: 16 << 20,
        ..EngineOptions::default()
    };
    let Ok(img) = run(&sim, "open", Image::open(dev, opts)) else {
        return;
    };
    let img = Rc::new(img);
    let size = img.virtual_size();
    for step in script.chunks_exact(STEP) {
        if size == 0 {
            break;
        }
        // Offsets anywhere in the disk (in 512-byte units, folded into it),
        // lengths 1 byte to 64 KiB, unaligned on purpose.
        let at = u64::from(u16::from_le_bytes([step[1], step[2]])) * 509 % size;
        let len = (u64::from(step[3]) * 257 + 1).min(size - at);
        let i = img.clone();
        let _ = match step[0] % 6 {
            0 | 1 => run(&sim, "read", async move {
                let mut buf = vec![0u8; len as usize];
                i.read(at, &mut buf).await
            }),
            2 => run(&sim, "write", async move {
                let buf = vec![step_fill(at); len as usize];
                i.write(at, &buf).await
            }),
            3 => run(&sim, "write_zeroes", async move {
                i.write_zeroes(at, len, true).await
            }),
            4 => run(&sim, "discard", async move { i.discard(at, len).await }),
            _ => run(&sim, "flush", async move { i.flush().await }),
        };
    }
    let Ok(img) = Rc::try_unwrap(img) else {
        panic!("image still shared after every request finished");
    };
    let _ = run(&sim, "close", img.close());
});

fn step_fill(at: u64) -> u8 {
    (at % 251) as u8 | 1
}
