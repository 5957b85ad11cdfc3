//! L1 and L2 table entries: the raw 64-bit words with the specification's
//! bit layout, and an enum of what an L2 entry means.
//!
//! L1 entry: bits 9..=55 the L2 table offset, bit 63 COPIED (refcount is
//! exactly 1, so the table may be written in place); other bits reserved.
//!
//! Standard L2 entry: bit 63 COPIED, bit 62 compressed. For an uncompressed
//! cluster bits 9..=55 are the host cluster offset and bit 0 reads as zeroes
//! (version 3 only). For a compressed cluster, with
//! `x = 62 - (cluster_bits - 8)`, bits 0..x are the host byte offset and
//! bits x..=61 the number of additional 512-byte sectors the compressed
//! data occupies.
//!
//! Extended L2 entry (incompatible bit 4): 128 bits, the standard word
//! above followed by a 64-bit subcluster bitmap. A cluster has 32
//! subclusters; bit `x` (0..32) says subcluster `x` is allocated (its data
//! is in the host cluster), bit `32 + x` says it reads as zeroes, neither
//! says it reads from the backing file (or zeroes). The standard word's
//! bit 0 is reserved there, and a compressed cluster's bitmap must be 0.

use crate::error::{Error, Result};

pub const COPIED: u64 = 1 << 63;
pub const COMPRESSED: u64 = 1 << 62;
pub const ZERO: u64 = 1;
/// Host offset bits of L1 entries and uncompressed L2 entries.
pub const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const L1_RESERVED: u64 = 0x7f00_0000_0000_01ff;
const L2_RESERVED: u64 = 0x3f00_0000_0000_01fe;
/// Subclusters per cluster in an extended L2 entry.
pub const SUBCLUSTERS: u32 = 32;
/// Bitmap bits saying every subcluster is allocated.
pub const ALL_ALLOC: u64 = 0xffff_ffff;
/// Bitmap bits saying every subcluster reads as zeroes.
pub const ALL_ZERO: u64 = 0xffff_ffff << 32;

/// An L1 entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct L1Entry(pub u64);

impl L1Entry {
    pub fn l2_offset(self) -> u64 {
        self.0 & OFFSET_MASK
    }

    pub fn copied(self) -> bool {
        self.0 & COPIED != 0
    }

    pub fn new(l2_offset: u64, copied: bool) -> Self {
        debug_assert_eq!(l2_offset & !OFFSET_MASK, 0);
        L1Entry(l2_offset | if copied { COPIED } else { 0 })
    }

    /// Validate against the image: reserved bits clear, offset aligned.
    pub fn validate(self, index: usize, cluster_size: u64) -> Result<()> {
        if self.0 & L1_RESERVED != 0 {
            return Err(Error::format(
                format!("L1 entry {index}"),
                format!("reserved bits set in {:#018x}", self.0),
            ));
        }
        if !self.l2_offset().is_multiple_of(cluster_size) {
            return Err(Error::format(
                format!("L1 entry {index}"),
                format!(
                    "L2 table offset {:#x} is not cluster aligned",
                    self.l2_offset()
                ),
            ));
        }
        Ok(())
    }
}

/// What a standard L2 entry means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Mapping {
    /// No data here: read from the backing file, or zeroes without one.
    Unallocated,
    /// Reads as zeroes. `preallocated` is the host cluster kept allocated
    /// (zero flag with an offset), if any.
    Zero { preallocated: Option<u64> },
    /// Data at `host` (cluster aligned). `copied`: refcount is exactly one.
    Normal { host: u64, copied: bool },
    /// Compressed data at byte offset `host`, `sectors` 512-byte sectors
    /// (counted from the start of the sector containing `host`).
    Compressed { host: u64, sectors: u64 },
}

/// An L2 entry: the standard 64-bit word and, in images with extended L2
/// entries, the subcluster bitmap (0 in standard images).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct L2Entry {
    pub word: u64,
    pub bitmap: u64,
}

impl L2Entry {
    pub const UNALLOCATED: L2Entry = L2Entry { word: 0, bitmap: 0 };

    /// A standard entry (bitmap 0) with this word.
    pub const fn from_word(word: u64) -> Self {
        L2Entry { word, bitmap: 0 }
    }

    pub fn normal(host: u64, copied: bool) -> Self {
        debug_assert_eq!(host & !OFFSET_MASK, 0);
        L2Entry::from_word(host | if copied { COPIED } else { 0 })
    }

    pub fn zero(preallocated: Option<u64>, copied: bool) -> Self {
        match preallocated {
            Some(h) => L2Entry::from_word(h | ZERO | if copied { COPIED } else { 0 }),
            None => L2Entry::from_word(ZERO),
        }
    }

