//! The qcow2 header and header extensions, parsed and validated as QEMU
//! validates them when it opens an image: what fails here makes
//! `qemu-img check` fail to open the image at all (exit code 1, no report).
//!
//! Layout (big-endian), each offset following the one before:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `QFI\xfb` |
//! | 4 | 4 | version (2 or 3) |
//! | 8 | 8 | backing_file_offset |
//! | 16 | 4 | backing_file_size |
//! | 20 | 4 | cluster_bits |
//! | 24 | 8 | size (virtual, bytes) |
//! | 32 | 4 | crypt_method |
//! | 36 | 4 | l1_size |
//! | 40 | 8 | l1_table_offset |
//! | 48 | 8 | refcount_table_offset |
//! | 56 | 4 | refcount_table_clusters |
//! | 60 | 4 | nb_snapshots |
//! | 64 | 8 | snapshots_offset |
//! | 72 | 8 | incompatible_features (v3) |
//! | 80 | 8 | compatible_features (v3) |
//! | 88 | 8 | autoclear_features (v3) |
//! | 96 | 4 | refcount_order (v3) |
//! | 100 | 4 | header_length (v3) |
//! | 104 | 1 | compression_type (v3, when header_length > 104) |

use super::source::{read_u64, ImageSource};

pub(crate) const MAGIC: u32 = 0x5146_49fb;
pub(crate) const OFF_VERSION: u64 = 4;
pub(crate) const OFF_BACKING_FILE_OFFSET: u64 = OFF_VERSION + 4;
pub(crate) const OFF_BACKING_FILE_SIZE: u64 = OFF_BACKING_FILE_OFFSET + 8;
pub(crate) const OFF_CLUSTER_BITS: u64 = OFF_BACKING_FILE_SIZE + 4;
pub(crate) const OFF_SIZE: u64 = OFF_CLUSTER_BITS + 4;
pub(crate) const OFF_CRYPT_METHOD: u64 = OFF_SIZE + 8;
pub(crate) const OFF_L1_SIZE: u64 = OFF_CRYPT_METHOD + 4;
pub(crate) const OFF_L1_TABLE_OFFSET: u64 = OFF_L1_SIZE + 4;
pub(crate) const OFF_REFCOUNT_TABLE_OFFSET: u64 = OFF_L1_TABLE_OFFSET + 8;
pub(crate) const OFF_REFCOUNT_TABLE_CLUSTERS: u64 = OFF_REFCOUNT_TABLE_OFFSET + 8;
pub(crate) const OFF_NB_SNAPSHOTS: u64 = OFF_REFCOUNT_TABLE_CLUSTERS + 4;
pub(crate) const OFF_SNAPSHOTS_OFFSET: u64 = OFF_NB_SNAPSHOTS + 4;
pub(crate) const OFF_INCOMPATIBLE: u64 = OFF_SNAPSHOTS_OFFSET + 8;
pub(crate) const OFF_COMPATIBLE: u64 = OFF_INCOMPATIBLE + 8;
pub(crate) const OFF_AUTOCLEAR: u64 = OFF_COMPATIBLE + 8;
pub(crate) const OFF_REFCOUNT_ORDER: u64 = OFF_AUTOCLEAR + 8;
pub(crate) const OFF_HEADER_LENGTH: u64 = OFF_REFCOUNT_ORDER + 4;
pub(crate) const OFF_COMPRESSION_TYPE: u64 = OFF_HEADER_LENGTH + 4;
/// Length of a version 2 header, and where its extensions start.
pub(crate) const V2_HEADER_LENGTH: u64 = OFF_INCOMPATIBLE;
/// Shortest legal version 3 header.
pub(crate) const V3_HEADER_LENGTH_MIN: u64 = OFF_COMPRESSION_TYPE;

pub(crate) const INCOMPAT_DIRTY: u64 = 1 << 0;
pub(crate) const INCOMPAT_CORRUPT: u64 = 1 << 1;
pub(crate) const INCOMPAT_DATA_FILE: u64 = 1 << 2;
pub(crate) const INCOMPAT_COMPRESSION: u64 = 1 << 3;
pub(crate) const INCOMPAT_EXTL2: u64 = 1 << 4;
const INCOMPAT_KNOWN: u64 = 0x1f;
pub(crate) const AUTOCLEAR_BITMAPS: u64 = 1 << 0;
/// Autoclear bit 1: the external data file is a valid raw image.
pub(crate) const AUTOCLEAR_RAW_DATA: u64 = 1 << 1;

