//! qcow2-rs (crates.io `qcow2-rs`, the async library behind ublk's qcow2
//! target) behind `sim::driver`, in process: this module owns the
//! simulated disk's implementation of qcow2-rs's I/O trait
//! (`Qcow2IoOps`), the mapping of the runner's requests to what qcow2-rs
//! offers, and the list of what it lacks (skipped, counted, never
//! failed).
//!
//! qcow2-rs does all its I/O through the four methods of `Qcow2IoOps`
//! (`read_to`, `write_from`, `fallocate`, `fsync`), native async trait
//! methods whose futures need not be `Send`; here they are requests to a
//! [`SimDisk`], and the runner's executor polls every future. No tokio
//! runtime runs: qcow2-rs's tokio and io_uring back ends
//! (`tokio_io::Qcow2IoTokio`, `uring::Qcow2IoUring`) and the helpers that
//! build them (`qcow2_setup_dev_tokio`, `qcow2_setup_dev_uring`, the
//! `_sync` ones that open files by path) are never called. Its core
//! (`dev::Qcow2Dev`) needs nothing of a runtime: futures-locks' locks and
//! futures' combinators, std's atomics and maps (with the fixed hasher
//! of drivers/vendor/qcow2-rs/PATCHED.md, so that a case replays).
//!
//! The mapping:
//! - create: qcow2-rs formats images only into a buffer for its tests
//!   (`Qcow2Header::format_qcow2`, one fixed layout, no options), so the
//!   harness makes the empty image with qcsim's engine and the case's
//!   options, as `qemu-img create` would; qcow2-rs then opens it.
//! - open: `utils::qcow2_alloc_dev` reads and parses the header through
//!   the disk, `Qcow2Dev::qcow2_prep_io` loads the L1 and refcount
//!   tables, with `qcow2_default_params!` (512-byte blocks, default
//!   caches, read-write, no direct I/O), as the crate's README opens one.
//! - read, write: `Qcow2Dev::read_at`, `write_at`.
//! - flush: `Qcow2Dev::flush_meta` (dirty refcount blocks, L2 slices and
//!   their tables written back) then `fsync_range` over the whole image,
//!   which makes the data written before durable too; FUA writes are a
//!   write then that flush (the interface's default), as QEMU's block
//!   layer emulates FUA for a driver without it.
//! - close: that flush. qcow2-rs has no dirty bit and no close of its own.
//! - `fallocate` (which qcow2-rs calls on a cluster it has just allocated,
//!   before writing part of it, and on new metadata clusters, counting on
//!   the range to read as zeroes afterwards, as Linux's
//!   `FALLOC_FL_PUNCH_HOLE` promises, with or without its zero-range flag)
//!   is the disk's write_zeroes with unmap allowed: zeroes either way. A
//!   plain discard would not do: the simulated disk's discard may leave
//!   the old bytes, as a real device's may.
//!
//! What it lacks ([`Qcow2Rs::does`], [`Qcow2Rs::refuses`]): guest
//! write_zeroes and discard (no such call in `Qcow2Dev`), compressed
//! writes (it reads compressed clusters, never writes them), internal
//! snapshots, amend and resize: those operations are skipped, counted by
//! kind. It opens no image with an incompatible feature bit set
//! (`Qcow2Header::from_buf` refuses every one), so cases whose image has
//! an external data file, extended L2 entries or zstd compression are
//! skipped whole; so are cases whose clusters are smaller than 4 KiB
//! (see [`Qcow2Rs::small_clusters`]) and cases with a backing file: qcow2-rs reads
//! through a backing image only as another `Qcow2Dev` of the same I/O type
//! opened by path (`qcow2_setup_dev_fn!`), where the runner hands a raw
//! disk or an image the engine opened.

use std::io;
use std::path::Path;

use engine::dev::{BlockDev, WriteFlags, ZeroFlags};
use engine::{CreateOptions, EngineOptions, Error};
use qcow2_rs::dev::{Qcow2Dev, Qcow2DevParams};
use qcow2_rs::error::{Qcow2Error, Qcow2Result};
use qcow2_rs::ops::Qcow2IoOps;
use sim::case::{ImageSpec, Op};
use sim::disk::SimDisk;
use sim::driver::{Driver, DriverFuture, DriverKind, EngineDriver};