    /// A compressed cluster whose `len` bytes of compressed data start
    /// at host byte offset `host`, as [`L2Entry::decode`] reads it back:
    /// the sector count field holds how many 512-byte sectors past the one
    /// holding `host` the data reaches into. Never COPIED (the
    /// specification forbids it), bitmap 0. `len` must be at least 1, and
    /// `host` and the count must fit their fields (a cluster's worth of
    /// data always does).
    pub fn compressed(host: u64, len: u64, cluster_bits: u32) -> Self {
        let x = 62 - (cluster_bits - 8);
        let extra = (host + len - 1) / 512 - host / 512;
        debug_assert!(len > 0 && host < 1 << x && extra < 1 << (62 - x));
        L2Entry::from_word(COMPRESSED | extra << x | host)
    }

    pub fn with_bitmap(self, bitmap: u64) -> Self {
        L2Entry { bitmap, ..self }
    }

    /// Decode the cluster as a whole. `cluster_bits` is needed for
    /// compressed descriptors; `version` decides whether the zero flag
    /// exists. For an extended entry this is the host-cluster view (which
    /// host cluster it holds); what a subcluster reads is
    /// [`L2Entry::decode_subcluster`].
    pub fn decode(self, cluster_bits: u32, version: u32) -> L2Mapping {
        let e = self.word;
        if e & COMPRESSED != 0 {
            let x = 62 - (cluster_bits - 8);
            let host = e & ((1u64 << x) - 1);
            let sectors = ((e >> x) & ((1u64 << (62 - x)) - 1)) + 1;
            return L2Mapping::Compressed { host, sectors };
        }
        let host = e & OFFSET_MASK;
        if version >= 3 && e & ZERO != 0 {
            return L2Mapping::Zero {
                preallocated: (host != 0).then_some(host),
            };
        }
        if host == 0 {
            L2Mapping::Unallocated
        } else {
            L2Mapping::Normal {
                host,
                copied: e & COPIED != 0,
            }
        }
    }

    /// What subcluster `sc` (0..32) of an extended entry reads as: data
    /// (`Normal`, at the cluster's host offset), zeroes, or the backing file
    /// (`Unallocated`, even where the cluster has a host offset). The entry
    /// must have passed [`L2Entry::validate`].
    pub fn decode_subcluster(self, cluster_bits: u32, sc: u32) -> L2Mapping {
        debug_assert!(sc < SUBCLUSTERS);
        if self.word & COMPRESSED != 0 {
            return self.decode(cluster_bits, 3);
        }
        let host = self.word & OFFSET_MASK;
        if self.bitmap & (1 << sc) != 0 {
            L2Mapping::Normal {
                host,
                copied: self.word & COPIED != 0,
            }
        } else if self.bitmap & (1 << (SUBCLUSTERS + sc)) != 0 {
            L2Mapping::Zero {
                preallocated: (host != 0).then_some(host),
            }
        } else {
            L2Mapping::Unallocated
        }
    }

    /// Validate an entry found at `index` of the L2 table at `table`;
    /// `extended`: the image has extended L2 entries; `data_file`: it has
    /// an external data file, where host offset 0 with COPIED is guest
    /// cluster 0 (QEMU tells it from an unallocated cluster by COPIED), so
    /// its subclusters may be allocated.
    pub fn validate(
        self,
        table: u64,
        index: usize,
        cluster_size: u64,
        extended: bool,
        data_file: bool,
    ) -> Result<()> {
        let w = self.word;
        if w & COMPRESSED != 0 {
            if w & COPIED != 0 {
                return Err(Error::corrupt(
                    format!("L2 entry {index}: compressed cluster with COPIED flag"),
                    table,
                ));
            }
            if self.bitmap != 0 {
                return Err(Error::corrupt(
                    format!(
                        "L2 entry {index}: compressed cluster with subcluster bitmap {:#018x}",
                        self.bitmap
                    ),
                    table,
                ));
            }
            return Ok(());
        }
        let reserved = if extended {
            L2_RESERVED | ZERO
        } else {
            L2_RESERVED
        };
        if w & reserved != 0 {
            return Err(Error::corrupt(
                format!("L2 entry {index}: reserved bits set in {w:#018x}"),
                table,
            ));
        }
        if !(w & OFFSET_MASK).is_multiple_of(cluster_size) {
            return Err(Error::corrupt(
                format!(
                    "L2 entry {index}: data offset {:#x} is not cluster aligned",
                    w & OFFSET_MASK
                ),
                table,
            ));
        }
        if extended {
            let (alloc, zero) = (self.bitmap & ALL_ALLOC, self.bitmap >> SUBCLUSTERS);
            if alloc & zero != 0 {
                return Err(Error::corrupt(
                    format!(
                        "L2 entry {index}: subcluster bitmap {:#018x} marks subclusters both allocated and zero",
                        self.bitmap
                    ),
                    table,
                ));
            }
            let cluster_zero = data_file && w & COPIED != 0;
            if alloc != 0 && w & OFFSET_MASK == 0 && !cluster_zero {
                return Err(Error::corrupt(
                    format!(
                        "L2 entry {index}: subcluster bitmap {:#018x} marks subclusters allocated in a cluster with no host offset",
                        self.bitmap
                    ),
                    table,
                ));
            }
        }
        Ok(())
    }
}
