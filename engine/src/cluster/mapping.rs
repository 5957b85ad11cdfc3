//! Guest-to-host mapping: the L1 table, L2 tables through their cache, and
//! the lookup of runs of clusters that map the same way. Allocating or
//! copying an L2 table for a write lives here too.
//!
//! Every function here that reads or changes the tables takes the
//! metadata lock's guard (`MetaGuard`); `data_dev` and `decode_l2` read no
//! mutable state.

use crate::broken::{self, Broken};
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::format::entry::COPIED;
use crate::format::{L1Entry, L2Entry, L2Mapping};
use crate::image::{overlaps, Image, MetaGuard};

/// How a run of guest clusters is mapped, for the read and write paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Run {
    /// `len` bytes at host offset `host`, contiguous; `copied` says every
    /// cluster of the run may be written in place.
    Data { host: u64, copied: bool },
    /// Reads as zeroes.
    Zero,
    /// Not allocated: backing file or zeroes.
    Unallocated,
    /// One compressed cluster.
    Compressed { host: u64, sectors: u64 },
}

impl<D: BlockDev> Image<D> {
    /// Where guest data clusters live: the data file, or the image itself.
    pub(crate) fn data_dev(&self) -> &D {
        self.data.as_ref().unwrap_or(&self.dev)
    }

    /// What an L2 entry means in this image at guest offset `guest` (its
    /// subcluster, with extended L2 entries).
    pub(crate) fn decode_l2(&self, e: L2Entry, guest: u64) -> L2Mapping {
        let m = self.geo.decode_at(e, guest);
        // With a data file, offset 0 with COPIED is guest cluster 0 (an
        // extended entry says so by its allocation bit instead).
        if self.data.is_some()
            && !self.geo.extended_l2
            && m == L2Mapping::Unallocated
            && e.word & COPIED != 0
        {
            return L2Mapping::Normal {
                host: 0,
                copied: true,
            };
        }
        m
    }

    /// Load the L2 table at `off` into the cache (validating its place).
    pub(crate) async fn load_l2(&self, mg: &MetaGuard<'_>, off: u64) -> Result<()> {
        if mg.borrow().tables.l2_cached(off) {
            return Ok(());
        }
        {
            let m = mg.borrow();
            let cs = self.geo.cluster_size;
            let h = &m.header;
            if off < cs
                || overlaps(off, cs, h.l1_table_offset, h.l1_size as u64 * 8)
                || overlaps(
                    off,
                    cs,
                    h.refcount_table_offset,
                    h.refcount_table_clusters as u64 * cs,
                )
            {
                return Err(Error::corrupt(
                    "L2 table overlaps the header, L1 or refcount table",
                    off,
                ));
            }
        }
        self.make_room_l2(mg, off).await?;
        let mut buf = vec![0u8; self.geo.cluster_size as usize];
        self.dev.read(off, &mut buf).await?;
        mg.borrow_mut().tables.insert_l2(off, buf, false);
        Ok(())
    }

    async fn make_room_l2(&self, mg: &MetaGuard<'_>, keep: u64) -> Result<()> {
        loop {
            // As make_room_rc: a poisoned image evicts only clean tables.
            let victim = {
                let m = mg.borrow();
                m.tables.l2_victim(keep, self.is_poisoned())
            };
            let Some((voff, dirty)) = victim else {
                return Ok(());
            };
            self.count(|c| c.l2_evictions += 1);
            if dirty {
                self.count(|c| c.l2_dirty_evictions += 1);
                self.guard_arose(crate::guards::Guard::EvictAfterRefcounts);
                // The entries it holds need their data and refcounts
                // durable before the table itself may reach the disk.
                if !broken::is(&self.opts, Broken::EvictWithoutFlush) {
                    self.writeback_refcount_phase(mg).await?;
                }
                self.ensure_dirty_bit(mg).await?;
                if !broken::is(&self.opts, Broken::EvictWithoutFlush) {
                    self.device_flush(mg).await?;
                }
                let data = mg.borrow().tables.dirty_l2(voff);
                if let Some(data) = data {
                    self.write_meta(voff, &data).await?;
                    self.count(|c| c.l2_writebacks += 1);
                }
            }
            mg.borrow_mut().tables.remove_l2(voff);
        }
    }