/// The driver's name, as `--driver` takes it and reports print it.
pub const NAME: &str = "qcow2-rs";

/// The name of [`Qcow2Rs::DEFAULTS`], as `--driver` takes it.
pub const NAME_DEFAULTS: &str = "qcow2-rs-defaults";

/// qcow2-rs, as a `sim::driver` kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qcow2Rs {
    /// Also run images whose clusters are smaller than 4 KiB. qcow2-rs's
    /// default parameters (`qcow2_default_params!`, as its README opens an
    /// image) give its L2 and refcount caches 4 KiB slices, and a slice
    /// larger than a cluster breaks its own contract (`Qcow2Info::new`
    /// asserts it for slices it is given: at least a block, at most a
    /// cluster): such runs panic or spin forever inside one poll
    /// (docs/findings.md, qcow2-rs-small-clusters). Off, such cases are
    /// skipped with that reason, so that a campaign tests the rest.
    pub small_clusters: bool,
}

impl Qcow2Rs {
    /// The adapter campaigns run (`--driver qcow2-rs`).
    pub const FITTED: Qcow2Rs = Qcow2Rs {
        small_clusters: false,
    };
    /// Every image, small clusters too (`--driver qcow2-rs-defaults`),
    /// for the finding they show.
    pub const DEFAULTS: Qcow2Rs = Qcow2Rs {
        small_clusters: true,
    };
}

/// The cache slice qcow2-rs's default parameters use (`Qcow2Info::new`).
const DEFAULT_SLICE: u64 = 4096;

/// The simulated disk, as qcow2-rs's I/O back end.
struct SimIo {
    disk: SimDisk,
}

/// A disk error, in qcow2-rs's error type: its message kept whole, since
/// the runner excuses an error by the fault injected while the operation
/// ran, not by the error's type.
fn from_dev(e: engine::dev::DevError) -> Qcow2Error {
    Qcow2Error::from(io::Error::other(e.to_string()))
}

impl Qcow2IoOps for SimIo {
    async fn read_to(&self, offset: u64, buf: &mut [u8]) -> Qcow2Result<usize> {
        // Bytes past the disk's end read as zeroes, as past a file's end
        // qcow2-rs's own back ends read short, which it does not expect
        // of a read inside the image.
        self.disk.read(offset, buf).await.map_err(from_dev)?;
        Ok(buf.len())
    }

    async fn write_from(&self, offset: u64, buf: &[u8]) -> Qcow2Result<()> {
        self.disk
            .write(offset, buf, WriteFlags::default())
            .await
            .map_err(from_dev)
    }

    async fn fallocate(&self, offset: u64, len: usize, _flags: u32) -> Qcow2Result<()> {
        // Both flag values punch a hole in qcow2-rs's own back ends: the
        // range reads as zeroes after (see the module documentation).
        let flags = ZeroFlags {
            may_unmap: true,
            ..ZeroFlags::default()
        };
        self.disk
            .write_zeroes(offset, len as u64, flags)
            .await
            .map_err(from_dev)
    }

    async fn fsync(&self, _offset: u64, _len: usize, _flags: u32) -> Qcow2Result<()> {
        // The disk flushes whole, as fsync(2) does the file.
        self.disk.flush().await.map_err(from_dev)
    }
}

/// qcow2-rs's error, as the driver interface's.
fn from_qcow2(e: Qcow2Error) -> Error {
    Error::Driver {
        driver: NAME.into(),
        message: e.to_string(),
    }
}

/// An image opened by qcow2-rs.
struct Qcow2RsImage {
    /// None once closed. An image dropped without a close is a crash (the
    /// runner drops the image when the power goes) and is forgotten, not
    /// dropped: a crash runs none of the driver's code, and qcow2-rs
    /// asserts in the destructor of each cached metadata slice that it
    /// was written back (`AsyncLruCacheEntryInner::drop`), which a crash
    /// need not have done. The memory is the case's to lose: at most the
    /// caches of one image per crash.
    dev: Option<Qcow2Dev<SimIo>>,
}

impl Drop for Qcow2RsImage {
    fn drop(&mut self) {
        if let Some(dev) = self.dev.take() {
            std::mem::forget(dev);
        }
    }
}

