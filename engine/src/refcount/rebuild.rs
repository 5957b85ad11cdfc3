//! Refcount rebuild for an image opened read-write with the dirty bit set
//! (left by lazy refcounts and a crash): count every reference from the
//! header, tables, L2 entries and snapshots, fix the stored refcounts to
//! match, then clear the dirty bit.
//!
//! This is the engine's own rebuild; the checker in `oracle` rebuilds
//! independently, so a bug here cannot hide itself from the check.

use std::collections::{BTreeMap, BTreeSet};

use crate::broken::{self, Broken};
use crate::cluster::l1l2::decode_slot;
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::format::entry::{L2Mapping, COPIED};
use crate::format::header::incompat;
use crate::format::snapshot::{decode_entry_head, ENTRY_HEADER_LEN};
use crate::format::{L1Entry, L2Entry};
use crate::guards::Guard;
use crate::image::Image;
use crate::steps::{MetaOp, Step};

impl<D: BlockDev> Image<D> {
    pub(crate) async fn rebuild_refcounts(&self) -> Result<()> {
        let _op = self.steps.enter(MetaOp::DirtyRebuild);
        let mg = self.meta.lock().await;
        let cs = self.geo.cluster_size;
        let file_clusters = self.dev.len().div_ceil(cs);
        let limit = self.opts.metadata_memory_limit;
        if file_clusters * 8 > limit {
            return Err(Error::MetadataLimit {
                what: "refcount rebuild".into(),
                needed: file_clusters * 8,
                limit,
            });
        }
        let mut refs: BTreeMap<u64, u64> = BTreeMap::new();
        let geo = self.geo;
        let mut count = |clusters: std::ops::Range<u64>| {
            for c in clusters {
                *refs.entry(c).or_insert(0) += 1;
            }
        };
        let h = mg.borrow().header.clone();
        count(geo.clusters_in(0, cs));
        count(geo.clusters_in(h.l1_table_offset, h.l1_size as u64 * 8));
        count(geo.clusters_in(
            h.refcount_table_offset,
            h.refcount_table_clusters as u64 * cs,
        ));
        let reftable = mg.borrow().refs.table().to_vec();
        for &b in reftable.iter().filter(|&&b| b != 0) {
            count(geo.clusters_in(b, cs));
        }
        let mut l1_tables = vec![mg.borrow().tables.l1().to_vec()];
        if h.nb_snapshots > 0 {
            let (table_len, snap_l1s) = self.read_snapshot_l1s(&h).await?;
            count(geo.clusters_in(h.snapshots_offset, table_len));
            for (off, t) in snap_l1s {
                count(geo.clusters_in(off, t.len() as u64 * 8));
                l1_tables.push(t);
            }
        }
        // The active table's entries that name a host cluster of their
        // own, with their COPIED flags, to hold against the counts below.
        let mut flags = Vec::new();
        // L2 tables an earlier L1 table named: one a snapshot shares is
        // counted again, with everything it maps, for each table naming it.
        let mut named = BTreeSet::new();
        for (k, l1) in l1_tables.iter().enumerate() {
            let active = k == 0;
            for (i, &e) in l1.iter().enumerate() {
                let l2_off = L1Entry(e).l2_offset();
                if l2_off == 0 {
                    continue;
                }
                if !named.insert(l2_off) {
                    self.guard_arose(Guard::RebuildCountsEachNaming);
                    if broken::is(&self.opts, Broken::RebuildCountsSharedOnce) {
                        // Deliberately wrong: a second naming not counted.
                        continue;
                    }
                }
                count(geo.clusters_in(l2_off, cs));
                if active {
                    flags.push(Flag::L1 {
                        index: i,
                        cluster: l2_off / cs,
                        copied: L1Entry(e).copied(),
                    });
                }
                if self.has_data_file() {
                    // Data clusters live in the data file, uncounted.
                    continue;
                }
                let mut t = vec![0u8; cs as usize];
                self.dev.read(l2_off, &mut t).await?;
                for idx in 0..self.geo.l2_entries as usize {
                    let e = decode_slot(&t, idx, self.geo.extended_l2);
                    let mapping = e.decode(geo.cluster_bits, geo.version);
                    count(geo.referenced_clusters(mapping));
                    let host = match mapping {
                        L2Mapping::Normal { host, .. }
                        | L2Mapping::Zero {
                            preallocated: Some(host),
                        } => host,
                        _ => continue,
                    };
                    if active {
                        flags.push(Flag::L2 {
                            table: l2_off,
                            index: idx,
                            cluster: host / cs,
                            copied: e.word & COPIED != 0,
                        });
                    }
                }
            }
        }
        // Fix clusters counted by existing blocks first; then give blocks to
        // the rest (allocation now sees correct counts).
        let rc_span = self.geo.rc_entries;
        // Data and tables reach the disk before what points at them, so a
        // reference past the end of the file is corruption, not a stale
        // refcount; refusing it also bounds the loop below by the file.
        if let Some(&c) = refs.keys().next_back().filter(|&&c| c >= file_clusters) {
            return Err(Error::corrupt(
                format!("a table references cluster {c}, past the end of the file"),
                c.saturating_mul(cs),
            ));
        }
        let max_cluster = file_clusters;
        let mut uncovered = Vec::new();
        for c in 0..max_cluster {
            let want = refs.get(&c).copied().unwrap_or(0);
            let rti = (c / rc_span) as usize;
            let has = mg.borrow().refs.has_block(rti);
            if !has {
                if want > 0 {
                    uncovered.push((c, want));
                }
                continue;
            }
            if self.refcount(&mg, c).await? != want {
                self.set_refcount(&mg, c, want).await?;
            }
        }
        mg.borrow_mut().alloc.set_search_start(0);
        for (c, want) in uncovered {
            // `refcount` of an uncovered cluster is 0; allocate a block by
            // claiming the cluster through the normal path, then fix.
            let (rti, _) = self.geo.refcount_position(c);
            let has = mg.borrow().refs.has_block(rti);
            if !has {
                // Not on a cluster in use that no block counts yet: the
                // range of a missing block need not be empty here.
                self.ensure_refblock_at(&mg, rti, None, &|c| refs.contains_key(&c))
                    .await?;
            }
            self.set_refcount(&mg, c, want).await?;
        }
        {
            let mut m = mg.borrow_mut();
            m.alloc.note_allocated(max_cluster);
            m.refs.set_lazy(false);
        }
        let cleans_first = broken::is(&self.opts, Broken::RebuildCleansFirst);
        if cleans_first {
            // Deliberately wrong: the bit that excuses stale refcounts
            // goes before the rebuilt ones are written.
            self.clear_dirty_bit(&mg).await?;
        }
        self.steps.step(Step::Refcounts);
        self.writeback_refcount_phase(&mg).await?;
        // COPIED exactly where the refcount is now 1 (QEMU's repair of a
        // dirty image mends the flags too): a crash inside a snapshot
        // operation may leave a flag behind its refcount. Only what is
        // wrong is changed, so an image without snapshots reads no table
        // twice.
        let wrong: Vec<Flag> = flags
            .into_iter()
            .filter(|f| {
                let (cluster, copied) = f.cluster_and_flag();
                copied != (refs.get(&cluster).copied().unwrap_or(0) == 1)
            })
            .collect();
        if !wrong.is_empty() {
            for f in wrong {
                match f {
                    Flag::L1 {
                        index,
                        cluster,
                        copied,
                    } => mg
                        .borrow_mut()
                        .tables
                        .set_l1_entry(index, L1Entry::new(cluster * cs, !copied)),
                    Flag::L2 { table, index, .. } => {
                        self.load_l2(&mg, table).await?;
                        mg.borrow_mut()
                            .tables
                            .update_l2_entry(table, index, |e| L2Entry {
                                word: e.word ^ COPIED,
                                ..e
                            });
                    }
                }
            }
            self.steps.step(Step::Flags);
            self.writeback_all(&mg).await?;
        }
        if !cleans_first {
            self.guard_arose(Guard::RebuildDurableBeforeClean);
            self.clear_dirty_bit(&mg).await?;
        }
        let mut m = mg.borrow_mut();
        m.dirty_on_disk = false;
        let lazy = m.header.lazy_refcounts();
        m.refs.set_lazy(lazy);
        Ok(())
    }

