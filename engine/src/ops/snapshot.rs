//! Internal snapshots: listing, creating, applying (reverting the guest
//! disk to a snapshot) and deleting them, as QEMU's qcow2 driver keeps
//! them (docs/interop/qcow2.txt, "Snapshots"). The table's encoding is
//! `format::snapshot`'s; the reference counting `snapshot_refs`'.
//!
//! Each operation takes `&mut self`, so no guest request is in flight; it
//! first commits and writes back everything pending (`flush_internal`),
//! then runs under the metadata lock with refcounts written eagerly even on a
//! lazy-refcounts image, so that the ordering below is on disk and the
//! operation leaves no refcount work to a dirty bit.
//!
//! Crash order, QEMU's: whatever a new table references is counted and
//! durable before the table; a new snapshot table is written to fresh
//! clusters and flushed before one header write switches `nb_snapshots`
//! and `snapshots_offset` to it; references a change drops are released
//! only once the change is durable. A crash anywhere leaks clusters at
//! worst, and never leaves a cluster referenced more often than counted.
//! COPIED flags are cleared durably before a snapshot that shares their
//! clusters exists, and set again only once the refcount of 1 that
//! allows it is durable.

use crate::broken::{self, Broken};
use crate::dev::BlockDev;
use crate::error::{Error, Result, SnapshotError};
use crate::format::entry::COPIED;
use crate::format::header::incompat;
use crate::format::snapshot::{
    decode_entry, encode_table, encode_table_without_extra, Decoded, Snapshot, MAX_SNAPSHOTS,
    MAX_TABLE_BYTES,
};
use crate::format::{be64_bytes, L1Entry};
use crate::guards::Guard;
use crate::image::{Image, Meta, MetaGuard, MAX_L1_BYTES};
use crate::refcount::snapshot_refs::References;
use crate::steps::{MetaOp, Step};

/// How much of the snapshot table one read asks for beyond what the
/// entry being decoded needs.
const READ_AHEAD: usize = 64 << 10;

impl<D: BlockDev> Image<D> {
    /// [`Image::snapshots`]: the implementation.
    pub(crate) async fn snapshots_impl(&self) -> Result<Vec<Snapshot>> {
        // Read without the lock: the table changes only under `&mut self`
        // (the snapshot operations), so no lock holder can be changing it.
        let (count, start) = {
            let m = self.meta.read_unlocked();
            (m.header.nb_snapshots, m.header.snapshots_offset)
        };
        Ok(self.read_snapshot_table_at(count, start).await?.0)
    }

    /// [`Image::snapshot_create`]: the implementation.
    pub(crate) async fn snapshot_create_impl(
        &mut self,
        name: &str,
        date_sec: u32,
        date_nsec: u32,
    ) -> Result<Snapshot> {
        let _op = self.steps.enter(MetaOp::SnapshotCreate);
        self.begin_snapshot_op().await?;
        let mg = self.meta.lock().await;
        let _eager = self.eager_refcounts(&mg);
        let window = self.open_flag_window(&mg).await?;
        let r = self.create_locked(&mg, name, date_sec, date_nsec).await;
        self.close_flag_window(&mg, window, &r).await?;
        r
    }

    /// [`Image::snapshot_apply`]: the implementation.
    pub(crate) async fn snapshot_apply_impl(&mut self, id_or_name: &str) -> Result<()> {
        let _op = self.steps.enter(MetaOp::SnapshotApply);
        self.begin_snapshot_op().await?;
        let new_size = {
            let mg = self.meta.lock().await;
            let _eager = self.eager_refcounts(&mg);
            let window = self.open_flag_window(&mg).await?;
            let r = self.apply_locked(&mg, id_or_name).await;
            self.close_flag_window(&mg, window, &r).await?;
            r
        };
        self.geo.virtual_size = new_size?;
        Ok(())
    }

    /// [`Image::snapshot_delete`]: the implementation.
    pub(crate) async fn snapshot_delete_impl(&mut self, id_or_name: &str) -> Result<()> {
        let _op = self.steps.enter(MetaOp::SnapshotDelete);
        self.begin_snapshot_op().await?;
        let mg = self.meta.lock().await;
        let _eager = self.eager_refcounts(&mg);
        let window = self.open_flag_window(&mg).await?;
        let r = self.delete_locked(&mg, id_or_name).await;
        self.close_flag_window(&mg, window, &r).await?;
        r
    }

