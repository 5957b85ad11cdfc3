//! What `Image::create` is asked for (`CreateOptions`, with the version
//! and the preallocation mode) and the limits on an image's tables, as
//! QEMU sets them. Below `image`, `create`, `open` and `prealloc`, which
//! all read them, and above nothing but the format's names.

use crate::format::header::CompressionType;

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
    /// What is allocated up front (`crate::ops::prealloc`): with a data file,
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

/// How much of a new image is allocated up front (qemu-img's
/// `preallocation` option).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Preallocation {
    /// Nothing: clusters are allocated as the guest writes.
    #[default]
    Off,
    /// L2 tables and data clusters allocated, the file extended sparse.
    Metadata,
    /// As `Metadata`, the data clusters' space reserved with fallocate.
    Falloc,
    /// As `Metadata`, the data clusters written with zeroes.
    Full,
}

impl Preallocation {
    /// The mode as qemu-img spells it.
    pub fn name(self) -> &'static str {
        match self {
            Preallocation::Off => "off",
            Preallocation::Metadata => "metadata",
            Preallocation::Falloc => "falloc",
            Preallocation::Full => "full",
        }
    }
}

impl std::str::FromStr for Preallocation {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Preallocation::Off,
            Preallocation::Metadata,
            Preallocation::Falloc,
            Preallocation::Full,
        ]
        .into_iter()
        .find(|p| p.name() == s)
        .ok_or_else(|| format!("Parameter 'preallocation' does not accept value '{s}'"))
    }
}

/// Largest L1 table QEMU accepts (32 MiB).
pub const MAX_L1_BYTES: u64 = 32 << 20;
/// Smallest cluster size QEMU accepts with extended L2 entries: below it a
/// subcluster would be smaller than a 512-byte sector.
pub const MIN_EXTENDED_L2_CLUSTER_SIZE: u64 = 16 << 10;
/// Largest refcount table QEMU accepts (8 MiB).
pub const MAX_REFTABLE_BYTES: u64 = 8 << 20;
