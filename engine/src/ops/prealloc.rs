//! Preallocation at create (`preallocation=metadata|falloc|full`): every
//! guest cluster gets a host cluster and an L2 entry before the image is
//! first opened, placed where QEMU places them.
//!
//! QEMU creates a preallocated qcow2 image by formatting a minimal one
//! (header, refcount table, one refcount block), then growing it through
//! its own allocator: the L1 table, then for `metadata` each L2 table
//! followed by the data clusters it maps, and for `falloc`/`full` one new
//! refcount area sized for everything, the data clusters right after it,
//! and the L2 tables wherever the allocator finds room (QEMU's
//! `block/qcow2.c`, `qcow2_co_truncate`, and `block/qcow2-refcount.c`).
//! Where each structure lands therefore depends on that allocator's
//! search order, its refcount block placement and its refcount table
//! growth. [`Plan`] replays them on a model of the refcounts (which
//! clusters are in use, which refcount blocks exist) without any I/O, so
//! that `qemu-img map` and `qemu-img check` see the image QEMU would have
//! made; [`Plan::write`] then writes it.
//!
//! The L2 entries are normal clusters with COPIED, in v2 and v3 alike;
//! with extended L2 entries the bitmap stays 0 (every subcluster
//! unallocated, reading from the backing file or as zeroes), as QEMU
//! leaves it. The data clusters are never written by `metadata` (the file
//! is only extended, sparse, so they read as zeroes), fallocated by
//! `falloc` and written with zeroes by `full`.

use std::collections::BTreeMap;

use crate::dev::{BlockDev, DevError, WriteFlags, ZeroFlags};
use crate::error::{Error, Result};
use crate::format::entry::OFFSET_MASK;
use crate::format::{be64_bytes, refcount, L1Entry, L2Entry};
use crate::ops::create_options::{CreateOptions, MAX_REFTABLE_BYTES};

pub use crate::ops::create_options::Preallocation;

/// Clusters in use (refcount 1), as disjoint runs `start -> end`.
#[derive(Default)]
pub struct Used(BTreeMap<u64, u64>);

impl Used {
    /// The first cluster in use in `[s, e)`.
    pub fn first_in(&self, s: u64, e: u64) -> Option<u64> {
        if let Some((_, &end)) = self.0.range(..=s).next_back() {
            if end > s {
                return Some(s);
            }
        }
        self.0.range(s..e).next().map(|(&a, _)| a)
    }

    /// Count clusters `[s, e)` in use.
    pub fn insert(&mut self, s: u64, e: u64) {
        if s >= e {
            return;
        }
        let (mut s, mut e) = (s, e);
        if let Some((&a, &b)) = self.0.range(..=s).next_back() {
            if b >= s {
                s = a;
                e = e.max(b);
            }
        }
        let inside: Vec<(u64, u64)> = self.0.range(s..=e).map(|(&a, &b)| (a, b)).collect();
        for (a, b) in inside {
            e = e.max(b);
            self.0.remove(&a);
        }
        self.0.insert(s, e);
    }

    /// Count clusters `[s, e)` free.
    pub fn remove(&mut self, s: u64, e: u64) {
        if s >= e {
            return;
        }
        let mut touched: Vec<(u64, u64)> = self.0.range(s..e).map(|(&a, &b)| (a, b)).collect();
        if let Some((&a, &b)) = self.0.range(..s).next_back() {
            if b > s {
                touched.push((a, b));
            }
        }
        for (a, b) in touched {
            self.0.remove(&a);
            if a < s {
                self.0.insert(a, s);
            }
            if b > e {
                self.0.insert(e, b);
            }
        }
    }

    /// The runs overlapping `[s, e)`, clipped to it.
    pub fn runs_in(&self, s: u64, e: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if let Some((_, &b)) = self.0.range(..s).next_back() {
            if b > s {
                out.push((s, b.min(e)));
            }
        }
        out.extend(self.0.range(s..e).map(|(&a, &b)| (a, b.min(e))));
        out
    }