    /// A snapshot operation changes refcounts between 1 and more, and a
    /// COPIED flag may only be set once the refcount of 1 that allows it
    /// is durable (and cleared before a second reference is): whatever
    /// the order, a crash between the two leaves a cluster whose flag
    /// disagrees with its refcount, which `qemu-img check` reports as an
    /// error (harmless: a missing flag costs a needless COW). On a
    /// version 3 image the dirty bit, durable before the operation
    /// changes anything and cleared once all it did is durable, has the
    /// next open rebuild refcounts and flags (`rebuild_refcounts`), as
    /// lazy refcounts do. A version 2 image has no dirty bit: there, as
    /// with QEMU's driver, a crash inside the operation may leave such
    /// flags for `qemu-img check -r` to mend. Returns whether it set the
    /// bit (it was clear). Under the metadata lock.
    async fn open_flag_window(&self, mg: &MetaGuard<'_>) -> Result<bool> {
        if self.geo.version < 3 || mg.borrow().dirty_on_disk {
            return Ok(false);
        }
        mg.borrow_mut().header.incompatible_features |= incompat::DIRTY;
        self.steps.step(Step::DirtyBit);
        self.write_header(mg).await?;
        self.device_flush(mg).await?;
        mg.borrow_mut().dirty_on_disk = true;
        Ok(true)
    }

    /// Clear the dirty bit [`Image::open_flag_window`] set, once the
    /// operation's result `r` is durable: after success, or a refusal
    /// that changed nothing. After an I/O error the image is poisoned
    /// whatever the bit: the error may have stopped the operation between
    /// a flag and its refcount (a read error too, which poisons nothing
    /// else), and a clean close would then write that state back as
    /// clean. Poisoned, the image refuses everything and its close fails,
    /// so the bit stays for the next open's repair (on a version 2 image,
    /// what is on disk stays for `qemu-img check -r`).
    async fn close_flag_window<T>(
        &self,
        mg: &MetaGuard<'_>,
        set: bool,
        r: &Result<T>,
    ) -> Result<()> {
        let done = match r {
            Ok(_) => true,
            Err(e) => matches!(e, Error::Snapshot(_)),
        };
        if !done {
            self.poison();
            return Ok(());
        }
        if !set {
            return Ok(());
        }
        mg.borrow_mut().header.incompatible_features &= !incompat::DIRTY;
        self.steps.step(Step::DirtyCleared);
        self.write_header(mg).await?;
        self.device_flush(mg).await?;
        mg.borrow_mut().dirty_on_disk = false;
        Ok(())
    }

    /// Refcounts written eagerly until the guard drops, on a lazy-refcounts
    /// image too: a snapshot operation's crash order relies on them (see
    /// the module comment). Taken under the metadata lock, dropped before it.
    pub(crate) fn eager_refcounts<'a>(&self, mg: &'a MetaGuard<'_>) -> EagerRefcounts<'a> {
        let lazy = mg.borrow().refs.lazy();
        mg.borrow_mut().refs.set_lazy(false);
        EagerRefcounts { state: mg, lazy }
    }

    /// Refuse what cannot hold snapshots, then quiesce: every pending
    /// allocation committed and all metadata written back and flushed.
    async fn begin_snapshot_op(&self) -> Result<()> {
        self.check_writable()?;
        if self.has_data_file() {
            return Err(SnapshotError::DataFile.into());
        }
        self.flush_internal(false).await
    }

