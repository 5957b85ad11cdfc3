//! The engine's error type. Three kinds of failure are kept apart: a device
//! error (propagated as is), a malformed or corrupt image (an error naming
//! the field or table and its offset), and a bad guest request. Programmer
//! errors are assertions, not variants.

use crate::dev::DevError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A device request failed. Transparent: the device error's message
    /// already names the request and its offset, and printing it behind a
    /// prefix as well as through `source()` showed it twice in a chain
    /// (`device: X: X`).
    #[error(transparent)]
    Dev(#[from] DevError),
    /// The image is not a valid qcow2 image: a header field or table is
    /// malformed. `field` names it as the qcow2 specification does.
    #[error("invalid image: {field}: {reason}")]
    Format { field: String, reason: String },
    /// The image uses a feature this engine cannot handle.
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// A resize of a version 2 image with internal snapshots, whose
    /// entries take the header's size as theirs (QEMU's words).
    #[error("Can't resize a v2 image which has snapshots")]
    ResizeV2WithSnapshots,
    /// The header sets incompatible feature bits this engine does not
    /// know, worded as QEMU words it: `names` are what the image's feature
    /// name table calls them, in the table's order, and `unnamed` the
    /// mask of those it does not name.
    #[error("Unsupported qcow2 feature(s): {}", feature_list(.names, *.unnamed))]
    UnsupportedFeatures { names: Vec<String>, unnamed: u64 },
    /// Corruption found while running: metadata that points where it must
    /// not. The image is marked corrupt (when writable) and refuses writes.
    #[error("corrupt image: {what} (offset {offset:#x})")]
    Corrupt { what: String, offset: u64 },
    /// A guest request outside the virtual disk.
    #[error("request out of range: offset {offset} length {len} is outside the {size}-byte disk")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    /// A write to an image opened read-only.
    #[error("image is read-only")]
    ReadOnly,
    /// Metadata that would exceed the configured memory limit.
    #[error("metadata limit: {what} needs {needed} bytes, limit is {limit}")]
    MetadataLimit {
        what: String,
        needed: u64,
        limit: u64,
    },
    /// The image keeps its guest data in an external data file (header
    /// incompatible bit 2) and was opened without one; `name` is the file
    /// the header names, if it names one.
    #[error("image needs its external data file{}; open it with the data file", .name.as_ref().map(|n| format!(" '{n}'")).unwrap_or_default())]
    DataFileRequired { name: Option<String> },
    /// A bad option value (create or open).
    #[error("invalid option {name}: {reason}")]
    InvalidOption { name: String, reason: String },
    /// A compressed write ([`crate::Image::write_compressed`]) this
    /// image or request cannot take; nothing was written.
    #[error(transparent)]
    Compressed(#[from] CompressedWriteError),
    /// An earlier metadata writeback failed; the in-memory state can no
    /// longer be trusted to match the device, so the image refuses further
    /// writes until it is reopened.
    #[error("image failed after an earlier metadata error; reopen it")]
    Poisoned,
    /// A FUA request could not be made durable: while it ran, a flush
    /// whose copy-on-write failed gave up an allocation in flight, which
    /// may have held the request's data (that flush reported the error).
    #[error("a FUA request's data may be lost: a failed flush gave up an allocation it may have written into")]
    FuaDataGivenUp,
    /// An internal snapshot operation that cannot be done (`snapshot`).
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// An amendment of the image's options that cannot be made
    /// (`Image::upgrade_to_v3`, `downgrade_to_v2`, `set_lazy_refcounts`).
    #[error(transparent)]
    Amend(AmendError),
    /// An error of a qcow2 driver other than this engine, in its own
    /// words: the harness's driver interface (`sim::driver`) speaks this
    /// engine's errors, and an adapter whose driver failed for a reason
    /// none of the variants above names reports it here. The engine never
    /// returns it.
    #[error("{driver}: {message}")]
    Driver { driver: String, message: String },
}

/// Why an internal snapshot could not be created, applied or deleted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// No snapshot has this id (or, where names are looked up, name).
    #[error("snapshot '{0}' not found")]
    NotFound(String),
    /// Images with an external data file cannot hold internal snapshots:
    /// the data file has one copy of each guest cluster (QEMU refuses too).
    #[error("internal snapshots are not supported with an external data file")]
    DataFile,
    /// The image has the most snapshots QEMU allows.
    #[error("an image can have at most {max} internal snapshots")]
    TooMany { max: u32 },
    /// Sharing a cluster once more would overflow its refcount (narrow
    /// refcounts); nothing was changed.
    #[error("the refcount of cluster {cluster} would overflow its {bits}-bit field")]
    RefcountOverflow { cluster: u64, bits: u32 },
}

