//! External data files (incompatible bit 2): guest data clusters live in a
//! second device while the image device keeps only metadata.
//!
//! What the format asks, and QEMU does:
//! - a data cluster's host offset is its guest offset; the engine never
//!   chooses one, and an L2 entry that says otherwise is corrupt;
//! - data clusters have no refcounts: the refcount table counts only the
//!   metadata in the image file, so allocating or freeing a data cluster
//!   touches no refcount;
//! - an L2 entry with offset 0 and the COPIED flag is guest cluster 0,
//!   mapped at host offset 0 of the data file, not an unallocated one;
//! - compressed clusters are not allowed;
//! - with "raw external data" (autoclear bit 1) the data file must read as
//!   the guest disk on its own: the engine keeps the bit and maintains it
//!   (clusters map 1:1 already; whole-cluster zeroing and discard also zero
//!   the data file, before the L2 change that makes them read as zeroes).
//!   With a backing file the bit cannot hold, so it is cleared on a
//!   read-write open as an autoclear bit the engine does not maintain.
//!
//! Ordering: a device flush flushes the data device first, so "data before
//! the L2 entry that points at it" holds across the two devices.

use crate::dev::{BlockDev, ZeroFlags};
use crate::error::{Error, Result};
use crate::format::entry::{COMPRESSED, OFFSET_MASK};
use crate::format::header::{autoclear, Header};
use crate::format::{L2Entry, L2Mapping};
use crate::image::{Compat, CreateOptions, Image};
use crate::rules::{Dev, Kind};

/// The create options that concern a data file agree with each other and
/// with whether the caller gave a data device.
pub(crate) fn check_create(o: &CreateOptions, has_device: bool) -> Result<()> {
    let bad = |name: &str, reason: &str| Error::InvalidOption {
        name: name.into(),
        reason: reason.into(),
    };
    match (&o.data_file, has_device) {
        (Some(_), false) => return Err(bad("data_file", "a data file name needs a data device")),
        (None, true) => {
            return Err(bad(
                "data_file",
                "a data device was given without a data file name",
            ))
        }
        _ => {}
    }
    if o.data_file.is_some() && o.compat == Compat::V2 {
        return Err(bad("data_file", "compat=0.10 has no external data files"));
    }
    if o.data_file_raw && o.data_file.is_none() {
        return Err(bad("data_file_raw", "requires data_file"));
    }
    if o.data_file_raw && o.backing_file.is_some() {
        return Err(bad(
            "data_file_raw",
            "a backing file and data_file_raw cannot be used together",
        ));
    }
    Ok(())
}

/// The data device is given exactly when the header asks for one; a
/// read-only open of an image that names its data file may go without it,
/// to describe the image (as `qemu-img info` can), and then refuses guest
/// reads.
pub(crate) fn check_open(h: &Header, has_device: bool, read_only: bool) -> Result<()> {
    match (h.has_data_file(), has_device) {
        (true, false) if !read_only || h.data_file().is_none() => Err(Error::DataFileRequired {
            name: h.data_file(),
        }),
        (false, true) => Err(Error::InvalidOption {
            name: "data_file".into(),
            reason: "the image has no external data file (incompatible bit 2 is clear)".into(),
        }),
        _ => Ok(()),
    }
}

/// The autoclear bits this engine keeps true while it writes the image.
pub(crate) fn maintained_autoclear(h: &Header) -> u64 {
    if h.has_data_file() && h.backing_file.is_none() {
        autoclear::RAW_EXTERNAL
    } else {
        0
    }
}

/// L2 table `index` of a preallocated image: each cluster inside the
/// disk mapped at its own guest offset, with COPIED (offset 0 included).
/// Extended entries get every subcluster allocated if `all_allocated`,
/// none otherwise.
pub(crate) fn identity_l2_table(
    cluster_size: u64,
    disk_size: u64,
    index: u64,
    extended: bool,
    all_allocated: bool,
) -> Vec<u8> {
    let entry_size = if extended { 16 } else { 8 };
    let entries = cluster_size / entry_size;
    let first = index * entries * cluster_size;
    let mut t = vec![0u8; cluster_size as usize];
    for i in 0..entries {
        let guest = first + i * cluster_size;
        if guest >= disk_size {
            break;
        }
        let e = L2Entry::normal(guest, true);
        let at = (i * entry_size) as usize;
        t[at..at + 8].copy_from_slice(&e.word.to_be_bytes());
        if extended && all_allocated {
            t[at + 8..at + 16].copy_from_slice(&crate::format::entry::ALL_ALLOC.to_be_bytes());
        }
    }
    t
}

impl<D: BlockDev> Image<D> {
    /// [`Image::has_data_file`]: the implementation.
    pub(crate) fn has_data_file_impl(&self) -> bool {
        self.data.is_some()
    }

    /// Guest data cannot be read: the image was opened read-only without
    /// the data file its header asks for.
    pub(crate) fn check_data_attached(&self) -> Result<()> {
        let h = &self.meta.read_unlocked().header;
        if self.data.is_none() && h.has_data_file() {
            return Err(Error::DataFileRequired {
                name: h.data_file(),
            });
        }
        Ok(())
    }

    /// [`Image::data_file_name`]: the implementation.
    pub(crate) fn data_file_name_impl(&self) -> Option<String> {
        self.meta.read_unlocked().header.data_file()
    }

    /// [`Image::data_device`]: the implementation.
    pub(crate) fn data_device_impl(&self) -> Option<&D> {
        self.data.as_ref()
    }

    /// The data file is kept a valid raw image of the disk.
    pub(crate) fn data_file_raw(&self) -> bool {
        self.data.is_some() && self.meta.read_unlocked().header.data_file_raw()
    }

    /// With a data file, an entry must map guest offset `guest` at the same
    /// host offset and must not be compressed. `table` names the L2 table.
    pub(crate) fn check_data_entry(&self, guest: u64, e: L2Entry, table: u64) -> Result<()> {
        if self.data.is_none() {
            return Ok(());
        }
        let want = self.geo.cluster_start(guest);
        // With extended entries the cluster's host offset matters whatever
        // the subcluster at `guest` reads as: filling an unallocated or
        // zero subclusters of a COPIED cluster writes there in place.
        let host = e.word & OFFSET_MASK;
        if self.geo.extended_l2 && e.word & COMPRESSED == 0 && host != 0 && host != want {
            return Err(Error::corrupt(
                format!(
                    "external data file offset {host:#x} does not match guest offset {want:#x}"
                ),
                table,
            ));
        }
        match self.decode_l2(e, guest) {
            L2Mapping::Compressed { .. } => Err(Error::corrupt(
                format!(
                    "compressed cluster for guest offset {want:#x} in an image with an external data file"
                ),
                table,
            )),
            L2Mapping::Normal { host, .. }
            | L2Mapping::Zero {
                preallocated: Some(host),
            } if host != want => Err(Error::corrupt(
                format!(
                    "external data file offset {host:#x} does not match guest offset {want:#x}"
                ),
                table,
            )),
            _ => Ok(()),
        }
    }

    /// With raw external data, make guest bytes [start, end) read as zeroes
    /// in the data file too, before the L2 entries say so.
    pub(crate) async fn zero_raw_data(&self, start: u64, end: u64) -> Result<()> {
        let end = end.min(self.geo.virtual_size);
        if !self.data_file_raw() || start >= end {
            return Ok(());
        }
        let flags = ZeroFlags {
            may_unmap: true,
            ..ZeroFlags::default()
        };
        Ok(self
            .zeroes_write(Dev::Data, Kind::Data, start, end - start, flags)
            .await?)
    }
}
