//! Rebuilding the refcount structure from scratch, for repairs where the
//! refcount table or blocks themselves are broken: new refcount blocks and
//! a new refcount table are placed in clusters the in-memory refcounts say
//! are free, written from those refcounts, and the header is pointed at
//! the new table. The old structure is leaked; the leak pass that follows
//! frees it.

use super::header::{OFF_REFCOUNT_TABLE_CLUSTERS, OFF_REFCOUNT_TABLE_OFFSET};
use super::pass::Ol;
use super::pass::{Abort, Pass};
use super::refcounts::{set_entry, Imrt, MAX_CLUSTERS};

impl Pass<'_, '_> {
    /// Finds `count` contiguous free clusters at or after `*first_free`
    /// (growing the image when needed), marks them used, and returns the
    /// offset of the first. `*first_free` moves to the first gap seen.
    fn alloc_imrt(&self, imrt: &mut Imrt, count: u64, first_free: &mut u64) -> Result<u64, Abort> {
        let mut cluster = *first_free;
        let mut first_gap = true;
        let mut run = 0;
        while cluster < imrt.len() && run < count {
            if imrt.get(cluster) == 0 {
                run += 1;
                if first_gap {
                    *first_free = cluster;
                    first_gap = false;
                }
            } else {
                run = 0;
            }
            cluster += 1;
        }
        if run < count {
            let needed = cluster + count - run;
            if needed > MAX_CLUSTERS {
                return Err(Abort("ERROR allocating refblock: File too large".into()));
            }
            imrt.grow(needed);
        }
        let start = cluster - run;
        for c in start..start + count {
            imrt.set(c, 1);
        }
        Ok(start << self.img.h.cluster_bits)
    }

    /// Writes a refcount block for every block-sized range of clusters in
    /// `[first, end)` that holds a used cluster, allocating the blocks that
    /// `reftable` does not have yet. Returns whether `reftable` grew.
    fn write_refblocks(
        &mut self,
        imrt: &mut Imrt,
        first: u64,
        mut end: u64,
        reftable: &mut Vec<u64>,
    ) -> Result<bool, Abort> {
        let h = self.img.h.clone();
        let block_bits = h.refcount_block_bits();
        let block_size = 1u64 << block_bits;
        let mut first_free = 0u64;
        let mut grown = false;
        let mut cluster = first;
        while cluster < end {
            if imrt.get(cluster) == 0 {
                cluster += 1;
                continue;
            }
            let index = cluster >> block_bits;
            let start = index << block_bits;
            let block_offset = match reftable.get(index as usize) {
                Some(&off) if off != 0 => off,
                _ => {
                    // Never allocate inside a block already written.
                    first_free = first_free.max(start);
                    let off = self.alloc_imrt(imrt, 1, &mut first_free)?;
                    end = end.max((off >> h.cluster_bits) + 1);
                    if reftable.len() as u64 <= index {
                        let entries =
                            ((index + 1) * 8).div_ceil(h.cluster_size()) * h.cluster_size() / 8;
                        reftable.resize(entries as usize, 0);
                        grown = true;
                    }
                    reftable[index as usize] = off;
                    off
                }
            };
            let mut buf = vec![0u8; h.cluster_size() as usize];
            for k in 0..block_size {
                let v = imrt.get(start + k);
                if v != 0 {
                    set_entry(&mut buf, h.refcount_order, k, v);
                }
            }
            self.guarded_write(Ol::None, block_offset, &buf)?;
            cluster = start + block_size;
        }
        Ok(grown)
    }

    fn write_bytes(&mut self, off: u64, buf: &[u8]) -> Result<(), Abort> {
        let sink = self.img.io.sink().map_err(|e| Abort(e.to_string()))?;
        sink.write_at(off, buf)
            .map_err(|e| Abort(format!("ERROR writing refcount structure: {e}")))
    }

    /// Replaces the refcount structure with one written from `imrt`
    /// (QEMU's `rebuild_refcount_structure`).
    pub(crate) fn rebuild_refcounts(&mut self, imrt: &mut Imrt) -> Result<(), Abort> {
        let cs = self.img.h.cluster_size();
        let mut reftable = Vec::new();
        let len = imrt.len();
        let mut changed = self.write_refblocks(imrt, 0, len, &mut reftable)?;
        assert!(changed || reftable.is_empty());
        let mut table_offset;
        let mut table_clusters;
        loop {
            let mut first_free = 0;
            table_clusters = (reftable.len() as u64 * 8).div_ceil(cs);
            table_offset = self.alloc_imrt(imrt, table_clusters, &mut first_free)?;
            let start = table_offset / cs;
            changed = self.write_refblocks(imrt, start, start + table_clusters, &mut reftable)?;
            if !changed {
                break;
            }
        }
        let bytes: Vec<u8> = reftable.iter().flat_map(|e| e.to_be_bytes()).collect();
        self.guarded_write(Ol::None, table_offset, &bytes)?;
        let mut hdr = [0u8; 12];
        hdr[..8].copy_from_slice(&table_offset.to_be_bytes());
        hdr[8..].copy_from_slice(&(table_clusters as u32).to_be_bytes());
        debug_assert_eq!(OFF_REFCOUNT_TABLE_CLUSTERS, OFF_REFCOUNT_TABLE_OFFSET + 8);
        self.write_bytes(OFF_REFCOUNT_TABLE_OFFSET, &hdr)?;
        self.img.h.refcount_table_offset = table_offset;
        self.img.h.refcount_table_clusters = table_clusters as u32;
        self.img.disk.table = reftable;
        self.img.disk.table_offset = table_offset;
        self.img.disk.invalidate();
        Ok(())
    }
}
