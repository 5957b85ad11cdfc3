//! Reference counts two ways: the in-memory table the checker rebuilds from
//! what the image references, and the refcounts the image stores on disk
//! (refcount table and blocks), read the way QEMU reads them.

use std::io;

use super::header::Header;
use super::source::{ImageSink, ImageSource};

pub(crate) const REFT_OFFSET_MASK: u64 = 0xffff_ffff_ffff_fe00;
pub(crate) const REFT_RESERVED_MASK: u64 = 0x1ff;

/// The most clusters the checker will track, as QEMU's check refuses
/// images with more than `INT_MAX` clusters.
pub(crate) const MAX_CLUSTERS: u64 = i32::MAX as u64;

/// The in-memory refcount table (QEMU's IMRT): one counter per host
/// cluster, grown on demand by references just past the end of the file.
#[derive(Debug, Clone)]
pub(crate) struct Imrt {
    counts: Vec<u64>,
    max: u64,
}

impl Imrt {
    pub fn new(clusters: u64, refcount_bits: u32) -> Self {
        assert!(clusters <= MAX_CLUSTERS);
        let max = if refcount_bits == 64 {
            u64::MAX
        } else {
            (1u64 << refcount_bits) - 1
        };
        Imrt {
            counts: vec![0; clusters as usize],
            max,
        }
    }

    pub fn len(&self) -> u64 {
        self.counts.len() as u64
    }

    pub fn get(&self, cluster: u64) -> u64 {
        self.counts.get(cluster as usize).copied().unwrap_or(0)
    }

    pub fn set(&mut self, cluster: u64, value: u64) {
        self.grow(cluster + 1);
        self.counts[cluster as usize] = value;
    }

    /// Grows to `clusters` entries (never shrinks).
    pub fn grow(&mut self, clusters: u64) {
        assert!(clusters <= MAX_CLUSTERS + 1);
        if clusters > self.len() {
            self.counts.resize(clusters as usize, 0);
        }
    }

    /// Adds one reference unless the counter is saturated; returns false
    /// on overflow.
    pub fn inc(&mut self, cluster: u64) -> bool {
        self.grow(cluster + 1);
        let c = &mut self.counts[cluster as usize];
        if *c == self.max {
            return false;
        }
        *c += 1;
        true
    }

    pub fn clear(&mut self) {
        self.counts.fill(0);
    }
}

/// Why an on-disk refcount could not be read.
#[derive(Debug)]
pub(crate) enum RefcountReadError {
    /// The refcount table entry is not cluster aligned.
    UnalignedBlock {
        block: u64,
        index: u64,
    },
    Io(io::Error),
}

/// The refcounts the image stores: its refcount table (read once, as QEMU
/// does at open) and one cached refcount block.
#[derive(Debug, Clone)]
pub(crate) struct DiskRefcounts {
    pub table: Vec<u64>,
    pub table_offset: u64,
    cluster_bits: u32,
    refcount_order: u32,
    block_bits: u32,
    cached: Option<(u64, Vec<u8>)>,
}

impl DiskRefcounts {
    pub fn load(src: &dyn ImageSource, h: &Header) -> io::Result<Self> {
        let entries = h.refcount_table_entries() as usize;
        let table = super::source::read_u64s(src, h.refcount_table_offset, entries)?;
        Ok(DiskRefcounts {
            table,
            table_offset: h.refcount_table_offset,
            cluster_bits: h.cluster_bits,
            refcount_order: h.refcount_order,
            block_bits: h.refcount_block_bits(),
            cached: None,
        })
    }

    fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Locates `cluster`'s refcount block: `Ok(None)` when it has none.
    fn block_of(&self, cluster: u64) -> Result<Option<(u64, u64)>, RefcountReadError> {
        let index = cluster >> self.block_bits;
        let Some(&entry) = self.table.get(index as usize) else {
            return Ok(None);
        };
        let block = entry & REFT_OFFSET_MASK;
        if block == 0 {
            return Ok(None);
        }
        if block & (self.cluster_size() - 1) != 0 {
            return Err(RefcountReadError::UnalignedBlock { block, index });
        }
        Ok(Some((block, cluster & ((1 << self.block_bits) - 1))))
    }

