//! Guest discard and write_zeroes, and emptying the whole image. Discard and zeroing of whole
//! clusters change L2 entries (to zero clusters on version 3) and free the
//! old host clusters once that change is durable; partial clusters are
//! written with zeroes (write_zeroes) or left alone (discard, a hint).

use crate::allocs::CowFailure;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::format::entry::{COMPRESSED, SUBCLUSTERS};
use crate::format::L2Entry;
use crate::image::Image;

impl<D: BlockDev> Image<D> {
    /// Discard whole clusters in the range; they then read as zeroes
    /// (version 3) or from the backing file (version 2). Partial clusters
    /// at either end are left as they are.
    pub async fn discard(&self, offset: u64, len: u64) -> Result<()> {
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
        let zero = self.geo.version >= 3;
        self.unmap_clusters(start, end, zero).await
    }

    /// Drop every cluster of the image (`qemu-img commit` empties the
    /// image it committed): each L2 entry becomes unallocated, so the
    /// image reads as its backing file (or zeroes), and the clusters are
    /// freed once that is durable.
    pub async fn make_empty(&self) -> Result<()> {
        self.check_writable()?;
        let end = self
            .geo
            .virtual_size
            .next_multiple_of(self.geo.cluster_size);
        if end > 0 {
            self.unmap_clusters(0, end, false).await?;
        }
        self.flush_internal(false).await
    }

    /// Make the range read as zeroes. With `unmap` (and always, here) whole
    /// clusters become zero clusters on version 3 images and their host
    /// clusters are freed; partial clusters are written with zeroes.
    pub async fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> Result<()> {
        let _ = unmap;
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
            return self.zero_partial_clusters(offset, end).await;
        }
        if offset < wstart {
            self.zero_partial_clusters(offset, wstart.min(end)).await?;
        }
        self.unmap_clusters(wstart, wend, true).await?;
        if wend < end {
            self.zero_partial_clusters(wend, end).await?;
        }
        Ok(())
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
        let _g = self.lock_with_allocs_settled(cstart, cend).await?;
        let cur = self.l2_entry(start).await?;
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
            let l2 = self.l2_table_for_write(start).await?;
            self.set_l2_entry(l2, start, new);
        }
        if !self.opts.switches.delayed_metadata {
            self.writeback_all().await?;
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

    /// Set the L2 entries of whole clusters [start, end) to zero clusters
    /// (`zero`) or unallocated, freeing what they pointed at.
    pub(crate) async fn unmap_clusters(&self, start: u64, end: u64, zero: bool) -> Result<()> {
        let end_guest = end.min(
            self.geo
                .virtual_size
                .next_multiple_of(self.geo.cluster_size),
        );
        let id = self.begin_write(start, end_guest).await;
        let r = self.unmap_locked(start, end_guest, zero).await;
        self.end_write(id);
        r
    }

    async fn unmap_locked(&self, start: u64, end: u64, zero: bool) -> Result<()> {
        // Allocations in flight here finish first, so the entries below
        // are final.
        let keys = self.inflight.borrow().allocs.starts_overlapping(start, end);
        for k in keys {
            self.settle_alloc(k, CowFailure::Keep).await?;
        }
        self.zero_raw_data(start, end).await?;
        let cs = self.geo.cluster_size;
        let _g = self.meta_lock.lock().await;
        let mut p = start;
        while p < end {
            let l1i = self.geo.offset_to_l1_index(p);
            let has_table = self.meta.borrow().tables.l1_entry(l1i).l2_offset() != 0;
            if !has_table && (!zero || self.backing.is_none()) {
                // Already reads as zero (or as backing data for discard).
                p = ((l1i as u64) + 1) * self.geo.l2_span();
                continue;
            }
            let cur = self.l2_entry(p).await?;
            let new = if zero {
                self.geo.zero_entry()
            } else {
                L2Entry::UNALLOCATED
            };
            if cur != new {
                let l2 = self.l2_table_for_write(p).await?;
                let old = self.set_l2_entry(l2, p, new);
                self.release_entry(old);
            }
            p += cs;
        }
        if !self.opts.switches.delayed_metadata {
            self.writeback_all().await?;
        }
        Ok(())
    }
}
