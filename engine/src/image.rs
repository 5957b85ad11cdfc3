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
use crate::format::header::{CompressionType, Header};
use crate::geometry::Geometry;
use crate::growth::Growth;
use crate::inflight::InFlight;
use crate::l1l2::L1L2;
use crate::meta_clusters::MetaClusters;
use crate::options::EngineOptions;
use crate::prealloc::Preallocation;
use crate::reftable::RefTable;
use crate::sync::{CoMutex, WaitMap, WaitQueue};

/// qcow2 version: 2 (compat 0.10) or 3 (compat 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Compat {
    #[serde(rename = "0.10")]
    V2,
    #[serde(rename = "1.1")]
    V3,
}

/// What `create` formats a device with; names follow qemu-img's `-o` options.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateOptions {
    /// Virtual disk size in bytes.
    pub size: u64,
    /// Power of two from 512 to 2 MiB.
    pub cluster_size: u64,
    /// Power of two from 1 to 64 (version 2 images: 16 only).
    pub refcount_bits: u32,
    pub compat: Compat,
    pub lazy_refcounts: bool,
    pub extended_l2: bool,
    /// Backing file name as stored in the header.
    pub backing_file: Option<String>,
    /// Backing format ("qcow2" or "raw") stored in the header extension.
    pub backing_format: Option<String>,
    /// How compressed clusters are encoded (zstd needs compat 1.1).
    /// Options at their default are left out of the JSON, so that saved
    /// cases read and write as they did before these options existed.
    #[serde(skip_serializing_if = "is_default")]
    pub compression_type: CompressionType,
    /// External data file name as stored in the header; guest data then
    /// goes to the data device given to `create_with_data` (compat 1.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_file: Option<String>,
    /// The data file is kept a valid raw image of the guest disk: every
    /// cluster is mapped at create, and zeroing reaches the data file.
    #[serde(skip_serializing_if = "is_default")]
    pub data_file_raw: bool,
    /// What is allocated up front (`crate::prealloc`): with a data file,
    /// the L2 tables map every cluster and the data file is sized as the
    /// mode asks.
    #[serde(skip_serializing_if = "is_default")]
    pub preallocation: Preallocation,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl CreateOptions {
    /// Entries of one L2 table (8-byte entries, 16 with extended L2).
    /// The options' cluster size must be valid.
    pub fn l2_entries(&self) -> u64 {
        self.cluster_size / if self.extended_l2 { 16 } else { 8 }
    }

    /// L1 entries the disk needs: what `Geometry::l1_entries_for` says
    /// of an open image, for one not made yet.
    pub fn l1_entries(&self) -> u64 {
        self.size.div_ceil(self.cluster_size * self.l2_entries())
    }
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            size: 0,
            cluster_size: 65536,
            refcount_bits: 16,
            compat: Compat::V3,
            lazy_refcounts: false,
            extended_l2: false,
            backing_file: None,
            backing_format: None,
            compression_type: CompressionType::Zlib,
            data_file: None,
            data_file_raw: false,
            preallocation: Preallocation::Off,
        }
    }
}

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
}

/// Largest L1 table QEMU accepts (32 MiB).
pub const MAX_L1_BYTES: u64 = 32 << 20;
/// Smallest cluster size QEMU accepts with extended L2 entries: below it a
/// subcluster would be smaller than a 512-byte sector.
pub(crate) const MIN_EXTENDED_L2_CLUSTER_SIZE: u64 = 16 << 10;
/// Largest refcount table QEMU accepts (8 MiB).
pub(crate) const MAX_REFTABLE_BYTES: u64 = 8 << 20;

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
