//! Guest discard and write_zeroes, and emptying the whole image. Discard and zeroing of whole
//! clusters change L2 entries (to zero clusters on version 3) and free the
//! old host clusters once that change is durable, except a write_zeroes
//! that may not unmap, which keeps them as preallocated zero clusters;
//! partial clusters are made zero clusters when the rest of the cluster
//! already reads as zeroes, else written with zeroes (write_zeroes), or
//! left alone (discard, a hint). This is what QEMU's driver does, so
//! `qemu-img map` and `check` see the same clusters after the same
//! requests.

use crate::alloc::allocs::CowFailure;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::format::entry::{ALL_ZERO, COMPRESSED, SUBCLUSTERS};
use crate::format::{L2Entry, L2Mapping};
use crate::image::{Backing, Image};

/// What whole clusters become when their data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unmap {
    /// Unallocated: they read from the backing file, or as zeroes.
    Unallocated,
    /// Discarded on a version 3 image: zero clusters where they would
    /// otherwise read anything but zeroes (a region without an L2 table
    /// and without a backing file is left as it is).
    Discard,
    /// Zeroed: zero clusters throughout, as QEMU's driver marks every
    /// cluster a write_zeroes covers (allocating L2 tables where there
    /// are none), with `keep` holding on to uncompressed host clusters
    /// (`Image::zeroed_entry`).
    Zeroes { keep: bool },
}

impl<D: BlockDev> Image<D> {
    /// [`Image::discard`]: the implementation.
    pub(crate) async fn discard_impl(&self, offset: u64, len: u64) -> Result<()> {
        self.check_writable()?;
        self.check_request(offset, len)?;
        self.count(|c| c.guest_discards += 1);
        let cs = self.geo.cluster_size;
        let start = offset.next_multiple_of(cs);
        let end = self.geo.cluster_start(offset + len).max(start);
        // The disk's last cluster may be partial: it counts as whole.
        let end = if offset + len == self.geo.virtual_size {
            (offset + len).next_multiple_of(cs)
        } else {
            end
        };
        if start >= end {
            return Ok(());
        }
        let to = if self.geo.version >= 3 {
            Unmap::Discard
        } else {
            Unmap::Unallocated
        };
        self.unmap_clusters(start, end, to).await
    }

    /// [`Image::make_empty`]: the implementation.
    pub(crate) async fn make_empty_impl(&self) -> Result<()> {
        self.check_writable()?;
        let end = self
            .geo
            .virtual_size
            .next_multiple_of(self.geo.cluster_size);
        if end > 0 {
            self.unmap_clusters(0, end, Unmap::Unallocated).await?;
        }
        self.flush_internal(false).await
    }

    /// [`Image::write_zeroes`]: the implementation.
    pub(crate) async fn write_zeroes_impl(&self, offset: u64, len: u64, unmap: bool) -> Result<()> {
        self.check_writable()?;
        self.check_request(offset, len)?;
        self.count(|c| c.guest_zero_writes += 1);
        if len == 0 {
            return Ok(());
        }
        let cs = self.geo.cluster_size;
        let end = offset + len;
        let vend = self.geo.virtual_size;
        let wstart = offset.next_multiple_of(cs);
        let mut wend = self.geo.cluster_start(end);
        if end == vend {
            wend = end.next_multiple_of(cs);
        }
        if self.geo.version < 3 || wstart >= wend {
            return self.zero_partial_pieces(offset, end).await;
        }
        if offset < wstart {
            self.zero_partial_pieces(offset, wstart.min(end)).await?;
        }
        // A data file's clusters are not refcounted: nothing to keep.
        let keep = !unmap && !self.has_data_file();
        self.unmap_clusters(wstart, wend, Unmap::Zeroes { keep })
            .await?;
        if wend < end {
            self.zero_partial_pieces(wend, end).await?;
        }
        Ok(())
    }

    /// Zero [start, end), which holds no whole cluster, cluster by
    /// cluster: each piece by widening it to a zero cluster where that
    /// changes nothing else the guest reads, else as
    /// [`Image::zero_partial_clusters`] does.
    async fn zero_partial_pieces(&self, start: u64, end: u64) -> Result<()> {
        let mut p = start;
        while p < end {
            let q = end.min(self.geo.cluster_start(p) + self.geo.cluster_size);
            if !self.zero_widened(p, q).await? {
                self.zero_partial_clusters(p, q).await?;
            }
            p = q;
        }
        Ok(())
    }

