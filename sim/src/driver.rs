//! The driver interface: what the runner needs of the qcow2 driver it
//! tests in process on the simulated disks, so that a driver other than
//! qcsim's engine plugs in with an adapter and runs under the same
//! workloads, schedules, crashes, model and checker, deterministically.
//!
//! [`DriverKind`] makes and opens images on the simulated disks;
//! [`Driver`] is an opened image as the runner drives it: the five guest
//! requests (three of them also flagged FUA) and the clean close, plus
//! what only the engine can say (its counters, how often each guard's
//! condition arose, where a guest sector lives on the host), which other
//! drivers leave at their defaults.
//! [`EngineDriver`] is qcsim's engine behind both; [`crate::runner`]
//! drives only these traits, and `run_case_on` takes the kind.
//!
//! Drivers run on the simulation's single-threaded executor: their
//! futures need not be `Send`, and they must do their I/O through the
//! `SimDisk`s they are given (any other clock, thread or I/O would make a
//! run depend on more than its case). Errors are the engine's
//! [`engine::Error`]: an adapter maps its own into it, I/O errors into
//! `Error::Io` so that the runner can excuse those an injected fault
//! explains. Drivers out of process (QEMU over NBD) have their own,
//! synchronous interface, `qemu::run::Guest` in the `qcsim` crate.

use std::future::Future;
use std::pin::Pin;

use engine::{Backing, Counters, CreateOptions, EngineOptions, Error, Guard, Image};

use crate::case::{Amend, ImageSpec, Op};
use crate::disk::SimDisk;

/// A driver's request in flight.
pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + 'a>>;

/// An opened image, as the runner drives it.
pub trait Driver {
    /// Read `buf.len()` guest bytes at `offset`.
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> DriverFuture<'a, ()>;
    /// Write `data` at guest `offset`.
    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()>;
    /// Make `len` guest bytes at `offset` read as zeroes (`unmap`: the
    /// clusters may be deallocated).
    fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> DriverFuture<'_, ()>;
    /// Discard `len` guest bytes at `offset` (advisory).
    fn discard(&self, offset: u64, len: u64) -> DriverFuture<'_, ()>;
    /// Make every completed write durable.
    fn flush(&self) -> DriverFuture<'_, ()>;
    /// The clean close: write back everything, leave the image clean.
    fn close(self: Box<Self>) -> DriverFuture<'static, ()>;

    /// [`Driver::write`] flagged FUA: once it returns Ok, its bytes and
    /// whatever the driver needs to read them back are durable. A driver
    /// with no FUA of its own gets the request then a flush, as QEMU's
    /// block layer emulates FUA for a driver that lacks it.
    fn write_fua<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            self.write(offset, data).await?;
            self.flush().await
        })
    }
    /// [`Driver::write_zeroes`] flagged FUA (see [`Driver::write_fua`]).
    fn write_zeroes_fua(&self, offset: u64, len: u64, unmap: bool) -> DriverFuture<'_, ()> {
        Box::pin(async move {
            self.write_zeroes(offset, len, unmap).await?;
            self.flush().await
        })
    }
    /// [`Driver::discard`] flagged FUA (see [`Driver::write_fua`]).
    fn discard_fua(&self, offset: u64, len: u64) -> DriverFuture<'_, ()> {
        Box::pin(async move {
            self.discard(offset, len).await?;
            self.flush().await
        })
    }

    /// Write `data` (whole clusters at a cluster-aligned `offset`)
    /// compressed, as `qemu-io write -c` asks. A driver without
    /// compressed writes refuses with `Error::Unsupported`.
    fn write_compressed<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        let _ = (offset, data);
        unsupported("compressed writes")
    }
    /// Take an internal snapshot named `name` (nothing else in flight).
    fn snapshot_create<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        let _ = name;
        unsupported("internal snapshots")
    }
    /// Revert the guest disk to the snapshot named `name`.
    fn snapshot_apply<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        let _ = name;
        unsupported("internal snapshots")
    }
    /// Delete the snapshot named `name`.
    fn snapshot_delete<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        let _ = name;
        unsupported("internal snapshots")
    }
    /// Amend the image's format options as `change` says (nothing else
    /// in flight), as `qemu-img amend` does; a change the image cannot
    /// take is refused with [`Error::Amend`] before anything changes.
    fn amend(&mut self, change: Amend) -> DriverFuture<'_, ()> {
        let _ = change;
        unsupported("amend")
    }
    /// Change the guest disk's size to `bytes` (nothing else in flight),
    /// as `qemu-img resize` does.
    fn resize(&mut self, bytes: u64) -> DriverFuture<'_, ()> {
        let _ = bytes;
        unsupported("resize")
    }
    /// The names of the image's internal snapshots, in table order.
    fn snapshot_names(&self) -> DriverFuture<'_, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    /// Read through `backing` where the image has no data (the runner
    /// builds it: a raw disk, or the backing qcow2 opened read-only by the
    /// engine). A driver without backing files refuses.
    fn attach_backing(&mut self, backing: Backing<SimDisk>) -> Result<(), Error> {
        drop(backing);
        Err(Error::Unsupported(
            "this driver does not take a backing file".into(),
        ))
    }
    /// The engine's counters (zero for another driver).
    fn counters(&self) -> Counters {
        Counters::default()
    }
    /// How often `guard`'s condition arose (0 for another driver: armed
    /// guard crashes then never fire).
    fn guard_count(&self, guard: Guard) -> u64 {
        let _ = guard;
        0
    }
    /// The probe that says which multi-step metadata operation runs and
    /// in which step (`engine::steps`), read when the power goes; `None`
    /// for a driver that does not say (crash points then go uncounted).
    fn step_probe(&self) -> Option<engine::StepProbe> {
        None
    }
    /// The host offset guest byte `guest` maps to, if it maps to a data
    /// cluster (for describing a wrong read; `None` when unknown).
    fn host_offset(&self, guest: u64) -> DriverFuture<'_, Option<u64>> {
        let _ = guest;
        Box::pin(async { Ok(None) })
    }
}

