//! Amending an image's format options in place, what `qemu-img amend`
//! does for qcow2: the version (`compat`, 2 <-> 3), the refcount width
//! and lazy refcounts.
//! Each change is done as QEMU's driver orders it, the header last: what
//! the new header relies on (rewritten snapshot entries, zero clusters
//! turned into something a version 2 reader understands, refcounts
//! written and the dirty bit cleared) is durable before the one write of
//! the header that switches, so a crash leaves the old image or the new.
//!
//! A downgrade converts zero clusters as QEMU does: a zero cluster that
//! keeps its host cluster gets zeroes written there and becomes a data
//! cluster; one without is made unallocated when no backing file shows
//! through, and gets a zeroed data cluster through the write path
//! otherwise. Unlike QEMU 10.0, a kept host cluster that a snapshot shares
//! is converted as one without: zeroes written into it would change the
//! snapshot. Zero clusters in internal snapshots' tables are refused
//! ([`AmendError::SnapshotZeroClusters`]), not converted.

use crate::cluster::l1l2::decode_slot;
use crate::dev::{BlockDev, WriteFlags};
use crate::error::Result;
use crate::format::header::{compat, ext, incompat, V2_HEADER_LEN, V3_HEADER_LEN};
use crate::format::{Header, L1Entry, L2Entry, L2Mapping};
use crate::image::Image;
use crate::ops::snapshot::ExtraData;
use crate::steps::{MetaOp, Step};

use crate::error::AmendError;

/// The unit a crash never tears: one 512-byte sector.
const SECTOR: usize = 512;

/// The bytes of the first cluster `h` uses: the header, its extensions
/// and their end marker, the backing file's name.
fn used_len(h: &Header) -> usize {
    let fixed = if h.version >= 3 {
        h.header_length as usize
    } else {
        V2_HEADER_LEN
    };
    let extensions: usize = h
        .extensions
        .iter()
        .map(|e| 8 + e.data.len().next_multiple_of(8))
        .sum();
    let name_end = h.backing_file_offset + u64::from(h.backing_file_size);
    (fixed + extensions + 8).max(name_end as usize)
}

impl<D: BlockDev> Image<D> {
    /// [`Image::upgrade_to_v3`]: the implementation.
    pub(crate) async fn upgrade_to_v3_impl(&mut self) -> Result<()> {
        self.check_writable()?;
        if self.header().version >= 3 {
            return Ok(());
        }
        let _op = self.steps.enter(MetaOp::AmendVersion);
        self.flush_internal(false).await?;
        let mg = self.meta.lock().await;
        let (table, old_len) = self.read_snapshot_table(&mg).await?;
        if table.iter().any(|s| s.disk_size.is_none()) {
            // Refcounts written eagerly, as a snapshot operation writes
            // them, until the new table is switched in.
            let _eager = self.eager_refcounts(&mg);
            self.switch_snapshot_table(&mg, &table, old_len, ExtraData::Written)
                .await?;
        }
        let mut h = mg.borrow().header.clone();
        drop(mg);
        h.version = 3;
        h.header_length = V3_HEADER_LEN as u32;
        h.incompatible_features = 0;
        h.compatible_features = 0;
        h.autoclear_features = 0;
        h.refcount_order = 4;
        h.compression_type = 0;
        if h.extension(ext::FEATURE_TABLE).is_none() {
            // After the backing format, where QEMU writes it.
            let at = h
                .extensions
                .iter()
                .position(|e| e.kind != ext::BACKING_FORMAT)
                .unwrap_or(h.extensions.len());
            h.extensions.insert(at, Header::feature_table());
            // Optional, as at create: small clusters may have no room
            // for it beside a backing file's name, and QEMU leaves it
            // out then.
            if h.serialize().is_err() {
                h.extensions.retain(|e| e.kind != ext::FEATURE_TABLE);
            }
        }
        self.switch_header(h).await?;
        self.take_new_header();
        Ok(())
    }