impl Qcow2RsImage {
    fn dev(&self) -> &Qcow2Dev<SimIo> {
        self.dev
            .as_ref()
            .expect("an image is used only until it closes")
    }
}

/// What qcow2-rs does for a guest flush (see the module documentation).
async fn flush(dev: &Qcow2Dev<SimIo>) -> Result<(), Error> {
    dev.flush_meta().await.map_err(from_qcow2)?;
    dev.fsync_range(0, usize::MAX).await.map_err(from_qcow2)
}

/// A request qcow2-rs has no call for; never sent, since
/// [`Qcow2Rs::does`] says no to it.
fn lacks<'a>(what: &str) -> DriverFuture<'a, ()> {
    let e = Error::Unsupported(format!("qcow2-rs has no {what}"));
    Box::pin(async move { Err(e) })
}

impl Driver for Qcow2RsImage {
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let want = buf.len();
            let got = self.dev().read_at(buf, offset).await.map_err(from_qcow2)?;
            if got != want {
                return Err(Error::Driver {
                    driver: NAME.into(),
                    message: format!("read of {want} bytes at {offset} returned {got}"),
                });
            }
            Ok(())
        })
    }

    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(async move { self.dev().write_at(data, offset).await.map_err(from_qcow2) })
    }

    fn write_zeroes(&self, _offset: u64, _len: u64, _unmap: bool) -> DriverFuture<'_, ()> {
        lacks("write_zeroes")
    }

    fn discard(&self, _offset: u64, _len: u64) -> DriverFuture<'_, ()> {
        lacks("discard")
    }

    fn flush(&self) -> DriverFuture<'_, ()> {
        Box::pin(flush(self.dev()))
    }

    fn close(mut self: Box<Self>) -> DriverFuture<'static, ()> {
        Box::pin(async move {
            let r = flush(self.dev()).await;
            if r.is_ok() {
                // Written back: its destructor finds nothing dirty.
                drop(self.dev.take());
            }
            r
        })
    }
}

impl DriverKind for Qcow2Rs {
    fn create(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: CreateOptions,
    ) -> DriverFuture<'static, ()> {
        // qcow2-rs cannot make an image with options (see the module
        // documentation): qcsim's engine makes it, as qemu-img would.
        EngineDriver.create(disk, data, options)
    }

    fn open(
        &self,
        disk: SimDisk,
        _data: Option<SimDisk>,
        _options: EngineOptions,
    ) -> DriverFuture<'static, Box<dyn Driver>> {
        Box::pin(async move {
            let params: Qcow2DevParams = qcow2_rs::qcow2_default_params!(false, false);
            // The path only names the image in qcow2-rs's messages: every
            // byte goes through `SimIo`.
            let path = Path::new("sim-disk.qcow2");
            let (dev, _backing) = qcow2_rs::utils::qcow2_alloc_dev(path, SimIo { disk }, &params)
                .await
                .map_err(from_qcow2)?;
            dev.qcow2_prep_io().await.map_err(from_qcow2)?;
            Ok(Box::new(Qcow2RsImage { dev: Some(dev) }) as Box<dyn Driver>)
        })
    }

    fn does(&self, op: &Op) -> bool {
        matches!(
            op,
            Op::Write { .. } | Op::Read { .. } | Op::BackgroundRead { .. } | Op::Flush | Op::Crash
        )
    }

    fn refuses(&self, image: &ImageSpec) -> Option<String> {
        let c = &image.create;
        let why = if image.backing.is_some() {
            "a backing file (qcow2-rs reads one only as its own image opened by path)"
        } else if image.data_file.is_some() || c.data_file.is_some() {
            "an external data file (qcow2-rs opens no image with incompatible features)"
        } else if c.extended_l2 {
            "extended L2 entries (qcow2-rs opens no image with incompatible features)"
        } else if !self.small_clusters && c.cluster_size < DEFAULT_SLICE {
            "clusters smaller than 4 KiB (qcow2-rs's default cache slices are 4 KiB: finding qcow2-rs-small-clusters)"
        } else if c.compression_type != Default::default() {
            "zstd compression (qcow2-rs opens no image with incompatible features)"
        } else {
            return None;
        };
        Some(why.to_string())
    }
}