/// [`Driver::amend`] on qcsim's engine: the `Image` call for each change
/// (for adapters that wrap an engine image, too).
pub fn amend_engine(img: &mut Image<SimDisk>, change: Amend) -> DriverFuture<'_, ()> {
    Box::pin(async move {
        match change {
            Amend::Version(3) => img.upgrade_to_v3().await,
            Amend::Version(_) => img.downgrade_to_v2(&mut |_, _| {}).await,
            Amend::LazyRefcounts(on) => img.set_lazy_refcounts(on).await,
            Amend::RefcountBits(bits) => img.set_refcount_bits(bits).await,
        }
    })
}

/// A driver's refusal of what it does not do.
fn unsupported<'a, T: 'a>(what: &str) -> DriverFuture<'a, T> {
    let e = Error::Unsupported(format!("this driver does not do {what}"));
    Box::pin(async move { Err(e) })
}

/// How a driver makes and opens images on the simulated disks.
pub trait DriverKind {
    /// Create an image with `options` on `disk` (its external data file,
    /// if the options name one, on `data`).
    fn create(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: CreateOptions,
    ) -> DriverFuture<'static, ()>;
    /// Open the image on `disk` (repairing it first if a crash left it
    /// dirty, as opening must).
    fn open(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: EngineOptions,
    ) -> DriverFuture<'static, Box<dyn Driver>>;
    /// [`DriverKind::open`], with `probe` as the opened image's step probe
    /// ([`Driver::step_probe`]) from the start, so that a crash inside
    /// the repair an open runs is placed and counted; a driver without a
    /// probe ignores it.
    fn open_probed(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: EngineOptions,
        probe: engine::StepProbe,
    ) -> DriverFuture<'static, Box<dyn Driver>> {
        drop(probe);
        self.open(disk, data, options)
    }
    /// Whether the driver promises never to have two write-like requests
    /// in flight over the same bytes of a disk, so that the runner fails a
    /// case where it does (`crate::disk::Overlap`). The engine promises
    /// it: it waits out in-flight writes over the same guest bytes, and its
    /// crash rules order each metadata write after what it depends on. A
    /// foreign driver may pass a guest's own overlapping writes straight
    /// through, which is the guest's race, not the driver's.
    fn orders_overlapping_writes(&self) -> bool {
        false
    }
    /// Whether the driver does operation `op` at all. One it does not is
    /// never sent: the runner skips it, counted by kind
    /// (`RunCounts::driver_skipped_*`), and the model never hears of it,
    /// so the rest of the case is judged as if the workload had not asked
    /// for it. The default says no to exactly what [`Driver`]'s defaults
    /// refuse (compressed writes, snapshot operations, amends, resizes),
    /// so an adapter that leaves those at their defaults has them skipped;
    /// one that implements them says yes here too. A driver that says yes
    /// and then answers `Error::Unsupported` fails the case: it broke its
    /// word.
    fn does(&self, op: &Op) -> bool {
        !matches!(
            op,
            Op::WriteCompressed { .. }
                | Op::SnapshotCreate
                | Op::SnapshotApply { .. }
                | Op::SnapshotDelete { .. }
                | Op::Amend { .. }
                | Op::Resize { .. }
        )
    }
    /// Why the driver cannot run a case whose image is `image` at all
    /// (None: it can): such a case is skipped whole, with this reason in
    /// its report (`RunReport::skipped`), never run and never failed. The
    /// default refuses a backing file, as [`Driver::attach_backing`]'s
    /// default does.
    fn refuses(&self, image: &ImageSpec) -> Option<String> {
        image
            .backing
            .is_some()
            .then(|| "a backing file (this driver takes none)".to_string())
    }
}

