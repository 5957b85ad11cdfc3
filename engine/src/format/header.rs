//! The qcow2 header (version 2 and 3), its extensions and the backing file
//! name, parsed from and serialised to the first cluster of the image.
//!
//! Byte layout (big-endian), per QEMU's `docs/interop/qcow2.txt`:
//!
//! ```text
//!   0  magic "QFI\xfb"            4  version (2 or 3)
//!   8  backing_file_offset       16  backing_file_size
//!  20  cluster_bits              24  size (virtual, bytes)
//!  32  crypt_method              36  l1_size (entries)
//!  40  l1_table_offset           48  refcount_table_offset
//!  56  refcount_table_clusters   60  nb_snapshots
//!  64  snapshots_offset          -- version 2 ends here (72 bytes) --
//!  72  incompatible_features     80  compatible_features
//!  88  autoclear_features        96  refcount_order
//! 100  header_length            104  compression_type (if length > 104)
//! ```
//!
//! Header extensions follow the header: (type u32, length u32, data padded
//! to 8 bytes), ended by type 0. The backing file name follows them.

use crate::error::{Error, Result};

pub const MAGIC: u32 = 0x5146_49fb;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = OFF_MAGIC + 4;
const OFF_BACKING_FILE_OFFSET: usize = OFF_VERSION + 4;
const OFF_BACKING_FILE_SIZE: usize = OFF_BACKING_FILE_OFFSET + 8;
const OFF_CLUSTER_BITS: usize = OFF_BACKING_FILE_SIZE + 4;
const OFF_SIZE: usize = OFF_CLUSTER_BITS + 4;
const OFF_CRYPT_METHOD: usize = OFF_SIZE + 8;
const OFF_L1_SIZE: usize = OFF_CRYPT_METHOD + 4;
const OFF_L1_TABLE_OFFSET: usize = OFF_L1_SIZE + 4;
const OFF_REFCOUNT_TABLE_OFFSET: usize = OFF_L1_TABLE_OFFSET + 8;
const OFF_REFCOUNT_TABLE_CLUSTERS: usize = OFF_REFCOUNT_TABLE_OFFSET + 8;
const OFF_NB_SNAPSHOTS: usize = OFF_REFCOUNT_TABLE_CLUSTERS + 4;
const OFF_SNAPSHOTS_OFFSET: usize = OFF_NB_SNAPSHOTS + 4;
/// Length of a version 2 header.
pub const V2_HEADER_LEN: usize = OFF_SNAPSHOTS_OFFSET + 8;
const OFF_INCOMPATIBLE: usize = V2_HEADER_LEN;
const OFF_COMPATIBLE: usize = OFF_INCOMPATIBLE + 8;
const OFF_AUTOCLEAR: usize = OFF_COMPATIBLE + 8;
const OFF_REFCOUNT_ORDER: usize = OFF_AUTOCLEAR + 8;
const OFF_HEADER_LENGTH: usize = OFF_REFCOUNT_ORDER + 4;
/// Minimum length of a version 3 header.
pub const V3_MIN_HEADER_LEN: usize = OFF_HEADER_LENGTH + 4;
const OFF_COMPRESSION_TYPE: usize = V3_MIN_HEADER_LEN;
/// The version 3 header length this engine writes (compression type plus
/// padding to 8 bytes).
pub const V3_HEADER_LEN: usize = OFF_COMPRESSION_TYPE + 8;

/// Whether the header at the start of `bytes` (at least its first 80
/// bytes) has the dirty bit set. Only a version 3 header has feature
/// bits: in a version 2 image the bytes after the 72-byte header are
/// whatever follows it (often the backing file's name), never a flag.
pub fn dirty_in(bytes: &[u8]) -> bool {
    let be32 = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    };
    let incompatible = bytes
        .get(OFF_INCOMPATIBLE..OFF_INCOMPATIBLE + 8)
        .map(|b| u64::from_be_bytes(b.try_into().unwrap()));
    be32(OFF_MAGIC) == Some(MAGIC)
        && be32(OFF_VERSION).is_some_and(|v| v >= 3)
        && incompatible.is_some_and(|f| f & incompat::DIRTY != 0)
}