    /// The last cluster in use.
    pub fn last(&self) -> Option<u64> {
        self.0.iter().next_back().map(|(_, &b)| b - 1)
    }
}

/// QEMU's allocator's answer that the refcount structures changed under
/// an allocation, which must search again (its `-EAGAIN`).
struct Again;

/// The refcount model QEMU's allocator runs on, in clusters.
pub struct Model {
    cs: u64,
    /// Refcount entries per refcount block.
    pub rce: u64,
    /// The clusters in use.
    pub used: Used,
    /// Host offsets of the refcount blocks (0: none), the table's length.
    pub reftable: Vec<u64>,
    /// The refcount table's first cluster.
    pub reftable_cluster: u64,
    /// The refcount table's length in clusters.
    pub reftable_clusters: u64,
    /// Where the next search for free clusters starts (QEMU's
    /// `free_cluster_index`: only a free moves it back).
    free_index: u64,
    /// Each refcount table replaced, where it was and what it held: QEMU
    /// wrote it there, freed it and may hand its clusters out again as
    /// data clusters, which then read what it left (never zeroed).
    replaced: Vec<(u64, Vec<u64>)>,
}

impl Model {
    /// The image QEMU formats before it sizes it: the header (cluster 0),
    /// a one-cluster refcount table (1) and its first block (2), counted.
    fn minimal(cs: u64, refcount_bits: u32) -> Model {
        let mut reftable = vec![0u64; (cs / 8) as usize];
        reftable[0] = 2 * cs;
        let mut used = Used::default();
        used.insert(0, 3);
        Model {
            cs,
            rce: cs * 8 / refcount_bits as u64,
            used,
            reftable,
            reftable_cluster: 1,
            reftable_clusters: 1,
            free_index: 3,
            replaced: Vec::new(),
        }
    }

    /// Whether refcount table entry `rti` names a block.
    pub fn has_block(&self, rti: u64) -> bool {
        self.reftable.get(rti as usize).is_some_and(|&b| b != 0)
    }

    /// The first cluster in `[s, e)` with a refcount (one without a block
    /// reads 0).
    fn first_counted(&self, s: u64, e: u64) -> Option<u64> {
        let mut from = s;
        while let Some(c) = self.used.first_in(from, e) {
            if self.has_block(c / self.rce) {
                return Some(c);
            }
            from = c + 1;
        }
        None
    }

    /// QEMU's `alloc_clusters_noref`: the first `n` free clusters in a row
    /// from the search start; the search start moves past them.
    fn alloc_noref(&mut self, n: u64) -> u64 {
        let mut start = self.free_index;
        while let Some(c) = self.first_counted(start, start + n) {
            start = c + 1;
        }
        self.free_index = start + n;
        start
    }

    /// QEMU's `update_refcount` adding 1 to `[off, off + n)`: when a
    /// cluster has no refcount block, one is made (`alloc_refcount_block`),
    /// the increments so far are undone and the caller searches again,
    /// from `off` first (the same clusters may still be free).
    fn count(&mut self, off: u64, n: u64) -> std::result::Result<(), Again> {
        let (first, last) = (off / self.rce, (off + n - 1) / self.rce);
        let Some(rti) = (first..=last).find(|&r| !self.has_block(r)) else {
            self.used.insert(off, off + n);
            return Ok(());
        };
        let missing = off.max(rti * self.rce);
        self.used.insert(off, missing);
        self.alloc_refblock(missing);
        self.used.remove(off, missing);
        self.free_index = self.free_index.min(off);
        Err(Again)
    }

