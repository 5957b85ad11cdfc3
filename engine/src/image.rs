//! The opened image: its state (`Image`, with `Meta` inside the metadata
//! lock) and its whole public surface, in one place. Each public method
//! is a call into the module that implements it (`guest/`, `ops/`,
//! `writeback`), whose `impl` block adds a crate-private `*_impl` method
//! to [`Image`]; the rest of those blocks is the engine's own.

use std::cell::{Cell, RefCell};

use crate::alloc::allocator::{Allocator, FreeQueue};
use crate::alloc::allocs::AllocWait;
use crate::alloc::growth::Growth;
use crate::alloc::inflight::InFlight;
use crate::cluster::l1l2::L1L2;
use crate::cluster::meta_clusters::MetaClusters;
use crate::counters::Counters;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::format::geometry::Geometry;
use crate::format::header::Header;
use crate::format::snapshot::Snapshot;
use crate::guest::status::Status;
use crate::options::EngineOptions;
use crate::refcount::reftable::RefTable;
use crate::sync::{CoMutex, CoMutexGuard, WaitMap, WaitQueue};

pub use crate::ops::create_options::{
    Compat, CreateOptions, MAX_L1_BYTES, MAX_REFTABLE_BYTES, MIN_EXTENDED_L2_CLUSTER_SIZE,
};

/// The backing file of an image: raw, or a qcow2 image with its own chain.
pub enum Backing<D: BlockDev> {
    Raw(D),
    Qcow2(Box<Image<D>>),
}

/// Holding the metadata lock: what every function that reads or changes
/// `Meta` takes, so that none can run without the lock.
pub(crate) type MetaGuard<'a> = CoMutexGuard<'a, Meta>;

/// Metadata state, owned by `Image::meta` (a `CoMutex`): reached through
/// the lock's guard, never borrowed across an await. Each part is owned by
/// its module and changed through its methods; the header and the image's
/// flags live here.
pub(crate) struct Meta {
    /// The header as it is in memory (written by `Image::write_header`).
    pub header: Header,
    /// The header changed and is to be written at the next writeback.
    pub header_dirty: bool,
    /// The dirty bit is set in the header on disk.
    pub dirty_on_disk: bool,
    /// The L1 table and the L2 table cache (`l1l2`).
    pub tables: L1L2,
    /// The refcount table, the refcount block cache and whether refcounts
    /// are lazy (`reftable`).
    pub refs: RefTable,
    /// Refcount blocks and L2 tables, for the overlap check
    /// (`meta_clusters`).
    pub meta_clusters: MetaClusters,
    /// Where the search for free clusters starts, the high-water mark and
    /// the compressed packing tail (`allocator`).
    pub alloc: Allocator,
    /// What growing the file ahead of allocation has done (`growth`).
    pub growth: Growth,
}

/// An opened qcow2 image.
pub struct Image<D: BlockDev> {
    pub(crate) dev: D,
    /// The external data file, present exactly when the header sets
    /// incompatible bit 2; guest data I/O goes through `data_dev()`.
    pub(crate) data: Option<D>,
    pub(crate) backing: Option<Backing<D>>,
    pub(crate) opts: EngineOptions,
    pub(crate) geo: Geometry,
    /// The metadata state, reached only through its lock's guard.
    pub(crate) meta: CoMutex<Meta>,
    /// A metadata write or flush failed: memory and disk may disagree, so
    /// the image writes no more metadata (fail-stop). Outside `meta`
    /// because every path checks it, locked or not.
    pub(crate) poisoned: Cell<bool>,
    /// Frees waiting to become durable (see `FreeQueue`).
    pub(crate) frees: RefCell<FreeQueue>,
    pub(crate) inflight: RefCell<InFlight>,
    /// Woken when an in-flight write ends (overlap waits).
    pub(crate) writes_wq: WaitQueue,
    /// Waits on the allocation table, by what they wait for.
    pub(crate) alloc_waits: WaitMap<AllocWait>,
    pub(crate) counters: RefCell<Counters>,
    /// Which metadata writes are durable, for a FUA request that relies on
    /// what is already on disk (`MetaEpochs`). Outside `meta`: every
    /// metadata write counts itself, whichever lock its caller holds.
    pub(crate) meta_epochs: Cell<MetaEpochs>,
    /// The crash rules' ledger, for debug assertions (`rules`); kept apart
    /// from `meta` since it checks what `meta`'s owners do.
    pub(crate) rules: RefCell<crate::rules::RuleLedger>,
    /// Which multi-step metadata operation runs and in which step, for
    /// whoever drives the engine to read when the power goes (`steps`).
    pub(crate) steps: crate::steps::StepProbe,
}

