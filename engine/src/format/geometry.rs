//! The numbers that follow from the header: cluster size, table sizes, and
//! the conversions between guest offsets, L1/L2 indices and refcount
//! indices, named as the specification names them.

use crate::format::entry::{ALL_ALLOC, ALL_ZERO, SUBCLUSTERS};
use crate::format::{Header, L2Entry, L2Mapping};

/// Derived sizes of one image. Cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub cluster_bits: u32,
    pub cluster_size: u64,
    /// Entries per L2 table.
    pub l2_entries: u64,
    /// Extended L2 entries (subclusters): incompatible bit 4.
    pub extended_l2: bool,
    /// Bytes of one L2 entry: 8, or 16 with extended L2 entries.
    pub l2_entry_size: u64,
    /// The unit an L2 entry describes alike: a subcluster (1/32 of a
    /// cluster) with extended L2 entries, else the whole cluster.
    pub subcluster_size: u64,
    pub refcount_bits: u32,
    /// Refcount entries per refcount block.
    pub rc_entries: u64,
    pub version: u32,
    pub virtual_size: u64,
}

impl Geometry {
    pub fn new(h: &Header) -> Self {
        let cluster_size = 1u64 << h.cluster_bits;
        let extended_l2 = h.extended_l2();
        let l2_entry_size = if extended_l2 { 16 } else { 8 };
        Geometry {
            cluster_bits: h.cluster_bits,
            cluster_size,
            l2_entries: cluster_size / l2_entry_size,
            extended_l2,
            l2_entry_size,
            subcluster_size: if extended_l2 {
                cluster_size / SUBCLUSTERS as u64
            } else {
                cluster_size
            },
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

    /// The start of the subcluster (cluster, in standard images) holding
    /// `off`.
    pub fn subcluster_start(&self, off: u64) -> u64 {
        off & !(self.subcluster_size - 1)
    }

    /// What guest offset `guest`, mapped by entry `e`, reads as: the
    /// cluster's meaning, or its subcluster's with extended L2 entries.
    pub fn decode_at(&self, e: L2Entry, guest: u64) -> L2Mapping {
        if self.extended_l2 {
            let sc = (self.offset_into_cluster(guest) / self.subcluster_size) as u32;
            e.decode_subcluster(self.cluster_bits, sc)
        } else {
            e.decode(self.cluster_bits, self.version)
        }
    }

    /// The entry linking a newly written host cluster (every subcluster
    /// allocated), COPIED.
    pub fn data_entry(&self, host: u64) -> L2Entry {
        let e = L2Entry::normal(host, true);
        if self.extended_l2 {
            e.with_bitmap(ALL_ALLOC)
        } else {
            e
        }
    }

    /// The entry of a cluster that reads as zeroes and holds no host
    /// cluster (version 3).
    pub fn zero_entry(&self) -> L2Entry {
        if self.extended_l2 {
            L2Entry::UNALLOCATED.with_bitmap(ALL_ZERO)
        } else {
            L2Entry::zero(None, false)
        }
    }

    /// The host clusters the bytes `[off, off + len)` touch.
    pub fn clusters_in(&self, off: u64, len: u64) -> std::ops::Range<u64> {
        off / self.cluster_size..(off + len).div_ceil(self.cluster_size)
    }

    /// The host clusters an L2 entry's mapping holds a reference to: a
    /// data cluster, a preallocated zero cluster, or every cluster a
    /// compressed cluster's sectors touch (several compressed clusters
    /// may share one, each holding a reference); none for the rest. What a
    /// refcount counts, and what dropping the entry releases.
    pub fn referenced_clusters(&self, m: L2Mapping) -> std::ops::Range<u64> {
        match m {
            L2Mapping::Normal { host, .. }
            | L2Mapping::Zero {
                preallocated: Some(host),
            } => {
                let c = host / self.cluster_size;
                c..c + 1
            }
            L2Mapping::Compressed { host, sectors } => {
                // The count starts at the sector holding `host`.
                self.clusters_in(host & !511, sectors * 512)
            }
            L2Mapping::Zero { preallocated: None } | L2Mapping::Unallocated => 0..0,
        }
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