const EXT_END: u32 = 0;
const EXT_CRYPTO: u32 = 0x0537_be77;
const EXT_BITMAPS: u32 = 0x2385_2875;
const EXT_FEATURE_TABLE: u32 = 0x6803_f857;
/// A feature name table entry: type, bit number, a NUL-padded name.
const FEATURE_ENTRY: usize = 48;

/// Upper bounds QEMU enforces on input-sized tables.
pub(crate) const MAX_REFTABLE_BYTES: u64 = 8 << 20;
pub(crate) const MAX_L1_BYTES: u64 = 32 << 20;
pub(crate) const MAX_SNAPSHOTS: u64 = 65536;
pub(crate) const SNAPSHOT_HEADER_SIZE: u64 = 40;
const MAX_BITMAPS: u32 = 65535;
const MAX_BITMAP_DIRECTORY_SIZE: u64 = 1024 * (65535 + 24 + 1023);

/// The bitmaps header extension, kept only when the autoclear bit says it
/// is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BitmapsExt {
    pub nb_bitmaps: u32,
    pub directory_size: u64,
    pub directory_offset: u64,
}

/// The header as the checker uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub version: u32,
    pub cluster_bits: u32,
    pub size: u64,
    pub l1_size: u32,
    pub l1_table_offset: u64,
    pub refcount_table_offset: u64,
    pub refcount_table_clusters: u32,
    pub nb_snapshots: u32,
    pub snapshots_offset: u64,
    pub incompatible: u64,
    pub autoclear: u64,
    pub refcount_order: u32,
    pub bitmaps: Option<BitmapsExt>,
    pub crypto: Option<(u64, u64)>,
}

impl Header {
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    pub fn extended_l2(&self) -> bool {
        self.incompatible & INCOMPAT_EXTL2 != 0
    }

    /// Guest data lives in an external data file (incompatible bit 2):
    /// data clusters are then not refcounted in this file.
    pub fn has_data_file(&self) -> bool {
        self.incompatible & INCOMPAT_DATA_FILE != 0
    }

    /// Entries per L2 table.
    pub fn l2_entries(&self) -> u64 {
        let entry = if self.extended_l2() { 16 } else { 8 };
        self.cluster_size() / entry
    }

    pub fn refcount_bits(&self) -> u32 {
        1 << self.refcount_order
    }

    /// log2 of the number of refcount entries in one refcount block.
    pub fn refcount_block_bits(&self) -> u32 {
        self.cluster_bits + 3 - self.refcount_order
    }

    pub fn refcount_table_entries(&self) -> u64 {
        u64::from(self.refcount_table_clusters) << (self.cluster_bits - 3)
    }

    pub fn offset_into_cluster(&self, off: u64) -> u64 {
        off & (self.cluster_size() - 1)
    }

    pub fn size_to_clusters(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.cluster_size())
    }
}