    async fn create_locked(
        &self,
        mg: &MetaGuard<'_>,
        name: &str,
        date_sec: u32,
        date_nsec: u32,
    ) -> Result<Snapshot> {
        let (mut table, old_len) = self.read_snapshot_table(mg).await?;
        if table.len() >= MAX_SNAPSHOTS as usize {
            return Err(SnapshotError::TooMany { max: MAX_SNAPSHOTS }.into());
        }
        let cs = self.geo.cluster_size;
        let l1 = mg.borrow().tables.l1().to_vec();
        let refs = self.l1_references(mg, &l1).await?;
        // Checked before anything is allocated: a refusal leaks nothing.
        self.check_references(mg, &refs).await?;
        // The snapshot's L1 table: the active one, with COPIED cleared
        // (the flag means nothing outside the active table).
        let l1_off = if l1.is_empty() {
            0
        } else {
            let off = self
                .alloc_clusters(mg, (l1.len() as u64 * 8).div_ceil(cs))
                .await?;
            let copy: Vec<u64> = l1.iter().map(|e| e & !COPIED).collect();
            self.write_meta(off, &be64_bytes(&copy)).await?;
            off
        };
        let table_first = broken::is(&self.opts, Broken::SnapshotTableBeforeRefcounts);
        let copied_last = broken::is(&self.opts, Broken::CopiedAfterRefcounts);
        if !refs.is_empty() {
            self.guard_arose(Guard::SnapshotRefcountsBeforeTable);
            self.guard_arose(Guard::CopiedClearedBeforeShared);
        }
        if copied_last {
            // Deliberately wrong: the clusters are counted twice while
            // their flags still say "refcount 1, write in place".
            self.share_durably(mg, &refs).await?;
        }
        // Every active cluster is about to be shared: COPIED goes, on disk
        // before the refcounts say they are shared, so that no crash
        // leaves a flag on a cluster counted twice.
        self.clear_copied(mg, &l1, true).await?;
        self.steps.step(Step::CopiedCleared);
        self.writeback_all(mg).await?;
        if !table_first && !copied_last {
            self.share_durably(mg, &refs).await?;
        }
        let sn = Snapshot {
            id: next_id(&table),
            name: name.to_owned(),
            l1_table_offset: l1_off,
            l1_size: l1.len() as u32,
            date_sec,
            date_nsec,
            vm_clock_nsec: 0,
            vm_state_size: 0,
            disk_size: Some(self.geo.virtual_size),
            icount: Some(0),
            unknown_extra: Vec::new(),
        };
        table.push(sn.clone());
        self.switch_snapshot_table(mg, &table, old_len, self.entry_form(mg))
            .await?;
        if table_first {
            // Deliberately wrong: the table names the snapshot before the
            // clusters it shares are counted twice.
            self.share_durably(mg, &refs).await?;
        }
        Ok(sn)
    }

    /// A create's increments of what the new snapshot shares, written
    /// back (the `Refcounts` step).
    async fn share_durably(&self, mg: &MetaGuard<'_>, refs: &References) -> Result<()> {
        self.add_references(mg, refs).await?;
        self.steps.step(Step::Refcounts);
        self.writeback_all(mg).await
    }

    async fn delete_locked(&self, mg: &MetaGuard<'_>, id_or_name: &str) -> Result<()> {
        let (mut table, old_len) = self.read_snapshot_table(mg).await?;
        let i = find_snapshot(&table, id_or_name)?;
        let sn = table.remove(i);
        let l1 = self
            .read_inactive_l1(sn.l1_table_offset, sn.l1_size)
            .await?;
        let refs = self.l1_references(mg, &l1).await?;
        self.guard_arose(Guard::DeleteTableBeforeDecrements);
        let drops_first = broken::is(&self.opts, Broken::DeleteDropsBeforeTable);
        if !drops_first {
            self.switch_snapshot_table(mg, &table, old_len, self.entry_form(mg))
                .await?;
        }
        // Nothing on disk names the snapshot any more (unless deliberately
        // broken: the table still names it until the switch below).
        self.drop_references(&refs);
        self.free_table_clusters(sn.l1_table_offset, u64::from(sn.l1_size) * 8);
        if drops_first {
            // Deliberately wrong: this writeback applies the frees, the
            // next writes the decrements while the table still names the
            // snapshot.
            self.writeback_all(mg).await?;
        }
        self.steps.step(Step::OldFreed);
        self.writeback_all(mg).await?;
        if drops_first {
            self.switch_snapshot_table(mg, &table, old_len, self.entry_form(mg))
                .await?;
        }
        self.recompute_copied(mg).await?;
        self.steps.step(Step::Flags);
        self.writeback_all(mg).await
    }

