//! The refcount side of internal snapshots: the clusters an L1 table
//! references (its L2 tables and, through them, data clusters), adding a
//! reference to each of them, and recomputing the active tables' COPIED
//! flags from the refcounts.
//!
//! A refcount counts L1 tables, not L2 entries: a data cluster reached by
//! the active L1 table and two snapshots has refcount 3 even when all
//! three share one L2 table, and that table has refcount 3 as well (the
//! way QEMU, its check and this engine's rebuild count).
//!
//! Every function here that reads tables or refcounts takes the metadata
//! lock's guard (`MetaGuard`).

use std::collections::BTreeMap;

use crate::cluster::l1l2::decode_slot;
use crate::dev::BlockDev;
use crate::error::{Error, Result, SnapshotError};
use crate::format::entry::COPIED;
use crate::format::{read_be64_table, refcount, L1Entry, L2Entry, L2Mapping};
use crate::image::{Image, MetaGuard, MAX_L1_BYTES};

/// Host clusters with how many references an L1 table holds to each.
pub(crate) type References = BTreeMap<u64, u64>;

impl<D: BlockDev> Image<D> {
    /// Read and check the snapshot L1 table at `off` of `len` entries:
    /// inside the file, within QEMU's L1 limit and the memory limit, each
    /// entry valid and naming an L2 table inside the file.
    pub(crate) async fn read_inactive_l1(&self, off: u64, len: u32) -> Result<Vec<u64>> {
        let cs = self.geo.cluster_size;
        let bytes = u64::from(len) * 8;
        let field = "snapshot L1 table";
        if bytes > MAX_L1_BYTES || bytes > self.opts.metadata_memory_limit {
            return Err(Error::format(field, format!("{len} entries are too many")));
        }
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let file_len = self.dev.len();
        if !off.is_multiple_of(cs) || off < cs || off.saturating_add(bytes) > file_len {
            return Err(Error::format(field, format!("offset {off:#x} is invalid")));
        }
        let mut raw = vec![0u8; bytes as usize];
        self.dev.read(off, &mut raw).await?;
        let l1 = read_be64_table(&raw);
        for (i, &e) in l1.iter().enumerate() {
            let e = L1Entry(e);
            e.validate(i, cs)?;
            let l2 = e.l2_offset();
            if l2 != 0 && (l2 < cs || l2.saturating_add(cs) > file_len) {
                return Err(Error::format(
                    format!("snapshot L1 entry {i}"),
                    format!("L2 table {l2:#x} is outside the file"),
                ));
            }
        }
        Ok(l1)
    }

    /// Every cluster the L1 table `l1` references, with how often: its L2
    /// tables and the data clusters their entries name (not those of an
    /// external data file, which are not counted). L2 tables are read from
    /// the cache where it holds them, else from the device.
    pub(crate) async fn l1_references(&self, mg: &MetaGuard<'_>, l1: &[u64]) -> Result<References> {
        let cs = self.geo.cluster_size;
        let end = mg.borrow().alloc.end_cluster();
        let mut refs = References::new();
        let mut add = |c: u64, at: u64| -> Result<()> {
            if c >= end {
                return Err(Error::corrupt(
                    format!("a table references cluster {c}, past the end of the image"),
                    at,
                ));
            }
            *refs.entry(c).or_insert(0) += 1;
            Ok(())
        };
        for &e in l1 {
            let l2_off = L1Entry(e).l2_offset();
            if l2_off == 0 {
                continue;
            }
            add(l2_off / cs, l2_off)?;
            if self.has_data_file() {
                continue;
            }
            let cached = {
                let mut m = mg.borrow_mut();
                m.tables
                    .l2_cached(l2_off)
                    .then(|| m.tables.l2_table(l2_off))
            };
            let table = match cached {
                Some(t) => t,
                None => {
                    let mut t = vec![0u8; cs as usize];
                    self.dev.read(l2_off, &mut t).await?;
                    t
                }
            };
            for idx in 0..self.geo.l2_entries as usize {
                let entry = decode_slot(&table, idx, self.geo.extended_l2);
                entry.validate(l2_off, idx, cs, self.geo.extended_l2, false)?;
                let m = entry.decode(self.geo.cluster_bits, self.geo.version);
                for c in self.geo.referenced_clusters(m) {
                    add(c, l2_off)?;
                }
            }
        }
        Ok(refs)
    }