    /// QEMU's `alloc_refcount_block` for `cluster`: the block goes to the
    /// first free cluster, counting itself if it lies in its own range;
    /// past the end of the refcount table, the table grows.
    fn alloc_refblock(&mut self, cluster: u64) {
        let rti = cluster / self.rce;
        let block = self.alloc_noref(1);
        if block / self.rce == rti {
            self.used.insert(block, block + 1);
        } else if self.count(block, 1).is_err() {
            return;
        }
        if (rti as usize) < self.reftable.len() {
            self.reftable[rti as usize] = block * self.cs;
            return;
        }
        let blocks_used = (cluster + 1).max(block + 1).div_ceil(self.rce);
        self.refcount_area(blocks_used * self.rce, 0, false, Some((rti, block)));
    }

    /// QEMU's `qcow2_refcount_metadata_size`: refcount blocks needed for
    /// `clusters` clusters and for the refcount structures themselves.
    fn refblocks_needed(&self, mut clusters: u64, mut generous: bool) -> u64 {
        let per_table_cluster = self.cs / 8;
        let (mut table, mut blocks, mut n) = (0u64, 0u64, 0u64);
        loop {
            let last = n;
            blocks = (clusters + table + blocks).div_ceil(self.rce);
            table = blocks.div_ceil(per_table_cluster);
            n = clusters + blocks + table;
            if n == last && generous {
                clusters += table.div_ceil(2);
                n = 0;
                generous = false;
            }
            if n == last {
                return blocks;
            }
        }
    }

    /// QEMU's `qcow2_refcount_area`: new refcount blocks from cluster
    /// `start` covering everything up to `start + additional` and
    /// themselves, then a new refcount table after them; the old table is
    /// freed. Returns the first cluster after the new structures.
    fn refcount_area(
        &mut self,
        start: u64,
        additional: u64,
        exact: bool,
        new_block: Option<(u64, u64)>,
    ) -> u64 {
        let total = self.refblocks_needed(start + additional, !exact);
        let area_index = start / self.rce;
        let per_cluster = self.cs / 8;
        let wanted = if exact {
            total
        } else {
            total + total.div_ceil(2)
        };
        let table_size = wanted.next_multiple_of(per_cluster);
        let table_clusters = table_size / per_cluster;
        let mut table = self.reftable.clone();
        table.resize(table_size as usize, 0);
        if let Some((rti, block)) = new_block {
            table[rti as usize] = block * self.cs;
        }
        let new_blocks = (area_index..total)
            .filter(|&i| table[i as usize] == 0)
            .count() as u64;
        let table_cluster = start + new_blocks;
        let end = table_cluster + table_clusters;
        let mut next = start;
        for i in area_index..total {
            if table[i as usize] == 0 {
                table[i as usize] = next * self.cs;
                next += 1;
            }
        }
        self.used.insert(start, end);
        let (old, old_clusters) = (self.reftable_cluster, self.reftable_clusters);
        let old_table = std::mem::replace(&mut self.reftable, table);
        self.replaced.push((old, old_table));
        self.reftable_cluster = table_cluster;
        self.reftable_clusters = table_clusters;
        self.used.remove(old, old + old_clusters);
        self.free_index = self.free_index.min(old);
        end
    }

    /// QEMU's `qcow2_alloc_clusters`: `n` clusters in a row, anywhere.
    fn alloc(&mut self, n: u64) -> u64 {
        loop {
            let off = self.alloc_noref(n);
            if self.count(off, n).is_ok() {
                return off;
            }
        }
    }

    /// QEMU's `qcow2_alloc_clusters_at`: as many of the `n` clusters from
    /// `off` as are free in a row (maybe none).
    fn alloc_at(&mut self, off: u64, n: u64) -> u64 {
        loop {
            let free = match self.first_counted(off, off + n) {
                Some(c) => c - off,
                None => n,
            };
            if free == 0 || self.count(off, free).is_ok() {
                return free;
            }
        }
    }
}

/// Guest clusters `[guest, guest + n)` mapped to host clusters from
/// `host`.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    guest: u64,
    /// The first host cluster.
    pub host: u64,
    /// How many clusters.
    pub n: u64,
}

