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

use crate::error::{Error, Result};

pub const COPIED: u64 = 1 << 63;
pub const COMPRESSED: u64 = 1 << 62;
pub const ZERO: u64 = 1;
/// Host offset bits of L1 entries and uncompressed L2 entries.
pub const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const L1_RESERVED: u64 = 0x7f00_0000_0000_01ff;
const L2_RESERVED: u64 = 0x3f00_0000_0000_01fe;

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

/// A standard (64-bit) L2 entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct L2Entry(pub u64);

impl L2Entry {
    pub const UNALLOCATED: L2Entry = L2Entry(0);

    pub fn normal(host: u64, copied: bool) -> Self {
        debug_assert_eq!(host & !OFFSET_MASK, 0);
        L2Entry(host | if copied { COPIED } else { 0 })
    }

    pub fn zero(preallocated: Option<u64>, copied: bool) -> Self {
        match preallocated {
            Some(h) => L2Entry(h | ZERO | if copied { COPIED } else { 0 }),
            None => L2Entry(ZERO),
        }
    }

    /// Decode. `cluster_bits` is needed for compressed descriptors;
    /// `version` decides whether the zero flag exists.
    pub fn decode(self, cluster_bits: u32, version: u32) -> L2Mapping {
        let e = self.0;
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

    /// Validate an entry found at `index` of the L2 table at `table`.
    pub fn validate(self, table: u64, index: usize, cluster_size: u64) -> Result<()> {
        if self.0 & COMPRESSED != 0 {
            if self.0 & COPIED != 0 {
                return Err(Error::corrupt(
                    format!("L2 entry {index}: compressed cluster with COPIED flag"),
                    table,
                ));
            }
            return Ok(());
        }
        if self.0 & L2_RESERVED != 0 {
            return Err(Error::corrupt(
                format!("L2 entry {index}: reserved bits set in {:#018x}", self.0),
                table,
            ));
        }
        if !(self.0 & OFFSET_MASK).is_multiple_of(cluster_size) {
            return Err(Error::corrupt(
                format!(
                    "L2 entry {index}: data offset {:#x} is not cluster aligned",
                    self.0 & OFFSET_MASK
                ),
                table,
            ));
        }
        Ok(())
    }
}