    /// [`Image::downgrade_to_v2`]: the implementation.
    pub(crate) async fn downgrade_to_v2_impl(
        &mut self,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<()> {
        self.check_writable()?;
        let (h, size) = (self.header(), self.geo.virtual_size);
        if h.version < 3 {
            return Ok(());
        }
        let _op = self.steps.enter(MetaOp::AmendVersion);
        if h.refcount_order != 4 {
            return Err(AmendError::DowngradeRefcountBits.into());
        }
        if self.has_data_file() || h.has_data_file() {
            return Err(AmendError::DowngradeDataFile.into());
        }
        let snapshots = {
            let mg = self.meta.lock().await;
            self.read_snapshot_table(&mg).await?.0
        };
        if snapshots
            .iter()
            .any(|s| s.vm_state_size > u32::MAX as u64 || s.disk_size.unwrap_or(size) != size)
        {
            return Err(AmendError::DowngradeSnapshots.into());
        }
        // Refcounts written and the dirty bit cleared, as a close does;
        // eager from here on.
        self.steps.step(Step::Refcounts);
        self.flush_internal(true).await?;
        let features = self.header().incompatible_features & !incompat::COMPRESSION_TYPE;
        if features != 0 {
            return Err(AmendError::DowngradeFeatures(features).into());
        }
        if !snapshots.is_empty() && self.snapshots_have_zero_clusters().await? {
            return Err(AmendError::SnapshotZeroClusters.into());
        }
        let l1_size = self.meta.lock().await.borrow().tables.l1().len() as u64;
        let total = l1_size + snapshots.iter().map(|s| s.l1_size as u64).sum::<u64>();
        self.steps.step(Step::ZeroClusters);
        self.expand_zero_clusters(&mut |i| progress(i, total))
            .await?;
        for done in l1_size..total {
            progress(done + 1, total);
        }
        self.flush_internal(true).await?;
        let mut h = self.header();
        if h.incompatible_features & incompat::COMPRESSION_TYPE != 0 {
            if self.has_compressed_clusters().await? {
                return Err(AmendError::DowngradeZstd.into());
            }
            h.incompatible_features &= !incompat::COMPRESSION_TYPE;
        }
        h.version = 2;
        h.incompatible_features = 0;
        h.compatible_features = 0;
        h.autoclear_features = 0;
        h.compression_type = 0;
        h.header_length = 0;
        h.extensions
            .retain(|e| e.kind != ext::FEATURE_TABLE && e.kind != ext::BITMAPS);
        self.switch_header(h).await?;
        self.take_new_header();
        Ok(())
    }

    /// [`Image::set_lazy_refcounts`]: the implementation.
    pub(crate) async fn set_lazy_refcounts_impl(&mut self, on: bool) -> Result<()> {
        self.check_writable()?;
        let h = self.header();
        if h.lazy_refcounts() == on {
            return Ok(());
        }
        let _op = self.steps.enter(MetaOp::AmendLazyRefcounts);
        if on && h.version < 3 {
            return Err(AmendError::LazyNeedsV3.into());
        }
        self.flush_internal(!on).await?;
        let mut h = self.header();
        if on {
            h.compatible_features |= compat::LAZY_REFCOUNTS;
        } else {
            h.compatible_features &= !compat::LAZY_REFCOUNTS;
        }
        self.switch_header(h).await?;
        self.take_new_header();
        Ok(())
    }

    /// [`Image::set_refcount_bits`]: the implementation.
    pub(crate) async fn set_refcount_bits_impl(&mut self, bits: u32) -> Result<()> {
        self.check_writable()?;
        if self.geo.refcount_bits == bits {
            return Ok(());
        }
        // A version 2 header has no field for the width: it is 16.
        if self.header().version < 3 {
            return Err(AmendError::RefcountBitsNeedV3.into());
        }
        let _op = self.steps.enter(MetaOp::AmendRefcountBits);
        self.flush_internal(true).await?;
        let cs = self.geo.cluster_size;
        let mg = self.meta.lock().await;
        let end = mg.borrow().alloc.end_cluster();
        let (old_table, table_off, table_clusters) = {
            let m = mg.borrow();
            (
                m.refs.table().to_vec(),
                m.header.refcount_table_offset,
                m.header.refcount_table_clusters as u64,
            )
        };
        let mut counts = Vec::with_capacity(end as usize);
        for c in 0..end {
            let n = self.refcount(&mg, c).await?;
            if n > crate::format::refcount::max(bits) {
                return Err(AmendError::RefcountTooWide {
                    bits,
                    offset: c * cs,
                    refcount: n,
                }
                .into());
            }
            counts.push(n);
        }
        // The old structures are free in the new ones.
        for &b in old_table.iter().filter(|&&b| b != 0) {
            if let Some(n) = counts.get_mut((b / cs) as usize) {
                *n = 0;
            }
        }
        for c in table_off / cs..table_off / cs + table_clusters {
            if let Some(n) = counts.get_mut(c as usize) {
                *n = 0;
            }
        }
        // The new blocks and table after everything, covering themselves.
        let per_block = cs * 8 / bits as u64;
        let (mut blocks, mut table) = (0u64, 0u64);
        loop {
            let nb = (end + blocks + table).div_ceil(per_block);
            let nt = (nb * 8).div_ceil(cs);
            if (nb, nt) == (blocks, table) {
                break;
            }
            (blocks, table) = (nb, nt);
        }
        counts.resize((end + blocks + table) as usize, 1);
        let mut entries = vec![0u64; (table * cs / 8) as usize];
        for (i, entry) in entries.iter_mut().enumerate().take(blocks as usize) {
            let off = (end + i as u64) * cs;
            let mut block = vec![0u8; cs as usize];
            let first = i * per_block as usize;
            for (j, &n) in counts
                .iter()
                .skip(first)
                .take(per_block as usize)
                .enumerate()
            {
                crate::format::refcount::set(&mut block, bits, j, n);
            }
            self.write_meta(off, &block).await?;
            *entry = off;
        }
        let new_table_off = (end + blocks) * cs;
        let bytes: Vec<u8> = entries.iter().flat_map(|e| e.to_be_bytes()).collect();
        self.write_meta(new_table_off, &bytes).await?;
        self.steps.step(Step::Table);
        self.device_flush(&mg).await?;
        let mut h = mg.borrow().header.clone();
        h.refcount_order = bits.trailing_zeros();
        h.refcount_table_offset = new_table_off;
        h.refcount_table_clusters = table as u32;
        let h = Header::parse(&h.serialize()?)?;
        mg.borrow_mut().header = h.clone();
        self.steps.step(Step::Header);
        self.write_header(&mg).await?;
        self.device_flush(&mg).await?;
        drop(mg);
        // The in-memory state of the new structures.
        self.geo = crate::format::geometry::Geometry::new(&h);
        let m = self.meta.get_mut();
        let lazy = m.refs.lazy();
        m.refs = crate::refcount::reftable::RefTable::new(
            entries.clone(),
            self.opts.refcount_cache_tables,
            bits,
            lazy,
        );
        for &b in old_table.iter().filter(|&&b| b != 0) {
            m.meta_clusters.remove(b);
        }
        m.meta_clusters
            .insert_all(entries.iter().copied().filter(|&e| e != 0));
        m.alloc.note_allocated(end + blocks + table);
        m.alloc.set_search_start(0);
        Ok(())
    }

    /// Go on, for the rest of this open, as the header just switched to
    /// says: its version (zero clusters, the dirty bit) and lazy
    /// refcounts. An open image would otherwise keep the old ones, and
    /// after a downgrade write zero clusters a version 2 reader cannot
    /// read, or after an upgrade leave a snapshot operation without the
    /// dirty bit that covers it.
    fn take_new_header(&mut self) {
        let m = self.meta.get_mut();
        let h = m.header.clone();
        m.refs.set_lazy(h.lazy_refcounts());
        self.geo = crate::format::geometry::Geometry::new(&h);
    }

    /// Write `h` as the header (checked to fit and parsed back) after
    /// everything pending, and make it durable.
    async fn switch_header(&self, h: Header) -> Result<()> {
        let new = h.serialize()?;
        let h = Header::parse(&new)?;
        self.flush_internal(false).await?;
        let mg = self.meta.lock().await;
        let old = mg.borrow().header.clone();
        mg.borrow_mut().header = h.clone();
        self.steps.step(Step::Header);
        // A write of more than one sector may be torn by a crash: an
        // upgrade's header (the feature table makes it longer than a
        // sector) written whole could land its first sector without the
        // rest, and the new header would name a backing file whose name
        // is not there. When the old header lives in the first sector
        // alone, the new one's rest goes first, made durable, so that
        // the write of the first sector (one sector: whole or not at
        // all) switches. An old header longer than a sector whose rest
        // changes keeps the one write, as QEMU's does.
        let new_len = used_len(&h);
        if new_len > SECTOR && used_len(&old) <= SECTOR {
            let tail = new[SECTOR..new_len].to_vec();
            self.write_meta(SECTOR as u64, &tail).await?;
            self.device_flush(&mg).await?;
        }
        self.write_header(&mg).await?;
        self.device_flush(&mg).await
    }

    /// Whether any internal snapshot's L2 tables hold a zero cluster.
    async fn snapshots_have_zero_clusters(&self) -> Result<bool> {
        let (_, l1s) = {
            let mg = self.meta.lock().await;
            let h = mg.borrow().header.clone();
            self.read_snapshot_l1s(&h).await?
        };
        let cs = self.geo.cluster_size;
        let mut table = vec![0u8; cs as usize];
        for (_, l1) in l1s {
            for e in l1 {
                let l2 = L1Entry(e).l2_offset();
                if l2 == 0 {
                    continue;
                }
                self.dev.read(l2, &mut table).await?;
                for idx in 0..(cs / 8) as usize {
                    let e = decode_slot(&table, idx, false);
                    if matches!(e.decode(self.geo.cluster_bits, 3), L2Mapping::Zero { .. }) {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Convert the active layer's zero clusters into what a version 2
    /// image can say (see the module comment).
    async fn expand_zero_clusters(&self, done: &mut dyn FnMut(u64)) -> Result<()> {
        let cs = self.geo.cluster_size;
        let size = self.geo.virtual_size;
        let span = self.geo.l2_span();
        let (backing, l1_size) = {
            let mg = self.meta.lock().await;
            let m = mg.borrow();
            let backing = self.backing.is_some() || m.header.backing_file.is_some();
            (backing, m.tables.l1().len() as u64)
        };
        let zeroes = vec![0u8; cs as usize];
        for l1i in 0..l1_size {
            let start = l1i * span;
            let end = (start + span).min(size);
            let mut to_write = Vec::new();
            let mg = self.meta.lock().await;
            if self.l2_table_of(&mg, start) != 0 {
                let mut zeroed = Vec::new();
                let mut guest = start;
                while guest < end {
                    let e = self.l2_entry(&mg, guest).await?;
                    // A host cluster a snapshot shares (refcount above 1)
                    // still holds the snapshot's data: zeroes written
                    // there would change the snapshot (QEMU 10.0's
                    // downgrade does so, and sets COPIED on it besides).
                    // Such a cluster is converted as one without a host
                    // cluster, its reference dropped once that is durable.
                    let mapping = e.decode(self.geo.cluster_bits, 3);
                    let shared = match mapping {
                        L2Mapping::Zero {
                            preallocated: Some(host),
                        } => self.refcount(&mg, host / cs).await? > 1,
                        _ => false,
                    };
                    match mapping {
                        L2Mapping::Zero {
                            preallocated: Some(host),
                        } if !shared => zeroed.push((guest, host)),
                        L2Mapping::Zero { .. } if backing => to_write.push(guest),
                        L2Mapping::Zero { .. } => {
                            let l2 = self.l2_table_of(&mg, guest);
                            let old = self.set_l2_entry(&mg, l2, guest, L2Entry::UNALLOCATED);
                            self.release_entry(old);
                        }
                        _ => {}
                    }
                    guest += cs;
                }
                // The zeroes durable before any entry stops saying "zero".
                for &(_, host) in &zeroed {
                    self.data_write(host, &zeroes, WriteFlags::default())
                        .await?;
                }
                if !zeroed.is_empty() {
                    self.device_flush(&mg).await?;
                }
                for (guest, host) in zeroed {
                    let copied = self.refcount(&mg, host / cs).await? == 1;
                    self.load_l2(&mg, self.l2_table_of(&mg, guest)).await?;
                    let l2 = self.l2_table_of(&mg, guest);
                    self.set_l2_entry(&mg, l2, guest, L2Entry::normal(host, copied));
                }
            }
            drop(mg);
            for guest in to_write {
                let len = cs.min(size - guest) as usize;
                self.write(guest, &zeroes[..len]).await?;
            }
            done(l1i + 1);
        }
        Ok(())
    }

    /// Whether the active layer has a compressed cluster.
    async fn has_compressed_clusters(&self) -> Result<bool> {
        let cs = self.geo.cluster_size;
        let span = self.geo.l2_span();
        let mg = self.meta.lock().await;
        let mut guest = 0;
        while guest < self.geo.virtual_size {
            if self.l2_table_of(&mg, guest) == 0 {
                guest = (guest / span + 1) * span;
                continue;
            }
            let e = self.l2_entry(&mg, guest).await?;
            if matches!(
                e.decode(self.geo.cluster_bits, 3),
                L2Mapping::Compressed { .. }
            ) {
                return Ok(true);
            }
            guest += cs;
        }
        Ok(false)
    }
}