/// A preallocated image's layout, found by replaying QEMU's allocator.
pub struct Plan {
    cs: u64,
    /// The refcounts as the replay left them.
    pub model: Model,
    /// The L1 table's first cluster.
    pub l1_cluster: u64,
    l1_entries: u64,
    /// The L2 table of each L1 entry (host cluster).
    pub l2: Vec<Option<u64>>,
    /// The guest clusters' host clusters, in runs.
    pub runs: Vec<Run>,
    /// The data clusters QEMU fallocates or zeroes (`falloc`, `full`).
    pub data_area: Option<(u64, u64)>,
    /// The length QEMU extends the file to for the data, in bytes.
    pub data_end: u64,
    /// The host bytes past the end of the disk in its last cluster, which
    /// `metadata` writes with zeroes (QEMU's copy-on-write of the part of
    /// the cluster its request did not cover).
    tail: Option<(u64, u64)>,
}

/// QEMU's largest request (`BDRV_REQUEST_MAX_BYTES`), which also bounds
/// one allocation.
const MAX_REQUEST: u64 = 0x7fff_fe00;

impl Plan {
    /// The layout QEMU gives an image created with `o` (its preallocation
    /// not `Off`, no data file) whose L1 table has `l1_entries` entries.
    pub fn new(o: &CreateOptions, l1_entries: u64) -> Result<Plan> {
        let cs = o.cluster_size;
        let mut model = Model::minimal(cs, o.refcount_bits);
        let l1_cluster = if l1_entries > 0 {
            model.alloc((l1_entries * 8).next_multiple_of(512).div_ceil(cs))
        } else {
            0
        };
        let mut plan = Plan {
            cs,
            model,
            l1_cluster,
            l1_entries,
            l2: vec![None; l1_entries as usize],
            runs: Vec::new(),
            data_area: None,
            data_end: 0,
            tail: None,
        };
        let l2_entries = o.l2_entries();
        match o.preallocation {
            crate::Preallocation::Off => {}
            crate::Preallocation::Metadata => {
                plan.metadata(o.size, l2_entries);
                // The copy-on-write reaches the end of the last subcluster
                // with extended L2 entries, of the last cluster otherwise.
                let unit = if o.extended_l2 { cs / 32 } else { cs };
                let last = plan.runs.last().map(|r| r.host + r.n - 1);
                if let (Some(host), true) = (last, !o.size.is_multiple_of(unit)) {
                    let from = o.size % cs;
                    let to = from.next_multiple_of(unit);
                    plan.tail = Some((host * cs + from, to - from));
                }
            }
            crate::Preallocation::Falloc | crate::Preallocation::Full => {
                plan.data_first(o.size, l2_entries)?
            }
        }
        if plan.model.reftable_clusters * cs > MAX_REFTABLE_BYTES {
            return Err(Error::InvalidOption {
                name: "size".into(),
                reason: "the refcount table of the preallocated image would exceed 8 MiB".into(),
            });
        }
        Ok(plan)
    }

    /// The L2 table for guest cluster `guest`, allocated if it has none.
    fn l2_for(&mut self, guest: u64, l2_entries: u64) {
        let slot = &mut self.l2[(guest / l2_entries) as usize];
        if slot.is_none() {
            *slot = Some(self.model.alloc(1));
        }
    }