/// Metadata writes issued without FUA, and how many of the first of them
/// a completed device flush has made durable (a flush makes durable what
/// completed before it was issued; the metadata lock keeps writes from
/// being issued while the engine's own flush is, so its mark is exact).
/// Equal: every metadata write so far is durable.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MetaEpochs {
    pub(crate) issued: u64,
    pub(crate) durable: u64,
}

impl MetaEpochs {
    pub(crate) fn all_durable(&self) -> bool {
        self.issued == self.durable
    }
}

impl<D: BlockDev> Image<D> {
    // Creating and opening.

    /// Format `dev` as an empty qcow2 image. Layout: header, refcount
    /// table, refcount blocks, L1 table, each starting on a cluster.
    pub async fn create(dev: &D, o: &CreateOptions) -> Result<()> {
        Self::create_with_data(dev, None, o).await
    }

    /// Open the image on `dev`. The backing file, if the header names one,
    /// is attached afterwards with [`Image::attach_backing`]. An image with
    /// an external data file needs [`Image::open_with_data`].
    pub async fn open(dev: D, opts: EngineOptions) -> Result<Self> {
        Self::open_with_data(dev, None, opts).await
    }

    /// [`Image::create`], with `data` the external data file when
    /// `o.data_file` names one (it is emptied and sized to the disk).
    /// With `data_file_raw` every L2 table is preallocated after the L1
    /// table, each cluster mapped to its own guest offset. Nothing is
    /// written before every option has been checked and the header built.
    pub async fn create_with_data(dev: &D, data: Option<&D>, o: &CreateOptions) -> Result<()> {
        Self::create_with_data_impl(dev, data, o).await
    }

    /// Read and parse the header of the image on `dev`, without opening
    /// it: enough to learn which data file or backing file it names.
    pub async fn read_header(dev: &D) -> Result<Header> {
        Self::read_header_impl(dev).await
    }

    /// Open the image on `dev` with `data` as its external data file. The
    /// data file must be given exactly when the header has incompatible
    /// bit 2 set; without it the open fails with
    /// [`Error::DataFileRequired`], naming the file the header names,
    /// unless it is read-only: that open describes the image, and guest
    /// reads fail with the same error.
    pub async fn open_with_data(dev: D, data: Option<D>, opts: EngineOptions) -> Result<Self> {
        Self::open_with_data_impl(dev, data, opts, Default::default()).await
    }

    /// [`Image::open_with_data`], with `probe` the image's step probe
    /// ([`Image::step_probe`]) from the start: whoever drives the open
    /// can tell where a repair it runs (the rebuild of an image left
    /// dirty) is when the power goes.
    pub async fn open_probed(
        dev: D,
        data: Option<D>,
        opts: EngineOptions,
        probe: crate::steps::StepProbe,
    ) -> Result<Self> {
        Self::open_with_data_impl(dev, data, opts, probe).await
    }

    // Guest requests.