    /// Apply under the lock; returns the new virtual size, for the caller
    /// to set once the lock is released.
    async fn apply_locked(&self, mg: &MetaGuard<'_>, id_or_name: &str) -> Result<u64> {
        let (table, _) = self.read_snapshot_table(mg).await?;
        let sn = table[find_snapshot(&table, id_or_name)?].clone();
        let new_size = sn.disk_size.unwrap_or(self.geo.virtual_size);
        let sn_l1 = self
            .read_inactive_l1(sn.l1_table_offset, sn.l1_size)
            .await?;
        let (old_off, old_l1) = {
            let m = mg.borrow();
            (m.header.l1_table_offset, m.tables.l1().to_vec())
        };
        let new_len = (old_l1.len() as u64)
            .max(sn_l1.len() as u64)
            .max(self.geo.l1_entries_for(new_size));
        if new_len * 8 > MAX_L1_BYTES {
            return Err(Error::MetadataLimit {
                what: format!("an L1 table for {new_size} bytes"),
                needed: new_len * 8,
                limit: MAX_L1_BYTES,
            });
        }
        let old_refs = self.l1_references(mg, &old_l1).await?;
        let new_refs = self.l1_references(mg, &sn_l1).await?;
        // What the new active table references is counted and durable
        // before any table names it, and no entry of its L2 tables (shared
        // with the snapshot) says COPIED: an image another tool wrote may
        // have the flag in a snapshot's tables.
        self.add_references(mg, &new_refs).await?;
        self.clear_copied(mg, &sn_l1, false).await?;
        self.steps.step(Step::Refcounts);
        self.writeback_all(mg).await?;
        let mut l1: Vec<u64> = sn_l1.iter().map(|e| e & !COPIED).collect();
        l1.resize(new_len as usize, 0);
        let in_place =
            new_len == old_l1.len() as u64 && new_size == self.geo.virtual_size && old_off != 0;
        if !old_refs.is_empty() {
            self.guard_arose(Guard::ApplyDropsOldAfterSwitch);
        }
        let drops_first = broken::is(&self.opts, Broken::ApplyDropsOldFirst);
        if drops_first {
            // Deliberately wrong: the old table is still the active one on
            // disk while what it names is counted down, even freed (a
            // writeback applies the frees, the next writes them).
            self.drop_references(&old_refs);
            self.writeback_all(mg).await?;
            self.steps.step(Step::OldFreed);
            self.writeback_all(mg).await?;
        }
        if in_place {
            // The active table overwritten where it is, as QEMU does: a
            // torn write mixing old and new entries is safe, both sets of
            // references being counted until the write is durable.
            self.write_meta(old_off, &be64_bytes(&l1)).await?;
            self.steps.step(Step::L1);
            self.device_flush(mg).await?;
        } else {
            self.switch_active_l1(mg, &l1, new_size).await?;
        }
        {
            let mut m = mg.borrow_mut();
            // Tables only the old L1 named may be freed and reused: their
            // cached copies (clean after the writeback) must go.
            for &e in &old_l1 {
                let off = L1Entry(e).l2_offset();
                if off != 0 && !l1.iter().any(|&n| L1Entry(n).l2_offset() == off) {
                    m.tables.remove_l2(off);
                }
            }
            m.tables.replace_l1(l1.clone());
            for &e in &l1 {
                let off = L1Entry(e).l2_offset();
                if off != 0 {
                    m.meta_clusters.insert(off);
                }
            }
        }
        if !drops_first {
            self.drop_references(&old_refs);
        }
        if !in_place {
            self.free_table_clusters(old_off, old_l1.len() as u64 * 8);
        }
        self.steps.step(Step::OldFreed);
        self.writeback_all(mg).await?;
        self.recompute_copied(mg).await?;
        self.steps.step(Step::Flags);
        self.writeback_all(mg).await?;
        Ok(new_size)
    }

    /// A new active L1 table `l1` in fresh clusters, durable with its
    /// refcounts before one header write switches the table and the
    /// virtual size (`new_size`) at once: a crash leaves the old table and
    /// size or the new ones.
    async fn switch_active_l1(&self, mg: &MetaGuard<'_>, l1: &[u64], new_size: u64) -> Result<()> {
        let cs = self.geo.cluster_size;
        let new_off = if l1.is_empty() {
            0
        } else {
            let clusters = (l1.len() as u64 * 8).div_ceil(cs);
            let off = self.alloc_clusters(mg, clusters).await?;
            let mut padded = l1.to_vec();
            padded.resize((clusters * cs / 8) as usize, 0);
            self.write_meta(off, &be64_bytes(&padded)).await?;
            off
        };
        self.writeback_refcount_phase(mg).await?;
        self.steps.step(Step::Table);
        self.device_flush(mg).await?;
        {
            let mut m = mg.borrow_mut();
            m.header.l1_table_offset = new_off;
            m.header.l1_size = l1.len() as u32;
            m.header.size = new_size;
        }
        self.steps.step(Step::Header);
        self.write_header(mg).await?;
        self.device_flush(mg).await
    }