    /// The header without the dirty bit, written and made durable: the
    /// rebuild's last step, once everything it rebuilt is durable (the
    /// writebacks before it end with a flush).
    async fn clear_dirty_bit(&self, mg: &crate::image::MetaGuard<'_>) -> Result<()> {
        mg.borrow_mut().header.incompatible_features &= !incompat::DIRTY;
        self.steps.step(Step::Header);
        self.write_header(mg).await?;
        self.device_flush(mg).await
    }

    /// The snapshot table's length and each snapshot's L1 table (each
    /// entry's fixed part decoded by `format::snapshot`, the rest skipped).
    pub(crate) async fn read_snapshot_l1s(
        &self,
        h: &crate::format::Header,
    ) -> Result<(u64, Vec<(u64, Vec<u64>)>)> {
        let mut pos = h.snapshots_offset;
        let mut out = Vec::new();
        for i in 0..h.nb_snapshots {
            let mut fixed = [0u8; ENTRY_HEADER_LEN];
            self.dev.read(pos, &mut fixed).await?;
            let head = decode_entry_head(&fixed, i)?;
            let (l1_off, l1_size) = (head.l1_table_offset, u64::from(head.l1_size));
            if l1_size * 8 > self.opts.metadata_memory_limit || l1_off % self.geo.cluster_size != 0
            {
                return Err(Error::format(format!("snapshot {i}"), "invalid L1 table"));
            }
            let mut raw = vec![0u8; (l1_size * 8) as usize];
            self.dev.read(l1_off, &mut raw).await?;
            let t = raw
                .chunks_exact(8)
                .map(|w| u64::from_be_bytes(w.try_into().expect("8")))
                .collect();
            out.push((l1_off, t));
            pos += head.stride;
        }
        Ok((pos - h.snapshots_offset, out))
    }
}

/// A COPIED flag of the active tables, as the rebuild found it.
enum Flag {
    /// L1 entry `index`, naming the L2 table in `cluster`.
    L1 {
        index: usize,
        cluster: u64,
        copied: bool,
    },
    /// Entry `index` of the L2 table at `table`, naming host `cluster`.
    L2 {
        table: u64,
        index: usize,
        cluster: u64,
        copied: bool,
    },
}

impl Flag {
    fn cluster_and_flag(&self) -> (u64, bool) {
        match *self {
            Flag::L1 {
                cluster, copied, ..
            }
            | Flag::L2 {
                cluster, copied, ..
            } => (cluster, copied),
        }
    }
}