    /// Whether `refs` can be added to the refcounts: each cluster in use
    /// and none overflowing.
    pub(crate) async fn check_references(
        &self,
        mg: &MetaGuard<'_>,
        refs: &References,
    ) -> Result<()> {
        let bits = self.geo.refcount_bits;
        let max = refcount::max(bits);
        for (&c, &n) in refs {
            let rc = self.refcount(mg, c).await?;
            if rc == 0 {
                return Err(Error::corrupt(
                    format!("cluster {c} is referenced but its refcount is 0"),
                    c * self.geo.cluster_size,
                ));
            }
            // Checked, not saturating: a 64-bit count at its maximum
            // saturates to the maximum itself, which passed for fitting
            // and then wrapped to zero on the add (a cluster referenced
            // twice with refcount 0).
            if rc.checked_add(n).is_none_or(|sum| sum > max) {
                return Err(SnapshotError::RefcountOverflow { cluster: c, bits }.into());
            }
        }
        Ok(())
    }

    /// Add `refs` to the refcounts, checked first (`check_references`) so
    /// that a refusal changes nothing. The new counts are in the refcount
    /// cache, not yet written.
    pub(crate) async fn add_references(&self, mg: &MetaGuard<'_>, refs: &References) -> Result<()> {
        self.check_references(mg, refs).await?;
        for (&c, &n) in refs {
            let rc = self.refcount(mg, c).await?;
            self.set_refcount(mg, c, rc + n).await?;
        }
        Ok(())
    }

    /// Drop `refs` once the change that removed them is durable (queued
    /// as frees: the next writeback applies them).
    pub(crate) fn drop_references(&self, refs: &References) {
        for (&c, &n) in refs {
            for _ in 0..n {
                self.queue_free(c);
            }
        }
    }

    /// Clear the COPIED flag of every entry of the L2 tables `l1` names
    /// and, with `active` (`l1` is the active table), of the L1 entries
    /// too. Clearing is the safe side of the flag (a write then copies a
    /// cluster it could have written in place), so it may reach the disk
    /// before the refcounts that make a cluster shared.
    pub(crate) async fn clear_copied(
        &self,
        mg: &MetaGuard<'_>,
        l1: &[u64],
        active: bool,
    ) -> Result<()> {
        for (i, &e) in l1.iter().enumerate() {
            let e = L1Entry(e);
            let l2_off = e.l2_offset();
            if l2_off == 0 {
                continue;
            }
            if active && e.copied() {
                mg.borrow_mut()
                    .tables
                    .set_l1_entry(i, L1Entry::new(l2_off, false));
            }
            self.load_l2(mg, l2_off).await?;
            for idx in 0..self.geo.l2_entries as usize {
                let entry = mg.borrow_mut().tables.l2_entry(l2_off, idx);
                if entry.word & COPIED != 0 {
                    mg.borrow_mut()
                        .tables
                        .update_l2_entry(l2_off, idx, |e| L2Entry {
                            word: e.word & !COPIED,
                            ..e
                        });
                }
            }
        }
        Ok(())
    }

    /// Set the COPIED flag of every active L1 entry and of every L2 entry
    /// naming a host cluster exactly where its refcount is 1 (QEMU's rule;
    /// compressed clusters never carry it). Only entries whose flag is
    /// wrong are changed, in the caches; a writeback writes them after the
    /// refcounts they rely on.
    pub(crate) async fn recompute_copied(&self, mg: &MetaGuard<'_>) -> Result<()> {
        let cs = self.geo.cluster_size;
        let l1_len = mg.borrow().tables.l1().len();
        for i in 0..l1_len {
            let e = mg.borrow().tables.l1_entry(i);
            let l2_off = e.l2_offset();
            if l2_off == 0 {
                continue;
            }
            let alone = self.refcount(mg, l2_off / cs).await? == 1;
            if e.copied() != alone {
                mg.borrow_mut()
                    .tables
                    .set_l1_entry(i, L1Entry::new(l2_off, alone));
            }
            if self.has_data_file() {
                continue;
            }
            self.load_l2(mg, l2_off).await?;
            for idx in 0..self.geo.l2_entries as usize {
                let entry = mg.borrow_mut().tables.l2_entry(l2_off, idx);
                let host = match entry.decode(self.geo.cluster_bits, self.geo.version) {
                    L2Mapping::Normal { host, .. }
                    | L2Mapping::Zero {
                        preallocated: Some(host),
                    } => host,
                    _ => continue,
                };
                let alone = self.refcount(mg, host / cs).await? == 1;
                if (entry.word & COPIED != 0) != alone {
                    // The table may have been evicted while refcounts
                    // loaded: bring it back before changing it.
                    self.load_l2(mg, l2_off).await?;
                    mg.borrow_mut()
                        .tables
                        .update_l2_entry(l2_off, idx, |e| L2Entry {
                            word: if alone {
                                e.word | COPIED
                            } else {
                                e.word & !COPIED
                            },
                            ..e
                        });
                }
            }
        }
        Ok(())
    }
}
