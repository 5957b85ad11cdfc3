//! The numbers that follow from the header: cluster size, table sizes, and
//! the conversions between guest offsets, L1/L2 indices and refcount
//! indices, named as the specification names them.

use crate::format::Header;

/// Derived sizes of one image. Cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub cluster_bits: u32,
    pub cluster_size: u64,
    /// Entries per L2 table.
    pub l2_entries: u64,
    pub refcount_bits: u32,
    /// Refcount entries per refcount block.
    pub rc_entries: u64,
    pub version: u32,
    pub virtual_size: u64,
}

impl Geometry {
    pub fn new(h: &Header) -> Self {
        let cluster_size = 1u64 << h.cluster_bits;
        Geometry {
            cluster_bits: h.cluster_bits,
            cluster_size,
            l2_entries: cluster_size / 8,
            refcount_bits: h.refcount_bits(),
            rc_entries: cluster_size * 8 / h.refcount_bits() as u64,
            version: h.version,
            virtual_size: h.size,
        }
    }

    /// Bytes of guest data one L2 table maps.
    pub fn l2_span(&self) -> u64 {
        self.cluster_size * self.l2_entries
    }

    pub fn offset_to_l1_index(&self, guest: u64) -> usize {
        (guest / self.l2_span()) as usize
    }

    pub fn offset_to_l2_index(&self, guest: u64) -> usize {
        ((guest >> self.cluster_bits) % self.l2_entries) as usize
    }

    pub fn cluster_start(&self, off: u64) -> u64 {
        off & !(self.cluster_size - 1)
    }

    pub fn offset_into_cluster(&self, off: u64) -> u64 {
        off & (self.cluster_size - 1)
    }

    /// L1 entries needed to map `size` guest bytes.
    pub fn l1_entries_for(&self, size: u64) -> u64 {
        size.div_ceil(self.l2_span())
    }

    /// Host cluster index -> (refcount table index, index in block).
    pub fn refcount_position(&self, cluster_index: u64) -> (usize, usize) {
        (
            (cluster_index / self.rc_entries) as usize,
            (cluster_index % self.rc_entries) as usize,
        )
    }
}