/// Incompatible feature bits.
pub mod incompat {
    pub const DIRTY: u64 = 1 << 0;
    pub const CORRUPT: u64 = 1 << 1;
    pub const EXTERNAL_DATA: u64 = 1 << 2;
    pub const COMPRESSION_TYPE: u64 = 1 << 3;
    pub const EXTENDED_L2: u64 = 1 << 4;
    pub const KNOWN: u64 = DIRTY | CORRUPT | EXTERNAL_DATA | COMPRESSION_TYPE | EXTENDED_L2;
}

/// Compatible feature bits.
pub mod compat {
    pub const LAZY_REFCOUNTS: u64 = 1 << 0;
}

/// Autoclear feature bits.
pub mod autoclear {
    pub const BITMAPS: u64 = 1 << 0;
    pub const RAW_EXTERNAL: u64 = 1 << 1;
}

/// Header extension types.
pub mod ext {
    pub const END: u32 = 0;
    pub const BACKING_FORMAT: u32 = 0xe279_2aca;
    pub const FEATURE_TABLE: u32 = 0x6803_f857;
    pub const BITMAPS: u32 = 0x2385_2875;
    pub const CRYPTO: u32 = 0x0537_be77;
    pub const EXTERNAL_DATA_FILE: u32 = 0x4441_5441;
}

/// How compressed clusters are encoded (header byte 104).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompressionType {
    /// Raw deflate; the only type before the field existed.
    #[default]
    Zlib,
    Zstd,
}

impl CompressionType {
    /// The value stored in the header.
    pub fn code(self) -> u8 {
        match self {
            CompressionType::Zlib => 0,
            CompressionType::Zstd => 1,
        }
    }

    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(CompressionType::Zlib),
            1 => Some(CompressionType::Zstd),
            _ => None,
        }
    }

    /// The name qemu-img uses (`-o compression_type=...`, `info`).
    pub fn name(self) -> &'static str {
        match self {
            CompressionType::Zlib => "zlib",
            CompressionType::Zstd => "zstd",
        }
    }
}

impl std::str::FromStr for CompressionType {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "zlib" => Ok(CompressionType::Zlib),
            "zstd" => Ok(CompressionType::Zstd),
            other => Err(format!("'{other}' is not zlib or zstd")),
        }
    }
}

/// Longest backing file name QEMU accepts.
pub const MAX_BACKING_FILE_NAME: u32 = 1023;

/// One header extension, kept as raw bytes so that extensions this engine
/// does not interpret survive a header rewrite unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    pub kind: u32,
    pub data: Vec<u8>,
}

/// The parsed header. Field names follow the specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub backing_file_offset: u64,
    pub backing_file_size: u32,
    pub cluster_bits: u32,
    pub size: u64,
    pub crypt_method: u32,
    pub l1_size: u32,
    pub l1_table_offset: u64,
    pub refcount_table_offset: u64,
    pub refcount_table_clusters: u32,
    pub nb_snapshots: u32,
    pub snapshots_offset: u64,
    pub incompatible_features: u64,
    pub compatible_features: u64,
    pub autoclear_features: u64,
    pub refcount_order: u32,
    pub header_length: u32,
    pub compression_type: u8,
    pub extensions: Vec<Extension>,
    pub backing_file: Option<String>,
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_be_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

impl Header {
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    pub fn refcount_bits(&self) -> u32 {
        1 << self.refcount_order
    }

    pub fn is_dirty(&self) -> bool {
        self.incompatible_features & incompat::DIRTY != 0
    }

    pub fn is_corrupt(&self) -> bool {
        self.incompatible_features & incompat::CORRUPT != 0
    }

    pub fn lazy_refcounts(&self) -> bool {
        self.compatible_features & compat::LAZY_REFCOUNTS != 0
    }

    pub fn extended_l2(&self) -> bool {
        self.incompatible_features & incompat::EXTENDED_L2 != 0
    }

    /// Guest data lives in an external data file (incompatible bit 2).
    pub fn has_data_file(&self) -> bool {
        self.incompatible_features & incompat::EXTERNAL_DATA != 0
    }

    /// The external data file name the header extension stores, if any.
    pub fn data_file(&self) -> Option<String> {
        self.extension(ext::EXTERNAL_DATA_FILE)
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
    }

    /// The data file is a valid raw image (autoclear bit 1).
    pub fn data_file_raw(&self) -> bool {
        self.autoclear_features & autoclear::RAW_EXTERNAL != 0
    }

    /// The compression type of compressed clusters. Only valid once the
    /// header has passed `check_compression`.
    pub fn compression(&self) -> CompressionType {
        CompressionType::from_code(self.compression_type).unwrap_or_default()
    }