fn be32(b: &[u8], off: u64) -> u32 {
    let o = off as usize;
    u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], off: u64) -> u64 {
    let o = off as usize;
    u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

/// QEMU's table validation: aligned, and not so large that its end
/// overflows a signed 64-bit offset.
fn validate_table(
    h: &Header,
    offset: u64,
    entries: u64,
    entry_len: u64,
    max_bytes: u64,
    what: &str,
) -> Result<(), String> {
    if entries > max_bytes / entry_len {
        return Err(format!("{what} too large"));
    }
    let size = entries * entry_len;
    if offset > i64::MAX as u64 - size || h.offset_into_cluster(offset) != 0 {
        return Err(format!("Invalid {what} offset"));
    }
    Ok(())
}

/// Parses and validates the header as QEMU's open does in check mode.
/// `Err` holds the message `qemu-img` would print for a failed open.
pub(crate) fn parse(src: &dyn ImageSource) -> Result<Header, String> {
    let io = |e: std::io::Error| format!("Could not read qcow2 header: {e}");
    let mut b = vec![0u8; V3_HEADER_LENGTH_MIN as usize + 1];
    super::source::read_checked(src, 0, &mut b).map_err(io)?;
    if be32(&b, 0) != MAGIC {
        return Err("Image is not in qcow2 format".into());
    }
    let version = be32(&b, OFF_VERSION);
    if !(2..=3).contains(&version) {
        return Err(format!("Unsupported qcow2 version {version}"));
    }
    let cluster_bits = be32(&b, OFF_CLUSTER_BITS);
    if !(9..=21).contains(&cluster_bits) {
        return Err(format!("Unsupported cluster size: 2^{cluster_bits}"));
    }
    let cluster_size = 1u64 << cluster_bits;
    let (incompatible, autoclear, refcount_order, header_length) = if version == 2 {
        (0, 0, 4, V2_HEADER_LENGTH)
    } else {
        (
            be64(&b, OFF_INCOMPATIBLE),
            be64(&b, OFF_AUTOCLEAR),
            be32(&b, OFF_REFCOUNT_ORDER),
            u64::from(be32(&b, OFF_HEADER_LENGTH)),
        )
    };
    if version == 3 && header_length < V3_HEADER_LENGTH_MIN {
        return Err("qcow2 header too short".into());
    }
    if header_length > cluster_size {
        return Err("qcow2 header exceeds cluster size".into());
    }
    let compression_type = if header_length > V3_HEADER_LENGTH_MIN {
        b[OFF_COMPRESSION_TYPE as usize]
    } else {
        0
    };
    let backing_file_offset = be64(&b, OFF_BACKING_FILE_OFFSET);
    if backing_file_offset > cluster_size {
        return Err("Invalid backing file offset".into());
    }
    // A check never opens the backing file, but its name must be sane.
    if backing_file_offset != 0 {
        let len = u64::from(be32(&b, OFF_BACKING_FILE_SIZE));
        if len > 1023.min(cluster_size - backing_file_offset) {
            return Err("Backing file name too long".into());
        }
    }
    if incompatible & !INCOMPAT_KNOWN != 0 {
        let ext_end = if backing_file_offset != 0 {
            backing_file_offset
        } else {
            cluster_size
        };
        return Err(unsupported_features(
            src,
            header_length,
            ext_end,
            incompatible & !INCOMPAT_KNOWN,
        ));
    }
    if refcount_order > 6 {
        return Err("Reference count entry width too large; may not exceed 64 bits".into());
    }
    if compression_type > 1 {
        return Err(format!("Unknown compression type {compression_type}"));
    }
    if compression_type != 0 && incompatible & INCOMPAT_COMPRESSION == 0 {
        return Err("Compression type incompatible feature bit must be set".into());
    }
    if be32(&b, OFF_CRYPT_METHOD) != 0 {
        return Err("Encrypted images are not supported by this checker".into());
    }
    let mut h = Header {
        version,
        cluster_bits,
        size: be64(&b, OFF_SIZE),
        l1_size: be32(&b, OFF_L1_SIZE),
        l1_table_offset: be64(&b, OFF_L1_TABLE_OFFSET),
        refcount_table_offset: be64(&b, OFF_REFCOUNT_TABLE_OFFSET),
        refcount_table_clusters: be32(&b, OFF_REFCOUNT_TABLE_CLUSTERS),
        nb_snapshots: be32(&b, OFF_NB_SNAPSHOTS),
        snapshots_offset: be64(&b, OFF_SNAPSHOTS_OFFSET),
        incompatible,
        autoclear,
        refcount_order,
        bitmaps: None,
        crypto: None,
    };
    let ext_end = if backing_file_offset != 0 {
        backing_file_offset
    } else {
        cluster_size
    };
    read_extensions(src, &mut h, header_length, ext_end)?;
    if h.extended_l2() && cluster_bits < 14 {
        return Err(
            "Extended L2 entries are only supported with cluster sizes of at least 16384 bytes"
                .into(),
        );
    }
    if u64::from(h.refcount_table_clusters) > MAX_REFTABLE_BYTES / cluster_size {
        return Err("Reference count table too large".into());
    }
    validate_table(
        &h,
        h.refcount_table_offset,
        h.refcount_table_entries(),
        8,
        MAX_REFTABLE_BYTES,
        "reference count table",
    )?;
    if h.nb_snapshots as u64 > MAX_SNAPSHOTS {
        return Err("Too many snapshots".into());
    }
    validate_table(
        &h,
        h.snapshots_offset,
        u64::from(h.nb_snapshots),
        SNAPSHOT_HEADER_SIZE,
        SNAPSHOT_HEADER_SIZE * MAX_SNAPSHOTS,
        "snapshot table",
    )?;
    if u64::from(h.l1_size) > MAX_L1_BYTES / 8 {
        return Err("Active L1 table too large".into());
    }
    // Each L1 entry maps one L2 table of guest clusters.
    let l2_span_bits = cluster_bits + cluster_bits - if h.extended_l2() { 4 } else { 3 };
    let needed = h.size.div_ceil(1u64 << l2_span_bits);
    if needed > i32::MAX as u64 {
        return Err("Image is too big".into());
    }
    if u64::from(h.l1_size) < needed {
        return Err("L1 table is too small".into());
    }
    validate_table(
        &h,
        h.l1_table_offset,
        u64::from(h.l1_size),
        8,
        MAX_L1_BYTES,
        "L1 table",
    )?;
    Ok(h)
}

/// QEMU's refusal of unknown incompatible features: the names the
/// image's feature name table gives those bits, in table order, then
/// the bits it names not, in hex (`Unsupported qcow2 feature(s): a, b,
/// Unknown incompatible feature: 400`). The table is read as far as
/// it can be: an extension area too broken to walk names nothing.
fn unsupported_features(src: &dyn ImageSource, start: u64, end: u64, mut unknown: u64) -> String {
    let mut names = Vec::new();
    let mut offset = start;
    // Each step moves at least 8 bytes within `end` (a cluster at most).
    while offset + 8 <= end {
        let mut eh = [0u8; 8];
        if super::source::read_checked(src, offset, &mut eh).is_err() {
            break;
        }
        let (magic, len) = (be32(&eh, 0), u64::from(be32(&eh, 4)));
        offset += 8;
        if magic == EXT_END || len > end - offset {
            break;
        }
        if magic == EXT_FEATURE_TABLE {
            let mut table = vec![0u8; len as usize];
            if super::source::read_checked(src, offset, &mut table).is_err() {
                break;
            }
            for e in table.chunks_exact(FEATURE_ENTRY) {
                let bit = u64::from(e[1]);
                if e[0] == 0 && bit < 64 && unknown & (1 << bit) != 0 {
                    let name = &e[2..];
                    let n = name.iter().position(|&c| c == 0).unwrap_or(name.len());
                    names.push(String::from_utf8_lossy(&name[..n]).into_owned());
                    unknown &= !(1 << bit);
                }
            }
        }
        offset += len.div_ceil(8) * 8;
    }
    if unknown != 0 {
        names.push(format!("Unknown incompatible feature: {unknown:x}"));
    }
    format!("Unsupported qcow2 feature(s): {}", names.join(", "))
}

fn read_extensions(
    src: &dyn ImageSource,
    h: &mut Header,
    start: u64,
    end: u64,
) -> Result<(), String> {
    let io = |e: std::io::Error| format!("qcow2_read_extension: ERROR: {e}");
    let cluster_size = h.cluster_size();
    let mut offset = start;
    while offset < end {
        if offset > cluster_size {
            return Err("qcow2_read_extension: suspicious offset".into());
        }
        let mut eh = [0u8; 8];
        super::source::read_checked(src, offset, &mut eh).map_err(io)?;
        let magic = be32(&eh, 0);
        let len = u64::from(be32(&eh, 4));
        offset += 8;
        if offset > end || len > end - offset {
            return Err("Header extension too large".into());
        }
        match magic {
            EXT_END => return Ok(()),
            EXT_CRYPTO => {
                if len != 16 {
                    return Err(format!("Invalid encryption header length {len}"));
                }
                let off = read_u64(src, offset).map_err(io)?;
                let length = read_u64(src, offset + 8).map_err(io)?;
                h.crypto = Some((off, length));
            }
            EXT_BITMAPS => {
                if len != 24 {
                    return Err("bitmaps_ext: Invalid extension length".into());
                }
                if h.autoclear & AUTOCLEAR_BITMAPS != 0 {
                    let mut e = [0u8; 24];
                    super::source::read_checked(src, offset, &mut e).map_err(io)?;
                    let nb_bitmaps = be32(&e, 0);
                    let reserved = be32(&e, 4);
                    let directory_size = be64(&e, 8);
                    let directory_offset = be64(&e, 16);
                    if reserved != 0 {
                        return Err("bitmaps_ext: Reserved field is not zero".into());
                    }
                    if nb_bitmaps > MAX_BITMAPS {
                        return Err("bitmaps_ext: Image has too many bitmaps".into());
                    }
                    if nb_bitmaps == 0 {
                        return Err("found bitmaps extension with zero bitmaps".into());
                    }
                    if h.offset_into_cluster(directory_offset) != 0 {
                        return Err("bitmaps_ext: invalid dirty bitmap directory offset".into());
                    }
                    if directory_size > MAX_BITMAP_DIRECTORY_SIZE {
                        return Err("bitmaps_ext: bitmap directory size is too big".into());
                    }
                    h.bitmaps = Some(BitmapsExt {
                        nb_bitmaps,
                        directory_size,
                        directory_offset,
                    });
                }
            }
            _ => {}
        }
        offset += len.div_ceil(8) * 8;
    }
    Ok(())
}