    /// The form of the snapshot entries this image is written with:
    /// without extra data on a version 2 image whose options ask for it
    /// (`EngineOptions::legacy_snapshot_entries`).
    pub(crate) fn entry_form(&self, mg: &MetaGuard<'_>) -> ExtraData {
        if self.opts.legacy_snapshot_entries && mg.borrow().header.version == 2 {
            ExtraData::Omitted
        } else {
            ExtraData::Written
        }
    }

    /// Write `table` to fresh clusters, make it and its refcounts durable,
    /// point the header at it in one write, make that durable, and free
    /// the old table (`old_len` bytes at the header's old offset).
    pub(crate) async fn switch_snapshot_table(
        &self,
        mg: &MetaGuard<'_>,
        table: &[Snapshot],
        old_len: u64,
        extra: ExtraData,
    ) -> Result<()> {
        let cs = self.geo.cluster_size;
        // An upgrade rewrites the table with the extra data version 3
        // requires; an image that stays version 2 keeps the form the
        // options ask for.
        let bytes = if extra == ExtraData::Omitted {
            encode_table_without_extra(table)?
        } else {
            encode_table(table, self.geo.virtual_size)?
        };
        let new_off = if bytes.is_empty() {
            0
        } else {
            let off = self
                .alloc_clusters(mg, (bytes.len() as u64).div_ceil(cs))
                .await?;
            self.write_meta(off, &bytes).await?;
            off
        };
        self.writeback_refcount_phase(mg).await?;
        self.steps.step(Step::Table);
        self.device_flush(mg).await?;
        let old_off = {
            let mut m = mg.borrow_mut();
            let old = m.header.snapshots_offset;
            m.header.nb_snapshots = table.len() as u32;
            m.header.snapshots_offset = new_off;
            old
        };
        self.steps.step(Step::Header);
        self.write_header(mg).await?;
        self.device_flush(mg).await?;
        self.free_table_clusters(old_off, old_len);
        self.steps.step(Step::OldFreed);
        self.writeback_all(mg).await
    }

    /// The snapshot table the header names, and its length in bytes. Read
    /// an entry at a time, each bounded before it is read: no more than
    /// QEMU's table limit or the metadata memory limit, nothing past the
    /// end of the file.
    pub(crate) async fn read_snapshot_table(
        &self,
        mg: &MetaGuard<'_>,
    ) -> Result<(Vec<Snapshot>, u64)> {
        let (count, start) = {
            let h = &mg.borrow().header;
            (h.nb_snapshots, h.snapshots_offset)
        };
        self.read_snapshot_table_at(count, start).await
    }

    /// The `count` entries of the snapshot table at `start`, as
    /// [`Image::read_snapshot_table`] reads the one the header names.
    async fn read_snapshot_table_at(&self, count: u32, start: u64) -> Result<(Vec<Snapshot>, u64)> {
        if count == 0 {
            return Ok((Vec::new(), 0));
        }
        let limit = MAX_TABLE_BYTES.min(self.opts.metadata_memory_limit);
        let file_len = self.dev.len();
        let mut buf: Vec<u8> = Vec::new();
        let mut pos = 0usize;
        let mut out = Vec::new();
        for i in 0..count {
            pos = pos.next_multiple_of(8);
            loop {
                let have = buf.get(pos..).unwrap_or_default();
                let need = match decode_entry(have, i)? {
                    Decoded::Entry(sn, len) => {
                        out.push(sn);
                        pos += len;
                        break;
                    }
                    Decoded::NeedMore(n) => (pos + n) as u64,
                };
                if need > limit {
                    return Err(Error::format(
                        "snapshot table",
                        format!("longer than the {limit}-byte limit"),
                    ));
                }
                if start.saturating_add(need) > file_len {
                    return Err(Error::format(
                        "snapshot table",
                        format!("entry {i} extends beyond the end of the file"),
                    ));
                }
                let end = (need + READ_AHEAD as u64).min(limit).min(file_len - start) as usize;
                let from = buf.len();
                buf.resize(end, 0);
                self.dev.read(start + from as u64, &mut buf[from..]).await?;
            }
        }
        Ok((out, pos as u64))
    }
}