    /// Zero the part [p, q) of one cluster by making the whole cluster a
    /// zero cluster, if it holds no host cluster and the rest of it reads
    /// as zeroes: a guest's unaligned write_zeroes then allocates nothing,
    /// as with QEMU's driver. Only version 3 images with standard L2
    /// entries and no data file (extended entries zero subclusters
    /// instead). Returns whether it did.
    async fn zero_widened(&self, p: u64, q: u64) -> Result<bool> {
        if self.geo.version < 3 || self.geo.extended_l2 || self.has_data_file() {
            return Ok(false);
        }
        let c = self.geo.cluster_start(p);
        let ce = (c + self.geo.cluster_size).min(self.geo.virtual_size);
        // The whole cluster, so that no other write of it runs while the
        // rest is judged and the entry changes.
        let id = self.begin_write(c, ce).await;
        let r = self.zero_widened_locked(c, ce, p, q).await;
        self.end_write(id);
        r
    }

    async fn zero_widened_locked(&self, c: u64, ce: u64, p: u64, q: u64) -> Result<bool> {
        let mg = self.lock_with_allocs_settled(c, ce).await?;
        let cur = self.l2_entry(&mg, c).await?;
        match cur.decode(self.geo.cluster_bits, self.geo.version) {
            L2Mapping::Zero { .. } => return Ok(true),
            L2Mapping::Unallocated => {}
            L2Mapping::Normal { .. } | L2Mapping::Compressed { .. } => return Ok(false),
        }
        if !(self.backing_reads_zero(c, p - c).await? && self.backing_reads_zero(q, ce - q).await?)
        {
            return Ok(false);
        }
        let l2 = self.l2_table_for_write(&mg, c).await?;
        self.set_l2_entry(&mg, l2, c, self.geo.zero_entry());
        if !self.opts.switches.delayed_metadata {
            self.writeback_all(&mg).await?;
        }
        Ok(true)
    }

    /// Whether the unallocated guest range [off, off + len) reads as
    /// zeroes: no backing file, or one whose whole chain holds nothing
    /// there but zeroes. A raw backing file counts as data (its holes are
    /// not looked for).
    async fn backing_reads_zero(&self, off: u64, len: u64) -> Result<bool> {
        let img = match &self.backing {
            None => return Ok(true),
            Some(Backing::Raw(_)) => return Ok(false),
            Some(Backing::Qcow2(img)) => img,
        };
        // Past the backing image's end the cluster reads as zeroes.
        let end = (off + len).min(img.virtual_size());
        let mut pos = off;
        while pos < end {
            let (status, n) = img.block_status_deep(pos, end - pos).await?;
            if !status.reads_as_zero() {
                return Ok(false);
            }
            pos += n;
        }
        Ok(true)
    }

    /// Zero [start, end), which holds no whole cluster: with extended L2
    /// entries the whole subclusters in it become zero subclusters, cluster
    /// by cluster; the rest is written with zeroes.
    async fn zero_partial_clusters(&self, start: u64, end: u64) -> Result<()> {
        if !self.geo.extended_l2 {
            return self.write_zero_buffer(start, end).await;
        }
        let sc = self.geo.subcluster_size;
        let mut p = start;
        while p < end {
            let q = end.min(self.geo.cluster_start(p) + self.geo.cluster_size);
            let (s, e) = (p.next_multiple_of(sc), q / sc * sc);
            let whole = s < e && self.zero_subclusters(s, e).await?;
            if whole {
                self.write_zero_buffer(p, s).await?;
                self.write_zero_buffer(e, q).await?;
            } else {
                self.write_zero_buffer(p, q).await?;
            }
            p = q;
        }
        Ok(())
    }

    /// Mark the whole subclusters [start, end) of one cluster as reading
    /// zeroes. The cluster keeps its host cluster, if any. Returns false
    /// (nothing done) for a compressed cluster, whose bitmap must stay 0.
    async fn zero_subclusters(&self, start: u64, end: u64) -> Result<bool> {
        let id = self.begin_write(start, end).await;
        let r = self.zero_subclusters_locked(start, end).await;
        self.end_write(id);
        r
    }