    /// `metadata`: QEMU's `preallocate_co`, guest order, each request's
    /// L2 table allocated before its data clusters.
    fn metadata(&mut self, size: u64, l2_entries: u64) {
        let cs = self.cs;
        let max_clusters = MAX_REQUEST / cs;
        let chunk = (i32::MAX as u64) / cs * cs;
        let mut guest = 0u64;
        let mut left = size;
        while left > 0 {
            let want = left.min(chunk);
            // One `qcow2_alloc_host_offset`: contiguous host clusters for
            // as much of `want` as they reach.
            let (mut at, mut remaining) = (guest, want);
            let mut first_host = None;
            let mut next_host = 0;
            while remaining > 0 {
                let g = at / cs;
                let mut n = (at % cs + remaining)
                    .div_ceil(cs)
                    .min(l2_entries - g % l2_entries)
                    .min(max_clusters);
                self.l2_for(g, l2_entries);
                let host = match first_host {
                    None => {
                        let h = self.model.alloc(n);
                        first_host = Some(h);
                        h
                    }
                    Some(_) => {
                        n = self.model.alloc_at(next_host, n);
                        if n == 0 {
                            break;
                        }
                        next_host
                    }
                };
                self.runs.push(Run { guest: g, host, n });
                let covered = (n * cs - at % cs).min(remaining);
                at += covered;
                remaining -= covered;
                next_host = host + n;
            }
            let done = want - remaining;
            self.data_end = first_host.unwrap_or(0) * cs + done;
            guest += done;
            left -= done;
        }
    }

    /// `falloc` and `full`: QEMU's preallocating truncate. A refcount area
    /// for everything after the last cluster in use, the data clusters in
    /// one run after it, then each L2 table where the allocator finds room.
    fn data_first(&mut self, size: u64, l2_entries: u64) -> Result<()> {
        let cs = self.cs;
        let data = size.div_ceil(cs);
        if data == 0 {
            return Ok(());
        }
        let tables = data.div_ceil(l2_entries) + 1;
        let after_last = self.model.used.last().map_or(0, |c| c + 1);
        let start = self
            .model
            .refcount_area(after_last, data + tables, true, None);
        if self.model.alloc_at(start, data) != data {
            return Err(Error::Unsupported(
                "the preallocated data area is not free after its refcount area".into(),
            ));
        }
        self.data_area = Some((start, data));
        self.data_end = (start + data) * cs;
        let mut g = 0;
        while g < data {
            let n = (data - g).min(l2_entries - g % l2_entries);
            self.l2_for(g, l2_entries);
            self.runs.push(Run {
                guest: g,
                host: start + g,
                n,
            });
            g += n;
        }
        Ok(())
    }

    pub(crate) fn l1_offset(&self) -> u64 {
        self.l1_cluster * self.cs
    }

    /// The refcount table's host offset.
    pub fn reftable_offset(&self) -> u64 {
        self.model.reftable_cluster * self.cs
    }

    pub(crate) fn reftable_clusters(&self) -> u64 {
        self.model.reftable_clusters
    }