/// The id QEMU gives a new snapshot: one above the largest id read as a
/// number (an id that does not start with digits reads as 0).
fn next_id(table: &[Snapshot]) -> String {
    let max = table
        .iter()
        .map(|s| {
            let digits: String = s.id.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    (max + 1).to_string()
}

impl<D: BlockDev> Image<D> {
    /// [`Image::load_snapshot_tmp`]: the implementation.
    pub(crate) async fn load_snapshot_tmp_impl(
        &mut self,
        pick: impl Fn(&Snapshot) -> bool,
    ) -> Result<()> {
        if !self.opts.read_only {
            return Err(Error::Unsupported(
                "loading a snapshot into an image opened read-write".into(),
            ));
        }
        let (count, start) = {
            let m = self.meta.get_mut();
            (m.header.nb_snapshots, m.header.snapshots_offset)
        };
        let (table, _) = self.read_snapshot_table_at(count, start).await?;
        let Some(sn) = table.iter().find(|s| pick(s)) else {
            return Err(SnapshotError::NotFound(String::new()).into());
        };
        let l1 = self
            .read_inactive_l1(sn.l1_table_offset, sn.l1_size)
            .await?;
        let size = sn.disk_size.unwrap_or(self.geo.virtual_size);
        // Entries past a table shorter than the size needs read as
        // unallocated, as QEMU's driver reads them.
        let mut l1: Vec<u64> = l1.iter().map(|e| e & !COPIED).collect();
        let needed = self.geo.l1_entries_for(size) as usize;
        if l1.len() < needed {
            l1.resize(needed, 0);
        }
        let mg = self.meta.lock().await;
        mg.borrow_mut().tables.replace_l1(l1);
        drop(mg);
        self.geo.virtual_size = size;
        Ok(())
    }
}

/// The index in `table` of the snapshot with id `id_or_name`, or else of
/// the first named so: qemu-img's lookup, an id match winning over a name
/// match.
pub fn find_snapshot(table: &[Snapshot], id_or_name: &str) -> Result<usize> {
    table
        .iter()
        .position(|s| s.id == id_or_name)
        .or_else(|| table.iter().position(|s| s.name == id_or_name))
        .ok_or_else(|| SnapshotError::NotFound(id_or_name.to_owned()).into())
}

/// The image's lazy-refcounts setting, put back when a snapshot operation
/// ends however it ends ([`Image::eager_refcounts`]).
pub(crate) struct EagerRefcounts<'a> {
    state: &'a std::cell::RefCell<Meta>,
    lazy: bool,
}

impl Drop for EagerRefcounts<'_> {
    fn drop(&mut self) {
        self.state.borrow_mut().refs.set_lazy(self.lazy);
    }
}

impl<D: BlockDev> Image<D> {
    /// [`Image::snapshot_data_ranges`]: the implementation.
    pub(crate) async fn snapshot_data_ranges_impl(&self, sn: &Snapshot) -> Result<Vec<(u64, u64)>> {
        let cs = self.geo.cluster_size;
        let size = sn.disk_size.unwrap_or(self.geo.virtual_size);
        let mut l1_bytes = vec![0u8; sn.l1_size as usize * 8];
        self.dev.read(sn.l1_table_offset, &mut l1_bytes).await?;
        let entries = self.geo.l2_entries as usize;
        let esize = if self.geo.extended_l2 { 16 } else { 8 };
        let mut table = vec![0u8; cs as usize];
        let mut out = Vec::new();
        for (i, e) in l1_bytes.chunks_exact(8).enumerate() {
            let l2 = crate::format::L1Entry(u64::from_be_bytes(e.try_into().expect("8 bytes")))
                .l2_offset();
            if l2 == 0 {
                continue;
            }
            self.dev.read(l2, &mut table).await?;
            for idx in 0..entries {
                let guest = (i * entries + idx) as u64 * cs;
                if guest >= size {
                    break;
                }
                let e = crate::cluster::l1l2::decode_slot(
                    &table[..entries * esize],
                    idx,
                    self.geo.extended_l2,
                );
                let data = if self.geo.extended_l2 {
                    e.bitmap & 0xffff_ffff != 0
                        || matches!(
                            e.decode(self.geo.cluster_bits, self.geo.version),
                            crate::format::L2Mapping::Compressed { .. }
                        )
                } else {
                    matches!(
                        e.decode(self.geo.cluster_bits, self.geo.version),
                        crate::format::L2Mapping::Normal { .. }
                            | crate::format::L2Mapping::Compressed { .. }
                    )
                };
                if data {
                    out.push((guest, (guest + cs).min(size)));
                }
            }
        }
        Ok(out)
    }
}

/// Whether snapshot entries are written with their extra data
/// ([`Image::entry_form`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtraData {
    Written,
    Omitted,
}