    /// The compression type field agrees with incompatible bit 3, as QEMU
    /// requires: zlib with the bit clear, anything else with it set.
    pub fn check_compression(&self) -> Result<()> {
        let Some(kind) = CompressionType::from_code(self.compression_type) else {
            return Err(Error::format(
                "compression_type",
                format!("unknown compression type {}", self.compression_type),
            ));
        };
        let bit = self.incompatible_features & incompat::COMPRESSION_TYPE != 0;
        match (kind, bit) {
            (CompressionType::Zlib, true) => Err(Error::format(
                "compression_type",
                "zlib with incompatible bit 3 (compression type) set",
            )),
            (CompressionType::Zstd, false) => Err(Error::format(
                "compression_type",
                "zstd without incompatible bit 3 (compression type) set",
            )),
            _ => Ok(()),
        }
    }

    /// The first extension of `kind`.
    pub fn extension(&self, kind: u32) -> Option<&Extension> {
        self.extensions.iter().find(|e| e.kind == kind)
    }

    /// The backing format the header extension names, if any: the last
    /// one where there are several, as QEMU reads them (each replaces the
    /// one before).
    pub fn backing_format(&self) -> Option<String> {
        self.extensions
            .iter()
            .rev()
            .find(|e| e.kind == ext::BACKING_FORMAT)
            .map(|e| String::from_utf8_lossy(&e.data).into_owned())
    }

    /// Parse the header from the first bytes of the image. `cluster` must
    /// hold at least the first cluster (or the whole file if shorter);
    /// `file_len` is the image length, for range checks.
    pub fn parse(cluster: &[u8]) -> Result<Header> {
        if cluster.len() < V2_HEADER_LEN {
            return Err(Error::format("header", "file too short for a qcow2 header"));
        }
        if be32(cluster, OFF_MAGIC) != MAGIC {
            return Err(Error::format("magic", "not a qcow2 image (bad magic)"));
        }
        let version = be32(cluster, OFF_VERSION);
        if version != 2 && version != 3 {
            return Err(Error::format(
                "version",
                format!("unsupported qcow2 version {version}"),
            ));
        }
        let cluster_bits = be32(cluster, OFF_CLUSTER_BITS);
        if !(9..=21).contains(&cluster_bits) {
            return Err(Error::format(
                "cluster_bits",
                format!("{cluster_bits} is outside 9..=21 (512 B to 2 MiB clusters)"),
            ));
        }
        let cluster_size = 1usize << cluster_bits;
        let mut h = Header {
            version,
            backing_file_offset: be64(cluster, OFF_BACKING_FILE_OFFSET),
            backing_file_size: be32(cluster, OFF_BACKING_FILE_SIZE),
            cluster_bits,
            size: be64(cluster, OFF_SIZE),
            crypt_method: be32(cluster, OFF_CRYPT_METHOD),
            l1_size: be32(cluster, OFF_L1_SIZE),
            l1_table_offset: be64(cluster, OFF_L1_TABLE_OFFSET),
            refcount_table_offset: be64(cluster, OFF_REFCOUNT_TABLE_OFFSET),
            refcount_table_clusters: be32(cluster, OFF_REFCOUNT_TABLE_CLUSTERS),
            nb_snapshots: be32(cluster, OFF_NB_SNAPSHOTS),
            snapshots_offset: be64(cluster, OFF_SNAPSHOTS_OFFSET),
            incompatible_features: 0,
            compatible_features: 0,
            autoclear_features: 0,
            refcount_order: 4,
            header_length: V2_HEADER_LEN as u32,
            compression_type: 0,
            extensions: Vec::new(),
            backing_file: None,
        };
        if version == 3 {
            if cluster.len() < V3_MIN_HEADER_LEN {
                return Err(Error::format(
                    "header_length",
                    "file too short for a v3 header",
                ));
            }
            h.incompatible_features = be64(cluster, OFF_INCOMPATIBLE);
            h.compatible_features = be64(cluster, OFF_COMPATIBLE);
            h.autoclear_features = be64(cluster, OFF_AUTOCLEAR);
            h.refcount_order = be32(cluster, OFF_REFCOUNT_ORDER);
            h.header_length = be32(cluster, OFF_HEADER_LENGTH);
            if (h.header_length as usize) < V3_MIN_HEADER_LEN
                || h.header_length as usize > cluster_size
                || h.header_length as usize > cluster.len()
            {
                return Err(Error::format(
                    "header_length",
                    format!(
                        "{} is not between 104 and the cluster size",
                        h.header_length
                    ),
                ));
            }
            if h.header_length as usize > OFF_COMPRESSION_TYPE {
                h.compression_type = cluster[OFF_COMPRESSION_TYPE];
            }
        }
        if h.refcount_order > 6 {
            return Err(Error::format(
                "refcount_order",
                format!("{} is above 6 (64-bit refcounts)", h.refcount_order),
            ));
        }
        if h.backing_file_offset != 0 {
            if h.backing_file_size > MAX_BACKING_FILE_NAME {
                return Err(Error::format(
                    "backing_file_size",
                    format!("{} is longer than 1023 bytes", h.backing_file_size),
                ));
            }
            let end = h
                .backing_file_offset
                .checked_add(h.backing_file_size as u64);
            match end {
                Some(end) if end <= cluster_size as u64 && end <= cluster.len() as u64 => {
                    let start = h.backing_file_offset as usize;
                    let raw = &cluster[start..end as usize];
                    let name = String::from_utf8(raw.to_vec()).map_err(|_| {
                        Error::format("backing_file_offset", "backing file name is not UTF-8")
                    })?;
                    h.backing_file = Some(name);
                }
                // Inside the first cluster but not inside `cluster`: the
                // file ends first (`cluster` is the whole file when it is
                // shorter than a cluster).
                Some(end) if end <= cluster_size as u64 => {
                    return Err(Error::format(
                        "backing_file_offset",
                        format!(
                            "backing file name (bytes {}..{end}) lies past the end of the file ({} bytes)",
                            h.backing_file_offset,
                            cluster.len()
                        ),
                    ))
                }
                _ => {
                    return Err(Error::format(
                        "backing_file_offset",
                        "backing file name lies outside the first cluster",
                    ))
                }
            }
        }
        h.extensions = parse_extensions(cluster, h.header_length as usize, cluster_size, &h)?;
        Ok(h)
    }