    /// The offset of the L2 table holding guest offset `guest`'s entry, as
    /// the L1 table names it (0: none). Whether it is cached is not asked.
    pub(crate) fn l2_table_of(&self, mg: &MetaGuard<'_>, guest: u64) -> u64 {
        let l1i = self.geo.offset_to_l1_index(guest);
        mg.borrow().tables.l1_entry(l1i).l2_offset()
    }

    /// The L2 entry for guest offset `guest` (unallocated where no table).
    pub(crate) async fn l2_entry(&self, mg: &MetaGuard<'_>, guest: u64) -> Result<L2Entry> {
        let l2_off = self.l2_table_of(mg, guest);
        if l2_off == 0 {
            return Ok(L2Entry::UNALLOCATED);
        }
        self.load_l2(mg, l2_off).await?;
        self.cached_l2_entry(mg, l2_off, guest)
    }

    /// The entry for guest offset `guest` in the L2 table at `l2_off`
    /// (cached), if it is one the image may hold; else the corruption.
    fn cached_l2_entry(&self, mg: &MetaGuard<'_>, l2_off: u64, guest: u64) -> Result<L2Entry> {
        let idx = self.geo.offset_to_l2_index(guest);
        let e = mg.borrow_mut().tables.l2_entry(l2_off, idx);
        e.validate(
            l2_off,
            idx,
            self.geo.cluster_size,
            self.geo.extended_l2,
            self.has_data_file(),
        )?;
        self.check_data_entry(guest, e, l2_off)?;
        // Every cluster an entry may name was in the file at open or has
        // been allocated since; anything past that is corruption, and
        // writing there would grow the file without bound. (Data clusters
        // in an external data file are checked against the guest offset
        // instead.)
        let host = match e.decode(self.geo.cluster_bits, self.geo.version) {
            L2Mapping::Normal { host, .. }
            | L2Mapping::Zero {
                preallocated: Some(host),
            }
            | L2Mapping::Compressed { host, .. } => Some(host),
            L2Mapping::Zero { preallocated: None } | L2Mapping::Unallocated => None,
        };
        if let Some(host) = host.filter(|h| {
            !self.has_data_file() && h / self.geo.cluster_size >= mg.borrow().alloc.end_cluster()
        }) {
            return Err(Error::corrupt(
                format!("L2 entry {idx}: data offset {host:#x} is beyond the end of the image"),
                l2_off,
            ));
        }
        Ok(e)
    }

    /// The run starting at guest offset `off`, at most `max_len` bytes,
    /// within one L2 table. Without `multi_cluster` a run stays within one
    /// cluster. With extended L2 entries a run ends where the subclusters
    /// stop mapping alike.
    ///
    /// One L1 entry covers the whole span, so it is read once: with no L2
    /// table the span is one unallocated run, and otherwise the table,
    /// loaded by the first lookup, stays cached for the rest (nothing
    /// here awaits after it). Looking each cluster up through
    /// [`Self::l2_entry`] gave the same runs at a cache search per cluster,
    /// a few per cent of a campaign spent in whole-disk reads.
    pub(crate) async fn map_run(
        &self,
        mg: &MetaGuard<'_>,
        off: u64,
        max_len: u64,
    ) -> Result<(Run, u64)> {
        let cs = self.geo.cluster_size;
        let sc = self.geo.subcluster_size;
        let first = self.l2_entry(mg, off).await?;
        let run = self.run_of(first, off);
        if matches!(run, Run::Compressed { .. }) {
            return Ok((run, (cs - self.geo.offset_into_cluster(off)).min(max_len)));
        }
        let span_end = if self.opts.switches.multi_cluster {
            (off / self.geo.l2_span() + 1) * self.geo.l2_span()
        } else {
            self.geo.cluster_start(off) + cs
        };
        let l2_off = self.l2_table_of(mg, off);
        if l2_off == 0 {
            return Ok((run, (span_end - off).min(max_len)));
        }
        let mut len = (sc - (off & (sc - 1))).min(max_len);
        let mut next = self.geo.subcluster_start(off) + sc;
        let mut entry = (self.geo.cluster_start(off), first);
        while len < max_len && next < span_end {
            let cstart = self.geo.cluster_start(next);
            if entry.0 != cstart {
                entry = (cstart, self.cached_l2_entry(mg, l2_off, next)?);
            }
            let same = match (run, self.run_of(entry.1, next)) {
                (
                    Run::Data { host, copied },
                    Run::Data {
                        host: h2,
                        copied: c2,
                    },
                ) => c2 == copied && h2 == host + (cstart - self.geo.cluster_start(off)),
                (Run::Zero, Run::Zero) | (Run::Unallocated, Run::Unallocated) => true,
                _ => false,
            };
            if !same {
                break;
            }
            len = (len + sc).min(max_len);
            next += sc;
        }
        Ok((run, len))
    }