/// Why a compressed write was refused. Each is a refusal QEMU's qcow2
/// driver makes too, and the variant says which errno it answers with, so
/// that qemu-io's message can name it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompressedWriteError {
    /// The image keeps guest data in an external data file, where a
    /// compressed cluster has nowhere to live (QEMU: ENOTSUP).
    #[error("compressed writes are not possible with an external data file")]
    DataFile,
    /// The image's format has no compressed clusters (a raw image; QEMU:
    /// ENOTSUP).
    #[error("the image format has no compressed clusters")]
    Format,
    /// The request does not start on a cluster boundary, or does not end
    /// on one short of the disk's end (QEMU: EINVAL).
    #[error("compressed write of {len} bytes at offset {offset} is not whole clusters")]
    Misaligned { offset: u64, len: u64 },
    /// The guest cluster at `offset` already has a host cluster (data, a
    /// preallocated zero cluster or compressed data): a compressed write
    /// never replaces one (QEMU: EIO).
    #[error("guest cluster at offset {offset} is already allocated; a compressed write cannot replace it")]
    Allocated { offset: u64 },
}

/// `names` and then, if any bit is left, the mask of the unnamed ones:
/// `test1, Unknown incompatible feature: 8000000000000000`.
fn feature_list(names: &[String], unnamed: u64) -> String {
    let mut parts = names.to_vec();
    if unnamed != 0 {
        parts.push(format!("Unknown incompatible feature: {unnamed:x}"));
    }
    parts.join(", ")
}

impl Error {
    pub(crate) fn format(field: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Format {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn corrupt(what: impl Into<String>, offset: u64) -> Error {
        Error::Corrupt {
            what: what.into(),
            offset,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an amendment was refused; nothing was changed. The messages are
/// QEMU's where its driver refuses the same.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmendError {
    #[error("compat=0.10 requires refcount_bits=16")]
    DowngradeRefcountBits,
    #[error("Cannot downgrade an image with a data file")]
    DowngradeDataFile,
    #[error("Internal snapshots prevent downgrade of image")]
    DowngradeSnapshots,
    #[error("Cannot downgrade an image with incompatible features {0:#x} set")]
    DowngradeFeatures(u64),
    #[error(
        "Cannot downgrade an image with zstd compression type and existing compressed clusters"
    )]
    DowngradeZstd,
    /// qcsim's own refusal: converting zero clusters in a snapshot's L2
    /// tables is not implemented.
    #[error("qcsim cannot downgrade an image whose internal snapshots have zero clusters")]
    SnapshotZeroClusters,
    #[error("Cannot decrease refcount entry width to {bits} bits: Cluster at offset {offset:#x} has a refcount of {refcount}")]
    RefcountTooWide {
        bits: u32,
        offset: u64,
        refcount: u64,
    },
    #[error("Lazy refcounts only supported with compatibility level 1.1 and above (use compat=1.1 or greater)")]
    LazyNeedsV3,
    #[error("Refcount widths other than 16 bits require compatibility level 1.1 or above (use compat=1.1 or greater)")]
    RefcountBitsNeedV3,
}

impl From<AmendError> for Error {
    fn from(e: AmendError) -> Self {
        Error::Amend(e)
    }
}