    /// Serialise into one cluster-sized buffer. Fails if the extensions and
    /// backing file name do not fit in the first cluster.
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let cs = self.cluster_size() as usize;
        let mut b = vec![0u8; cs];
        put32(&mut b, OFF_MAGIC, MAGIC);
        put32(&mut b, OFF_VERSION, self.version);
        put32(&mut b, OFF_CLUSTER_BITS, self.cluster_bits);
        put64(&mut b, OFF_SIZE, self.size);
        put32(&mut b, OFF_CRYPT_METHOD, self.crypt_method);
        put32(&mut b, OFF_L1_SIZE, self.l1_size);
        put64(&mut b, OFF_L1_TABLE_OFFSET, self.l1_table_offset);
        put64(
            &mut b,
            OFF_REFCOUNT_TABLE_OFFSET,
            self.refcount_table_offset,
        );
        put32(
            &mut b,
            OFF_REFCOUNT_TABLE_CLUSTERS,
            self.refcount_table_clusters,
        );
        put32(&mut b, OFF_NB_SNAPSHOTS, self.nb_snapshots);
        put64(&mut b, OFF_SNAPSHOTS_OFFSET, self.snapshots_offset);
        let mut pos = if self.version >= 3 {
            put64(&mut b, OFF_INCOMPATIBLE, self.incompatible_features);
            put64(&mut b, OFF_COMPATIBLE, self.compatible_features);
            put64(&mut b, OFF_AUTOCLEAR, self.autoclear_features);
            put32(&mut b, OFF_REFCOUNT_ORDER, self.refcount_order);
            put32(&mut b, OFF_HEADER_LENGTH, self.header_length);
            if self.header_length as usize > OFF_COMPRESSION_TYPE {
                b[OFF_COMPRESSION_TYPE] = self.compression_type;
            }
            self.header_length as usize
        } else {
            V2_HEADER_LEN
        };
        let too_big = || {
            Error::format(
                "header",
                "extensions and backing file name exceed the first cluster",
            )
        };
        for e in &self.extensions {
            let padded = e.data.len().div_ceil(8) * 8;
            if pos + 8 + padded > cs {
                return Err(too_big());
            }
            put32(&mut b, pos, e.kind);
            put32(&mut b, pos + 4, e.data.len() as u32);
            b[pos + 8..pos + 8 + e.data.len()].copy_from_slice(&e.data);
            pos += 8 + padded;
        }
        if pos + 8 > cs {
            return Err(too_big());
        }
        pos += 8; // end-of-extensions marker, already zero
        if let Some(name) = &self.backing_file {
            if pos + name.len() > cs {
                return Err(too_big());
            }
            b[pos..pos + name.len()].copy_from_slice(name.as_bytes());
            put64(&mut b, OFF_BACKING_FILE_OFFSET, pos as u64);
            put32(&mut b, OFF_BACKING_FILE_SIZE, name.len() as u32);
        }
        Ok(b)
    }

    /// The feature name table this engine writes into new images.
    pub fn feature_table() -> Extension {
        let entries: [(u8, u8, &str); 8] = [
            (0, 0, "dirty bit"),
            (0, 1, "corrupt bit"),
            (0, 2, "external data file"),
            (0, 3, "compression type"),
            (0, 4, "extended L2 entries"),
            (1, 0, "lazy refcounts"),
            (2, 0, "bitmaps"),
            (2, 1, "raw external data"),
        ];
        let mut data = Vec::with_capacity(entries.len() * 48);
        for (ty, bit, name) in entries {
            let mut e = [0u8; 48];
            e[0] = ty;
            e[1] = bit;
            e[2..2 + name.len()].copy_from_slice(name.as_bytes());
            data.extend_from_slice(&e);
        }
        Extension {
            kind: ext::FEATURE_TABLE,
            data,
        }
    }

    /// The names the feature name table gives the incompatible bits of
    /// `mask`, in the table's order (a bit named twice counts once), and
    /// the bits of `mask` it does not name.
    pub fn incompatible_feature_names(&self, mut mask: u64) -> (Vec<String>, u64) {
        let mut names = Vec::new();
        for e in self.feature_entries() {
            let bit = u32::from(e[1]);
            if e[0] == 0 && bit < 64 && mask & (1 << bit) != 0 {
                mask &= !(1 << bit);
                names.push(table_name(&e));
            }
        }
        (names, mask)
    }

    /// The name the image's own feature table gives bit `bit` of feature
    /// type `ty` (0 incompatible, 1 compatible, 2 autoclear).
    pub fn feature_name(&self, ty: u8, bit: u32) -> Option<String> {
        self.feature_entries()
            .find_map(|e| (e[0] == ty && u32::from(e[1]) == bit).then(|| table_name(&e)))
    }

    /// The feature name table's 48-byte entries, as QEMU reads them: a
    /// last entry cut short is padded with zeroes, and an entry with an
    /// empty name ends the table.
    fn feature_entries(&self) -> impl Iterator<Item = [u8; 48]> + '_ {
        let data = self
            .extension(ext::FEATURE_TABLE)
            .map_or(&[][..], |t| &t.data[..]);
        data.chunks(48)
            .map(|c| {
                let mut e = [0u8; 48];
                e[..c.len()].copy_from_slice(c);
                e
            })
            .take_while(|e| e[2] != 0)
    }
}