    /// Write every table of the plan and extend the file for the data as
    /// `mode` asks (the header is the caller's, last). `extended`: L2
    /// entries of 16 bytes.
    pub(crate) async fn write<D: BlockDev>(
        &self,
        dev: &D,
        o: &CreateOptions,
        extended: bool,
    ) -> Result<()> {
        let cs = self.cs;
        let csz = cs as usize;
        // The tables QEMU wrote and replaced first: whatever of them no
        // later structure overwrites stays, in free or data clusters.
        for (cluster, table) in &self.model.replaced {
            dev.write(cluster * cs, &be64_bytes(table), WriteFlags::default())
                .await?;
        }
        // Refcount blocks: every cluster in use counted once.
        for (rti, &block) in self.model.reftable.iter().enumerate() {
            if block == 0 {
                continue;
            }
            let first = rti as u64 * self.model.rce;
            let mut buf = vec![0u8; csz];
            for (a, b) in self.model.used.runs_in(first, first + self.model.rce) {
                for c in a..b {
                    refcount::set(&mut buf, o.refcount_bits, (c - first) as usize, 1);
                }
            }
            dev.write(block, &buf, WriteFlags::default()).await?;
        }
        let table = be64_bytes(&self.model.reftable);
        dev.write(self.reftable_offset(), &table, WriteFlags::default())
            .await?;
        // L2 tables, one at a time, in L1 order.
        let entry_size = if extended { 16 } else { 8 };
        let l2_entries = cs / entry_size;
        let mut runs = self.runs.iter().peekable();
        let mut l1 = vec![0u64; self.l1_entries as usize];
        for (i, slot) in self.l2.iter().enumerate() {
            let Some(l2) = slot else { continue };
            let first = i as u64 * l2_entries;
            let mut t = vec![0u8; csz];
            while let Some(r) = runs.next_if(|r| r.guest < first + l2_entries) {
                for k in 0..r.n {
                    let at = ((r.guest + k - first) * entry_size) as usize;
                    let e = L2Entry::normal(((r.host + k) * cs) & OFFSET_MASK, true);
                    // The bitmap of an extended entry stays 0.
                    t[at..at + 8].copy_from_slice(&e.word.to_be_bytes());
                }
            }
            dev.write(l2 * cs, &t, WriteFlags::default()).await?;
            l1[i] = L1Entry::new(l2 * cs, true).0;
        }
        if self.l1_entries > 0 {
            // As QEMU writes it: the entries, in whole 512-byte sectors.
            let mut bytes = be64_bytes(&l1);
            bytes.resize(bytes.len().next_multiple_of(512), 0);
            dev.write(self.l1_offset(), &bytes, WriteFlags::default())
                .await?;
        }
        self.extend(dev, o.preallocation).await
    }

    /// The data area as `mode` asks: the file only extended (`metadata`),
    /// its space reserved (`falloc`) or written with zeroes (`full`).
    async fn extend<D: BlockDev>(&self, dev: &D, mode: crate::Preallocation) -> Result<()> {
        let cs = self.cs;
        match (mode, self.data_area) {
            (crate::Preallocation::Falloc, Some((start, n))) => {
                fill_zeroes(dev, start * cs, n * cs, false).await?
            }
            (crate::Preallocation::Full, Some((start, n))) => {
                fill_zeroes(dev, start * cs, n * cs, true).await?
            }
            _ => {}
        }
        if let Some((off, len)) = self.tail {
            fill_zeroes(dev, off, len, true).await?;
        }
        if dev.len() < self.data_end {
            dev.truncate(self.data_end).await?;
        }
        Ok(())
    }
}

impl<D: BlockDev> crate::Image<D> {
    /// [`Image::looks_preallocated`]: the implementation.
    pub(crate) async fn looks_preallocated_impl(
        &self,
        clusters: u64,
        allocated: u64,
    ) -> Result<bool> {
        let threshold = (allocated * 10 / 9).max(allocated + 2);
        let mg = self.meta.lock().await;
        let mut counted = 0;
        for c in 0..clusters {
            if counted >= threshold {
                break;
            }
            counted += u64::from(self.refcount(&mg, c).await? != 0);
        }
        Ok(counted >= threshold)
    }
}

/// Give `[off, off + len)` of `dev` zeroes that take space: written as
/// zero buffers (`written`, preallocation=full), or reserved with an
/// efficient zeroing that does not unmap (fallocate, preallocation=falloc),
/// falling back to buffers where the device has none.
pub async fn fill_zeroes<D: BlockDev>(
    dev: &D,
    off: u64,
    len: u64,
    written: bool,
) -> std::result::Result<(), DevError> {
    if !written {
        let flags = ZeroFlags {
            no_fallback: true,
            ..ZeroFlags::default()
        };
        match dev.write_zeroes(off, len, flags).await {
            Err(DevError::NotSupported { .. }) => {}
            other => return other,
        }
    }
    const CHUNK: u64 = 1 << 20;
    let zeroes = vec![0u8; CHUNK.min(len) as usize];
    let mut at = off;
    while at < off + len {
        let n = CHUNK.min(off + len - at);
        dev.write(at, &zeroes[..n as usize], WriteFlags::default())
            .await?;
        at += n;
    }
    Ok(())
}