    /// How guest offset `guest`, mapped by `e`, is read.
    fn run_of(&self, e: L2Entry, guest: u64) -> Run {
        match self.decode_l2(e, guest) {
            L2Mapping::Unallocated => Run::Unallocated,
            L2Mapping::Zero { .. } => Run::Zero,
            L2Mapping::Normal { host, copied } => Run::Data { host, copied },
            L2Mapping::Compressed { host, sectors } => Run::Compressed { host, sectors },
        }
    }

    /// The L2 table for guest offset `guest`, ready to be modified:
    /// allocated if missing, copied if shared with a snapshot.
    pub(crate) async fn l2_table_for_write(&self, mg: &MetaGuard<'_>, guest: u64) -> Result<u64> {
        let l1i = self.geo.offset_to_l1_index(guest);
        let l1e = mg.borrow().tables.l1_entry(l1i);
        if l1e.l2_offset() != 0 && l1e.copied() {
            self.load_l2(mg, l1e.l2_offset()).await?;
            return Ok(l1e.l2_offset());
        }
        let new_off = self.alloc_clusters(mg, 1).await?;
        // The L1 entry changes below: noted first, so that the old table's
        // free waits for it too.
        self.rules(|r| r.l1_changed(l1i));
        let content = if l1e.l2_offset() != 0 {
            self.load_l2(mg, l1e.l2_offset()).await?;
            let c = mg.borrow_mut().tables.l2_table(l1e.l2_offset());
            self.queue_free(l1e.l2_offset() / self.geo.cluster_size);
            c
        } else {
            vec![0u8; self.geo.cluster_size as usize]
        };
        self.make_room_l2(mg, new_off).await?;
        let mut m = mg.borrow_mut();
        m.tables.insert_l2(new_off, content, true);
        m.meta_clusters.insert(new_off);
        m.tables.set_l1_entry(l1i, L1Entry::new(new_off, true));
        drop(m);
        self.rules(|r| r.l2_created(new_off));
        Ok(new_off)
    }

    /// Set the L2 entry of guest offset `guest` in the (loaded) table
    /// `l2_off`; returns the previous entry.
    pub(crate) fn set_l2_entry(
        &self,
        mg: &MetaGuard<'_>,
        l2_off: u64,
        guest: u64,
        e: L2Entry,
    ) -> L2Entry {
        self.update_l2_entry(mg, l2_off, guest, |_| e)
    }

    /// Replace the L2 entry of guest offset `guest` in the (loaded) table
    /// `l2_off` by `f` of it; returns the previous entry.
    pub(crate) fn update_l2_entry(
        &self,
        mg: &MetaGuard<'_>,
        l2_off: u64,
        guest: u64,
        f: impl FnOnce(L2Entry) -> L2Entry,
    ) -> L2Entry {
        let idx = self.geo.offset_to_l2_index(guest);
        self.rules(|r| r.l2_changed(l2_off));
        mg.borrow_mut().tables.update_l2_entry(l2_off, idx, f)
    }

    /// Drop the references an L2 entry held, once that is durable.
    pub(crate) fn release_entry(&self, old: L2Entry) {
        if self.has_data_file() {
            // Data file clusters are not refcounted.
            return;
        }
        let m = old.decode(self.geo.cluster_bits, self.geo.version);
        for c in self.geo.referenced_clusters(m) {
            self.queue_free(c);
        }
    }
}