    fn load_block(&mut self, src: &dyn ImageSource, block: u64) -> io::Result<&mut Vec<u8>> {
        if self.cached.as_ref().map(|c| c.0) != Some(block) {
            let mut buf = vec![0u8; self.cluster_size() as usize];
            super::source::read_checked(src, block, &mut buf)?;
            self.cached = Some((block, buf));
        }
        Ok(&mut self.cached.as_mut().expect("just cached").1)
    }

    /// The stored refcount of `cluster` (QEMU's `qcow2_get_refcount`).
    pub fn get(&mut self, src: &dyn ImageSource, cluster: u64) -> Result<u64, RefcountReadError> {
        let Some((block, idx)) = self.block_of(cluster)? else {
            return Ok(0);
        };
        let order = self.refcount_order;
        let buf = self.load_block(src, block).map_err(RefcountReadError::Io)?;
        Ok(get_entry(buf, order, idx))
    }

    /// Writes the stored refcount of `cluster`, whose refcount block must
    /// exist.
    pub fn set(
        &mut self,
        img: &mut dyn ImageSink,
        cluster: u64,
        value: u64,
    ) -> Result<(), RefcountReadError> {
        let Some((block, idx)) = self.block_of(cluster)? else {
            return Err(RefcountReadError::Io(io::Error::other(
                "no refcount block for cluster",
            )));
        };
        let order = self.refcount_order;
        let buf = self.load_block(img, block).map_err(RefcountReadError::Io)?;
        set_entry(buf, order, idx, value);
        let bytes = buf.clone();
        img.write_at(block, &bytes).map_err(RefcountReadError::Io)
    }

    /// Whether a refcount block is present for `cluster`.
    pub fn covers(&self, cluster: u64) -> bool {
        matches!(self.block_of(cluster), Ok(Some(_)))
    }

    /// How many clusters the refcount table could describe.
    pub fn covered_clusters(&self) -> u64 {
        (self.table.len() as u64) << self.block_bits
    }

    pub fn invalidate(&mut self) {
        self.cached = None;
    }
}

/// Reads entry `idx` of a refcount block of `1 << order`-bit entries;
/// sub-byte entries are packed from the least significant bit.
pub(crate) fn get_entry(buf: &[u8], order: u32, idx: u64) -> u64 {
    let idx = idx as usize;
    match order {
        0..=2 => {
            let bits = 1usize << order;
            let per_byte = 8 / bits;
            let shift = (idx % per_byte) * bits;
            u64::from((buf[idx / per_byte] >> shift) & ((1u16 << bits) - 1) as u8)
        }
        _ => {
            let bytes = 1usize << (order - 3);
            let s = &buf[idx * bytes..idx * bytes + bytes];
            s.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        }
    }
}

/// Writes entry `idx`; `value` must fit the entry width.
pub(crate) fn set_entry(buf: &mut [u8], order: u32, idx: u64, value: u64) {
    let idx = idx as usize;
    match order {
        0..=2 => {
            let bits = 1usize << order;
            let per_byte = 8 / bits;
            let shift = (idx % per_byte) * bits;
            let mask = (((1u16 << bits) - 1) as u8) << shift;
            let b = &mut buf[idx / per_byte];
            *b = (*b & !mask) | (((value as u8) << shift) & mask);
        }
        _ => {
            let bytes = 1usize << (order - 3);
            let be = value.to_be_bytes();
            buf[idx * bytes..idx * bytes + bytes].copy_from_slice(&be[8 - bytes..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{get_entry, set_entry};

    /// Every width packs entries without disturbing their neighbours, and
    /// sub-byte entries fill a byte from its least significant bit.
    #[test]
    fn entries_round_trip_at_every_width() {
        for order in 0..=6u32 {
            let bits = 1u32 << order;
            let max = if bits == 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            let mut buf = vec![0u8; 64];
            let n = 64 * 8 / u64::from(bits);
            for i in 0..n {
                set_entry(
                    &mut buf,
                    order,
                    i,
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & max,
                );
            }
            for i in 0..n {
                assert_eq!(
                    get_entry(&buf, order, i),
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & max,
                    "order {order} index {i}"
                );
            }
        }
        let mut buf = vec![0u8; 1];
        set_entry(&mut buf, 0, 0, 1);
        assert_eq!(buf[0], 0b0000_0001);
        set_entry(&mut buf, 1, 3, 2);
        assert_eq!(buf[0], 0b1000_0001);
    }
}