    async fn zero_subclusters_locked(&self, start: u64, end: u64) -> Result<bool> {
        // An allocation of the cluster may copy these subclusters' old
        // content and link over them: none may be in flight while the entry
        // changes. None can begin while the lock is held.
        let cstart = self.geo.cluster_start(start);
        let cend = cstart + self.geo.cluster_size;
        let mg = self.lock_with_allocs_settled(cstart, cend).await?;
        let cur = self.l2_entry(&mg, start).await?;
        if cur.word & COMPRESSED != 0 {
            return Ok(false);
        }
        let sc = self.geo.subcluster_size;
        let first = self.geo.offset_into_cluster(start) / sc;
        let last = first + (end - start) / sc;
        let mask = ((1u64 << last) - 1) & !((1u64 << first) - 1);
        // Raw external data: the data file reads as zeroes there before the
        // bitmap says so (under the lock: no allocation may copy these
        // subclusters meanwhile).
        self.zero_raw_data(start, end).await?;
        let new = cur.with_bitmap((cur.bitmap & !mask) | mask << SUBCLUSTERS);
        if new != cur {
            let l2 = self.l2_table_for_write(&mg, start).await?;
            self.set_l2_entry(&mg, l2, start, new);
        }
        if !self.opts.switches.delayed_metadata {
            self.writeback_all(&mg).await?;
        }
        Ok(true)
    }

    async fn write_zero_buffer(&self, start: u64, end: u64) -> Result<()> {
        const CHUNK: u64 = 1 << 20;
        let mut p = start;
        while p < end {
            let n = (end - p).min(CHUNK);
            let zeroes = vec![0u8; n as usize];
            let id = self.begin_write(p, p + n).await;
            let r = self.write_locked_range(p, &zeroes).await;
            self.end_write(id);
            r?;
            p += n;
        }
        Ok(())
    }

    /// Set the L2 entries of whole clusters [start, end) as `to` says,
    /// freeing what they pointed at unless `to` keeps it.
    pub(crate) async fn unmap_clusters(&self, start: u64, end: u64, to: Unmap) -> Result<()> {
        let end_guest = end.min(
            self.geo
                .virtual_size
                .next_multiple_of(self.geo.cluster_size),
        );
        let id = self.begin_write(start, end_guest).await;
        let r = self.unmap_locked(start, end_guest, to).await;
        self.end_write(id);
        r
    }

    async fn unmap_locked(&self, start: u64, end: u64, to: Unmap) -> Result<()> {
        // Allocations in flight here finish first, so the entries below
        // are final.
        let keys = self.inflight.borrow().allocs.starts_overlapping(start, end);
        for k in keys {
            self.settle_alloc(k, CowFailure::Keep).await?;
        }
        self.zero_raw_data(start, end).await?;
        let cs = self.geo.cluster_size;
        let mg = self.meta.lock().await;
        let mut p = start;
        while p < end {
            let l1i = self.geo.offset_to_l1_index(p);
            let has_table = mg.borrow().tables.l1_entry(l1i).l2_offset() != 0;
            let skip = match to {
                Unmap::Unallocated => true,
                Unmap::Discard => self.backing.is_none(),
                Unmap::Zeroes { .. } => false,
            };
            if !has_table && skip {
                // Already reads as zero (or as backing data for discard).
                p = ((l1i as u64) + 1) * self.geo.l2_span();
                continue;
            }
            let cur = self.l2_entry(&mg, p).await?;
            let (new, kept) = match to {
                Unmap::Unallocated => (L2Entry::UNALLOCATED, false),
                Unmap::Discard | Unmap::Zeroes { keep: false } => (self.geo.zero_entry(), false),
                Unmap::Zeroes { keep: true } => self.zeroed_entry(cur),
            };
            if cur != new {
                let l2 = self.l2_table_for_write(&mg, p).await?;
                let old = self.set_l2_entry(&mg, l2, p, new);
                if !kept {
                    self.release_entry(old);
                }
            }
            p += cs;
        }
        if !self.opts.switches.delayed_metadata {
            self.writeback_all(&mg).await?;
        }
        Ok(())
    }

    /// A zeroed cluster that keeps its host cluster, as QEMU's driver
    /// zeroes without unmapping: the same offset and COPIED flag under the
    /// zero flag (standard entries) or an all-zero subcluster bitmap
    /// (extended ones), its refcount unchanged. A compressed cluster, or
    /// one with no host cluster, becomes a plain zero cluster. Returns the
    /// entry and whether the old host cluster stays referenced.
    fn zeroed_entry(&self, cur: L2Entry) -> (L2Entry, bool) {
        match cur.decode(self.geo.cluster_bits, self.geo.version) {
            L2Mapping::Normal { .. } if self.geo.extended_l2 => (cur.with_bitmap(ALL_ZERO), true),
            L2Mapping::Normal { host, copied } => (L2Entry::zero(Some(host), copied), true),
            L2Mapping::Zero {
                preallocated: Some(_),
            } => (cur, true),
            _ => (self.geo.zero_entry(), false),
        }
    }
}