    /// Read `buf.len()` bytes at guest offset `offset`.
    pub async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.read_impl(offset, buf).await
    }

    /// Write `buf` at guest offset `offset`.
    pub async fn write(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.write_impl(offset, buf).await
    }

    /// Write `data` at guest offset `offset` compressed, one cluster at a
    /// time. `offset` must be cluster aligned and `data` whole clusters,
    /// except that it may end at the disk's end inside the last cluster
    /// (padded with zeroes before compressing, as QEMU pads it). Each
    /// cluster that does not compress goes through [`Image::write`].
    /// Refused with [`Error::Compressed`]: an image with an external data
    /// file, a misaligned request, a target cluster that has a host
    /// cluster (clusters before it in the request are written).
    pub async fn write_compressed(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_compressed_impl(offset, data).await
    }

    /// Make the range read as zeroes. On version 3 images whole clusters
    /// become zero clusters: with `unmap` their host clusters are freed,
    /// without it a cluster's uncompressed host cluster stays allocated
    /// under the zero flag (QEMU's rule: a write_zeroes that may not unmap
    /// keeps the space, and a later write may reuse it). A partial cluster
    /// becomes a zero cluster when it holds no host cluster and the rest of
    /// it reads as zeroes already; other partial clusters are written with
    /// zeroes (or zero subclusters, with extended L2 entries).
    pub async fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> Result<()> {
        self.write_zeroes_impl(offset, len, unmap).await
    }

    /// Discard whole clusters in the range; they then read as zeroes
    /// (version 3) or from the backing file (version 2). Partial clusters
    /// at either end are left as they are.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.discard_impl(offset, len).await
    }

    /// [`Image::write`] flagged FUA (force unit access: Linux's REQ_FUA,
    /// NBD_CMD_FLAG_FUA): once it returns Ok its bytes, and every metadata
    /// change needed to read them back, survive a crash. Nothing else
    /// written before it need be durable.
    pub async fn write_fua(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.write_fua_impl(offset, buf).await
    }

    /// [`Image::write_zeroes`] flagged FUA: once it returns Ok the range
    /// reads as zeroes after a crash.
    pub async fn write_zeroes_fua(&self, offset: u64, len: u64, unmap: bool) -> Result<()> {
        self.write_zeroes_fua_impl(offset, len, unmap).await
    }

    /// [`Image::discard`] flagged FUA: once it returns Ok, what it changed
    /// in the mapping is durable.
    pub async fn discard_fua(&self, offset: u64, len: u64) -> Result<()> {
        self.discard_fua_impl(offset, len).await
    }

    /// Make every guest write that completed before this call durable.
    pub async fn flush(&self) -> Result<()> {
        self.flush_impl().await
    }

    // What a guest range holds.

    /// The status of the guest range starting at `offset`, and how many of
    /// the `len` bytes from `offset` share it (at least 1 when `len` is
    /// not 0). The range must lie inside the virtual disk. An empty range
    /// answers `(Status::Unallocated, 0)`.
    pub async fn block_status(&self, offset: u64, len: u64) -> Result<(Status, u64)> {
        self.block_status_impl(offset, len).await
    }

    /// As [`Image::block_status`], but where the data comes from the
    /// backing file, the backing chain is asked in turn: the answer is then
    /// never `Backing`. A raw backing file counts as data throughout (its
    /// holes are not looked for). The count may be shorter than the range
    /// that shares the status, where the layers answering change.
    pub async fn block_status_deep(&self, offset: u64, len: u64) -> Result<(Status, u64)> {
        self.block_status_deep_impl(offset, len).await
    }

    /// How the L2 table maps guest offset `guest` (its cluster, or with
    /// extended L2 entries its subcluster): the one lookup behind
    /// [`Image::is_compressed`], [`Image::host_offset`] and
    /// [`Image::zero_host_offset`], for a caller that wants more than one
    /// of them (`qemu-img map`). Host offsets in it are the cluster's.
    pub async fn mapping_at(&self, guest: u64) -> Result<crate::format::L2Mapping> {
        self.mapping_at_impl(guest).await
    }

    /// Whether guest offset `guest` lies in a compressed cluster linked in
    /// the L2 table (`qemu-img map`'s "compressed").
    pub async fn is_compressed(&self, guest: u64) -> Result<bool> {
        self.is_compressed_impl(guest).await
    }

    /// Where guest offset `guest` lives on the device, if it is a data
    /// cluster linked in the L2 table (for reports naming device writes).
    pub async fn host_offset(&self, guest: u64) -> Result<Option<u64>> {
        self.host_offset_impl(guest).await
    }

    /// The host offset of guest byte `guest` when it reads as zeroes from
    /// a cluster that keeps its host cluster (the zero flag over an
    /// offset, or a zero subcluster of a cluster with one), as QEMU's
    /// `qemu-img map` reports it; None otherwise.
    pub async fn zero_host_offset(&self, guest: u64) -> Result<Option<u64>> {
        self.zero_host_offset_impl(guest).await
    }

    /// Whether the image looks metadata-preallocated, as QEMU decides it
    /// (`qcow2_detect_metadata_preallocation`): among the first `clusters`
    /// host clusters (the file's length), at least `allocated * 10 / 9`
    /// and `allocated + 2` have a refcount, `allocated` being the clusters'
    /// worth of space the file really takes. Data clusters of such an
    /// image may be holes in the file, which then read as zeroes.
    pub async fn looks_preallocated(&self, clusters: u64, allocated: u64) -> Result<bool> {
        self.looks_preallocated_impl(clusters, allocated).await
    }

    // Changing the whole image.

    /// Drop every cluster of the image (`qemu-img commit` empties the
    /// image it committed): each L2 entry becomes unallocated, so the
    /// image reads as its backing file (or zeroes), and the clusters are
    /// freed once that is durable.
    pub async fn make_empty(&self) -> Result<()> {
        self.make_empty_impl().await
    }

    /// Set the virtual size to `new_size` bytes (a multiple of 512).
    /// Shrinking discards the guest data past the new end.
    pub async fn resize(&mut self, new_size: u64) -> Result<()> {
        self.resize_impl(new_size).await
    }

    /// Name `name` (format `format`) as the backing file in the header, or
    /// no backing file at all. The backing file attached is detached: the
    /// caller attaches the new one if it still reads through the image.
    pub async fn set_backing_file(
        &mut self,
        name: Option<&str>,
        format: Option<&str>,
    ) -> Result<()> {
        self.set_backing_file_impl(name, format).await
    }

    /// Make a version 2 image version 3: snapshot entries without the
    /// extra data version 3 requires are rewritten first, then the header
    /// (with the feature name table version 3 images carry).
    pub async fn upgrade_to_v3(&mut self) -> Result<()> {
        self.upgrade_to_v3_impl().await
    }

    /// Make a version 3 image version 2, refusing what QEMU refuses; zero
    /// clusters are converted first (see the module comment), refcounts
    /// written and the dirty bit cleared, the header last.
    /// `progress(done, total)` is told as each L1 entry (the active
    /// table's, then each snapshot's) is done, as QEMU reports it.
    pub async fn downgrade_to_v2(&mut self, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
        self.downgrade_to_v2_impl(progress).await
    }

    /// Turn lazy refcounts on or off. Off writes every refcount and clears
    /// the dirty bit before the header stops allowing them.
    pub async fn set_lazy_refcounts(&mut self, on: bool) -> Result<()> {
        self.set_lazy_refcounts_impl(on).await
    }

    /// Give the image `bits`-bit refcounts (a power of two, 1 to 64, on a
    /// version 3 image): new refcount blocks and a new table are written
    /// past the end of the image, counting everything in use, themselves,
    /// and the old structures as free; then the header switches to them
    /// in one write. A crash before the switch leaves the old structures
    /// (the new clusters unreferenced and free in them), after it the new
    /// ones (the old clusters free in them).
    pub async fn set_refcount_bits(&mut self, bits: u32) -> Result<()> {
        self.set_refcount_bits_impl(bits).await
    }

    // Internal snapshots.

    /// The internal snapshots, in table order.
    pub async fn snapshots(&self) -> Result<Vec<Snapshot>> {
        self.snapshots_impl().await
    }

    /// Take a snapshot of the guest disk named `name`, dated as the caller
    /// says (the engine reads no clock). It gets the next free numeric id;
    /// names need not be unique. No VM state: its size, the VM clock and
    /// the instruction count are 0, as `qemu-img snapshot -c` writes them.
    pub async fn snapshot_create(
        &mut self,
        name: &str,
        date_sec: u32,
        date_nsec: u32,
    ) -> Result<Snapshot> {
        self.snapshot_create_impl(name, date_sec, date_nsec).await
    }

    /// Revert the guest disk to the snapshot with id `id_or_name`, or else
    /// the first one named so. The virtual size becomes the snapshot's.
    /// The snapshot stays.
    pub async fn snapshot_apply(&mut self, id_or_name: &str) -> Result<()> {
        self.snapshot_apply_impl(id_or_name).await
    }

    /// Delete the snapshot with id `id_or_name`, or else the first one
    /// named so, and release what only it referenced.
    pub async fn snapshot_delete(&mut self, id_or_name: &str) -> Result<()> {
        self.snapshot_delete_impl(id_or_name).await
    }

    /// Read the guest disk as a snapshot holds it, for the rest of this
    /// open (QEMU's `bdrv_snapshot_load_tmp`, behind `qemu-img convert
    /// -l`): the first snapshot `pick` accepts becomes the table reads go
    /// through, and its size the virtual size. Only on an image opened
    /// read-only: nothing is written, and the image on disk is untouched.
    pub async fn load_snapshot_tmp(&mut self, pick: impl Fn(&Snapshot) -> bool) -> Result<()> {
        self.load_snapshot_tmp_impl(pick).await
    }

    /// The guest ranges that hold data (data and compressed clusters, one
    /// range a cluster, in guest order) in the internal snapshot `sn`, as
    /// QEMU's block status on a temporarily loaded snapshot reports them
    /// for `qemu-img measure -l`; the rest reads as zeroes or is not
    /// allocated.
    pub async fn snapshot_data_ranges(&self, sn: &Snapshot) -> Result<Vec<(u64, u64)>> {
        self.snapshot_data_ranges_impl(sn).await
    }

    // The VM state area.

    /// Where the VM state area starts, in guest bytes: the first L1
    /// entry's worth of address space that the disk does not use.
    pub fn vm_state_offset(&self) -> u64 {
        self.vm_state_offset_impl()
    }

    /// Write `buf` at byte `pos` of the VM state area.
    pub async fn write_vmstate(&self, pos: u64, buf: &[u8]) -> Result<()> {
        self.write_vmstate_impl(pos, buf).await
    }

    /// Read byte `pos` on of the VM state area into `buf`.
    pub async fn read_vmstate(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.read_vmstate_impl(pos, buf).await
    }

    // The external data file.

    /// Whether guest data lives in an external data file (attached).
    pub fn has_data_file(&self) -> bool {
        self.has_data_file_impl()
    }

    /// The data file name the header stores (relative names are relative
    /// to the image's directory, as for backing files).
    pub fn data_file_name(&self) -> Option<String> {
        self.data_file_name_impl()
    }

    /// The external data file's device, if the image has one.
    pub fn data_device(&self) -> Option<&D> {
        self.data_device_impl()
    }

    // The image's facts.

    /// The backing file name and format the header names.
    pub fn backing_spec(&self) -> Option<(String, Option<String>)> {
        let m = self.meta.read_unlocked();
        m.header
            .backing_file
            .clone()
            .map(|n| (n, m.header.backing_format()))
    }

    /// The backing file attached, if any (for tools that walk the chain,
    /// such as a map of where each range's data comes from).
    pub fn backing(&self) -> Option<&Backing<D>> {
        self.backing.as_ref()
    }

    pub fn attach_backing(&mut self, backing: Backing<D>) {
        self.backing = Some(backing);
    }

    pub fn virtual_size(&self) -> u64 {
        self.geo.virtual_size
    }

    pub fn cluster_size(&self) -> u64 {
        self.geo.cluster_size
    }

    /// A copy of the header as currently held in memory.
    pub fn header(&self) -> Header {
        self.meta.read_unlocked().header.clone()
    }

    // Closing.

    /// Clean close: write everything back, clear the dirty bit, flush, and
    /// give the device back.
    pub async fn close(self) -> Result<D> {
        Ok(self.close_with_data().await?.0)
    }

    /// [`Image::close`], giving back the data file's device too.
    pub async fn close_with_data(self) -> Result<(D, Option<D>)> {
        if !self.opts.read_only {
            self.flush_internal(true).await?;
        }
        Ok((self.dev, self.data))
    }

    /// Drop the image without writing anything, giving back the image
    /// device and the data file's device.
    pub fn into_devices(self) -> (D, Option<D>) {
        (self.dev, self.data)
    }

    /// Drop the image without writing anything (what a crash leaves).
    pub fn into_device(self) -> D {
        self.dev
    }

    pub fn device(&self) -> &D {
        &self.dev
    }

    // What the image counted.

    pub fn counters(&self) -> Counters {
        *self.counters.borrow()
    }

    /// How often guard `g`'s condition arose on this image so far (one
    /// count of `counters().guards`, without copying them all: the
    /// simulation reads it after every step of a run armed with it).
    pub fn guard_count(&self, g: crate::guards::Guard) -> u64 {
        self.counters.borrow().guards.get(g)
    }

    /// The probe that says which multi-step metadata operation runs on
    /// this image and in which step (`steps`): a handle that stays valid
    /// after the image, or the future running the operation, is dropped.
    pub fn step_probe(&self) -> crate::steps::StepProbe {
        self.steps.clone()
    }

    // The engine's own.

    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.get()
    }

    /// A metadata write or flush failed (see `Image::poisoned`).
    pub(crate) fn poison(&self) {
        self.poisoned.set(true);
    }

    /// Run `f` on the crash rules' ledger (`rules`), if it is on: never in
    /// a release build.
    pub(crate) fn rules<R>(&self, f: impl FnOnce(&mut crate::rules::RuleLedger) -> R) -> Option<R> {
        if !cfg!(debug_assertions) {
            return None;
        }
        let mut l = self.rules.borrow_mut();
        l.is_on().then(|| f(&mut l))
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.counters.borrow_mut());
    }

    /// Guard `g`'s condition arose (see `guards`).
    pub(crate) fn guard_arose(&self, g: crate::guards::Guard) {
        self.guard_arose_times(g, 1);
    }

    /// Guard `g`'s condition arose `n` times.
    pub(crate) fn guard_arose_times(&self, g: crate::guards::Guard, n: u64) {
        self.counters.borrow_mut().guards.bump(g, n);
    }

    /// Write the in-memory header to cluster 0 (no flush). A failure
    /// poisons the image, as any metadata write's: the header in memory
    /// (a new refcount table, a cleared dirty bit) is not the one on disk.
    pub(crate) async fn write_header(&self, mg: &MetaGuard<'_>) -> Result<()> {
        self.write_header_flagged(mg, false).await
    }

    /// [`Image::write_header`], with FUA when `fua`.
    pub(crate) async fn write_header_flagged(&self, mg: &MetaGuard<'_>, fua: bool) -> Result<()> {
        let bytes = mg.borrow().header.serialize()?;
        self.write_meta_flagged(0, &bytes, fua).await?;
        mg.borrow_mut().header_dirty = false;
        Ok(())
    }
}

pub(crate) fn overlaps(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen > 0 && blen > 0 && a < b.saturating_add(blen) && b < a.saturating_add(alen)
}