/// qcsim's engine.
pub struct EngineDriver;

impl DriverKind for EngineDriver {
    fn create(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: CreateOptions,
    ) -> DriverFuture<'static, ()> {
        Box::pin(async move { Image::create_with_data(&disk, data.as_ref(), &options).await })
    }

    fn open(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: EngineOptions,
    ) -> DriverFuture<'static, Box<dyn Driver>> {
        // A fresh probe is the one `Image::open_with_data` makes.
        self.open_probed(disk, data, options, engine::StepProbe::default())
    }

    fn open_probed(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: EngineOptions,
        probe: engine::StepProbe,
    ) -> DriverFuture<'static, Box<dyn Driver>> {
        Box::pin(async move {
            let img = Image::open_probed(disk, data, options, probe).await?;
            Ok(Box::new(img) as Box<dyn Driver>)
        })
    }

    fn orders_overlapping_writes(&self) -> bool {
        true
    }

    fn does(&self, _op: &Op) -> bool {
        true
    }

    fn refuses(&self, _image: &ImageSpec) -> Option<String> {
        None
    }
}

impl Driver for Image<SimDisk> {
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> DriverFuture<'a, ()> {
        Box::pin(Image::read(self, offset, buf))
    }
    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(Image::write(self, offset, data))
    }
    fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> DriverFuture<'_, ()> {
        Box::pin(Image::write_zeroes(self, offset, len, unmap))
    }
    fn discard(&self, offset: u64, len: u64) -> DriverFuture<'_, ()> {
        Box::pin(Image::discard(self, offset, len))
    }
    fn flush(&self) -> DriverFuture<'_, ()> {
        Box::pin(Image::flush(self))
    }
    fn close(self: Box<Self>) -> DriverFuture<'static, ()> {
        Box::pin(async move { Image::close(*self).await.map(|_| ()) })
    }
    fn write_fua<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(Image::write_fua(self, offset, data))
    }
    fn write_zeroes_fua(&self, offset: u64, len: u64, unmap: bool) -> DriverFuture<'_, ()> {
        Box::pin(Image::write_zeroes_fua(self, offset, len, unmap))
    }
    fn discard_fua(&self, offset: u64, len: u64) -> DriverFuture<'_, ()> {
        Box::pin(Image::discard_fua(self, offset, len))
    }
    fn write_compressed<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(Image::write_compressed(self, offset, data))
    }
    fn snapshot_create<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        // The date is the engine's to leave at zero: a run reads no clock.
        Box::pin(async move { Image::snapshot_create(self, name, 0, 0).await.map(|_| ()) })
    }
    fn snapshot_apply<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(Image::snapshot_apply(self, name))
    }
    fn snapshot_delete<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(Image::snapshot_delete(self, name))
    }
    fn amend(&mut self, change: Amend) -> DriverFuture<'_, ()> {
        amend_engine(self, change)
    }
    fn resize(&mut self, bytes: u64) -> DriverFuture<'_, ()> {
        Box::pin(Image::resize(self, bytes))
    }
    fn snapshot_names(&self) -> DriverFuture<'_, Vec<String>> {
        Box::pin(async move {
            let table = Image::snapshots(self).await?;
            Ok(table.into_iter().map(|s| s.name).collect())
        })
    }
    fn attach_backing(&mut self, backing: Backing<SimDisk>) -> Result<(), Error> {
        Image::attach_backing(self, backing);
        Ok(())
    }
    fn counters(&self) -> Counters {
        Image::counters(self)
    }
    fn guard_count(&self, guard: Guard) -> u64 {
        Image::guard_count(self, guard)
    }
    fn step_probe(&self) -> Option<engine::StepProbe> {
        Some(Image::step_probe(self))
    }
    fn host_offset(&self, guest: u64) -> DriverFuture<'_, Option<u64>> {
        Box::pin(Image::host_offset(self, guest))
    }
}