/// The name of a 48-byte feature name table entry: up to 46 bytes, ended
/// by a NUL where shorter.
fn table_name(entry: &[u8]) -> String {
    let name = &entry[2..48];
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    String::from_utf8_lossy(&name[..end]).into_owned()
}

fn parse_extensions(
    cluster: &[u8],
    start: usize,
    cluster_size: usize,
    h: &Header,
) -> Result<Vec<Extension>> {
    let limit = cluster_size.min(cluster.len());
    // Extensions end where the backing file name starts, if it is inside.
    let limit = if h.backing_file_offset != 0 && (h.backing_file_offset as usize) > start {
        limit.min(h.backing_file_offset as usize)
    } else {
        limit
    };
    let mut out = Vec::new();
    let mut pos = start;
    loop {
        if pos + 8 > limit {
            // QEMU tolerates a header with no end marker when nothing follows.
            break;
        }
        let kind = be32(cluster, pos);
        let len = be32(cluster, pos + 4) as usize;
        if kind == ext::END {
            break;
        }
        let data_start = pos + 8;
        if len > limit - data_start {
            return Err(Error::format(
                "header extension",
                format!("extension {kind:#x} at offset {pos} of length {len} runs past the header cluster"),
            ));
        }
        out.push(Extension {
            kind,
            data: cluster[data_start..data_start + len].to_vec(),
        });
        pos = data_start + len.div_ceil(8) * 8;
    }
    Ok(out)
}
