//! Growing the image file ahead of allocation: seed 001's second point,
//! part of `zero_cow`. When the allocator hands out clusters that lie past
//! the end of the file, one efficient (no-fallback) write_zeroes extends
//! the file to the next multiple of `EngineOptions::grow_ahead`, so the
//! data writes that follow land inside the file. Without it, every
//! sequential 4 KiB write into a fresh cluster extends the file, and a file
//! system serialises and journals each extension (measured on ext4 with
//! O_DIRECT at depth 64: 2.4 times slower; docs/measured.md).
//! Closing trims the file back to the clusters in use, as QEMU's preallocate
//! filter does.
//!
//! Why zeroing here can never destroy data: the range starts at or past
//! both the device's length (which counts every write issued) and the end of
//! every cluster handed out before, so no write has been issued there and
//! no one but the caller holds a cluster there. The caller is the
//! allocator, under the metadata lock, and waits for the zeroing before it
//! returns the run, so no write into the range can be issued until the
//! zeroing has completed. The range is referenced by nothing on disk: a
//! crash at any point leaves at most unreferenced zeroes past the image's
//! end, which `qemu-img check` accepts.

use crate::dev::{BlockDev, ZeroFlags};
use crate::image::{Image, MetaGuard};
use crate::rules::{Dev, Kind};

impl<D: BlockDev> Image<D> {
    /// The allocator has handed out host bytes `[run_start, run_end)`;
    /// every other cluster it has handed out, and all metadata, ends at or
    /// before `others_end`. Grow the file over the run and ahead of it if
    /// the run lies past the end. A failure only costs the optimisation:
    /// nothing references the range, and the run's own writes extend the
    /// file as they would have without growing.
    ///
    pub(crate) async fn grow_for_run(
        &self,
        mg: &MetaGuard<'_>,
        run_start: u64,
        run_end: u64,
        others_end: u64,
    ) {
        let step = self.opts.grow_ahead;
        if !self.opts.switches.zero_cow
            || step == 0
            || self.has_data_file()
            || mg.borrow().growth.disabled()
        {
            return;
        }
        let cs = self.geo.cluster_size;
        let len = self.dev.len();
        if run_end <= len {
            return;
        }
        // A partly written last cluster belongs to someone who may be
        // writing the rest of it right now: start at a cluster boundary.
        let from = len.next_multiple_of(cs).max(others_end);
        if run_end <= from {
            // Clusters handed out earlier lie past the end (an earlier
            // growth failed): zeroing over them could race their writes.
            return;
        }
        debug_assert!(run_start < run_end);
        let multi = self.opts.switches.multi_cluster;
        // Without multi_cluster no device request covers more than one
        // cluster, and space is taken a cluster at a time: only the run.
        let (to, chunk) = if multi {
            let to = run_end.next_multiple_of(step.next_multiple_of(cs));
            (to, to - from)
        } else {
            (run_end, cs)
        };
        mg.borrow_mut().growth.note_start(len);
        let flags = ZeroFlags {
            no_fallback: true,
            ..ZeroFlags::default()
        };
        let mut at = from;
        while at < to {
            let n = chunk.min(to - at);
            self.count(|c| c.grow_requests += 1);
            let r = self
                .zeroes_write(Dev::Image, Kind::Growth, at, n, flags)
                .await;
            if r.is_err() {
                // Not supported, out of space or an I/O error: the range
                // is unreferenced whatever it now holds. Stop trying, so a
                // device that refuses is not asked again for every run.
                mg.borrow_mut().growth.disable();
                self.count(|c| c.growth_disabled += 1);
                return;
            }
            self.count(|c| c.grow_bytes += n);
            mg.borrow_mut().growth.note_zeroed(at, n);
            at += n;
        }
    }

    /// Whether the run `[run_start, run_end)` just handed out reads as
    /// zeroes on the device: growing zeroed it in this session (and
    /// completed, before the allocator returned), and nothing has used it
    /// since, because it lies at or past `others_end`, the end of every
    /// cluster used before (data, tables, or freed since). A cluster
    /// freed and handed out again always lies below that mark, so it is
    /// never taken for fresh. The zeroing is durable by the time anything
    /// links the run: linking waits for a flush after the data writes,
    /// which follow the zeroing.
    pub(crate) fn is_fresh(
        &self,
        mg: &MetaGuard<'_>,
        run_start: u64,
        run_end: u64,
        others_end: u64,
    ) -> bool {
        let zeroed = mg.borrow().growth.zeroed_covers(run_start, run_end);
        if zeroed && run_start < others_end {
            // Zeroed by growing, but handed out (and freed) since.
            self.guard_arose(crate::guards::Guard::FreshOnlyUnused);
            return crate::broken::is(&self.opts, crate::broken::Broken::FreshIgnoresReuse);
        }
        zeroed
    }

    /// At close, after the last flush: give back what growing added past
    /// the clusters in use. A failure leaves unreferenced zeroes at the end
    /// of the file, which is harmless, so it is not reported.
    ///
    /// Called with the metadata lock held and no I/O in flight.
    pub(crate) async fn trim_growth(&self, mg: &MetaGuard<'_>) {
        let keep = {
            let m = mg.borrow();
            let Some(from) = m.growth.grown_from() else {
                return;
            };
            if self.is_poisoned() {
                return;
            }
            let end = m.alloc.end_cluster();
            // Compressed data packed into the last cluster in use ends
            // inside it: the file ends at the sector after it, where
            // QEMU's file ends, rather than at the cluster's end.
            let used = match m.alloc.compressed_tail() {
                Some(t) if t.cluster + 1 == end => t.offset.next_multiple_of(512),
                _ => end * self.geo.cluster_size,
            };
            from.max(used)
        };
        if self.dev.len() > keep {
            let _ = self.dev.truncate(keep).await;
        }
    }
}
