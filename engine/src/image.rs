//! The opened image: its state and close. Creating an image lives in
//! `create`, opening one in `open`, and the guest paths in their own
//! modules (`read`, `write`, `discard`), each adding an `impl` block to
//! [`Image`].

use std::cell::RefCell;

use crate::allocator::Allocator;
use crate::allocs::AllocWait;
use crate::counters::Counters;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::format::header::Header;
use crate::geometry::Geometry;
use crate::growth::Growth;
use crate::inflight::InFlight;
use crate::l1l2::L1L2;
use crate::meta_clusters::MetaClusters;
use crate::options::EngineOptions;
use crate::reftable::RefTable;
use crate::sync::{CoMutex, WaitMap, WaitQueue};

pub use crate::create_options::{
    Compat, CreateOptions, MAX_L1_BYTES, MAX_REFTABLE_BYTES, MIN_EXTENDED_L2_CLUSTER_SIZE,
};

/// The backing file of an image: raw, or a qcow2 image with its own chain.
pub enum Backing<D: BlockDev> {
    Raw(D),
    Qcow2(Box<Image<D>>),
}

/// Metadata state, protected by `Image::meta_lock` for any sequence that
/// spans an await. Never borrowed across an await. Each part is owned by
/// its module and changed through its methods; the header and the image's
/// flags live here.
pub(crate) struct Meta {
    /// The header as it is in memory (written by `Image::write_header`).
    pub header: Header,
    /// The header changed and is to be written at the next writeback.
    pub header_dirty: bool,
    /// The dirty bit is set in the header on disk.
    pub dirty_on_disk: bool,
    /// A metadata write failed: memory and disk may disagree.
    pub poisoned: bool,
    /// The L1 table and the L2 table cache (`l1l2`).
    pub tables: L1L2,
    /// The refcount table, the refcount block cache and whether refcounts
    /// are lazy (`reftable`).
    pub refs: RefTable,
    /// Refcount blocks and L2 tables, for the overlap check
    /// (`meta_clusters`).
    pub meta_clusters: MetaClusters,
    /// Where the search for free clusters starts, the high-water mark and
    /// the queued frees (`allocator`).
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
    pub(crate) meta_lock: CoMutex,
    pub(crate) meta: RefCell<Meta>,
    pub(crate) inflight: RefCell<InFlight>,
    /// Woken when an in-flight write ends (overlap waits).
    pub(crate) writes_wq: WaitQueue,
    /// Waits on the allocation table, by what they wait for.
    pub(crate) alloc_waits: WaitMap<AllocWait>,
    pub(crate) counters: RefCell<Counters>,
    /// The crash rules' ledger, for debug assertions (`rules`); kept apart
    /// from `meta` since it checks what `meta`'s owners do.
    pub(crate) rules: RefCell<crate::rules::RuleLedger>,
}

impl<D: BlockDev> Image<D> {
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

    /// The backing file name and format the header names.
    pub fn backing_spec(&self) -> Option<(String, Option<String>)> {
        let m = self.meta.borrow();
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
        self.meta.borrow().header.clone()
    }

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

    pub fn counters(&self) -> Counters {
        *self.counters.borrow()
    }

    /// How often guard `g`'s condition arose on this image so far (one
    /// count of `counters().guards`, without copying them all: the
    /// simulation reads it after every step of a run armed with it).
    pub fn guard_count(&self, g: crate::guards::Guard) -> u64 {
        self.counters.borrow().guards.get(g)
    }

    /// Debug builds check the rule the metadata modules state: `what` may
    /// only run with `meta_lock` held (it awaits I/O between reading and
    /// changing metadata, and another request must not interleave).
    #[track_caller]
    pub(crate) fn assert_meta_locked(&self, what: &str) {
        debug_assert!(
            self.meta_lock.is_locked(),
            "{what} called without meta_lock held"
        );
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
    pub(crate) async fn write_header(&self) -> Result<()> {
        let bytes = self.meta.borrow().header.serialize()?;
        self.write_meta(0, &bytes).await?;
        self.meta.borrow_mut().header_dirty = false;
        Ok(())
    }
}

pub(crate) fn overlaps(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen > 0 && blen > 0 && a < b.saturating_add(blen) && b < a.saturating_add(alen)
}
