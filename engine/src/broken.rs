//! The deliberately broken engine variants ([`Broken`]), gated in one
//! place.
//!
//! Each variant is a hook in the correct code that reads as ordinary code,
//! `if broken::is(&self.opts, Broken::X) { ... }`; `EngineOptions::broken`
//! picks the one variant that runs, and is `None` unless a simulated case
//! names one. What a variant does beyond a skipped step lives here, so the
//! correct paths carry no more than the hook.
//!
//! The variants are compiled into every build, not behind a cargo
//! feature: a feature made the README's "watch the harness catch a bug"
//! example a second full build (minutes, and it replaced the release
//! binary), and the test suite a second build configuration. A hook costs
//! one comparison of an option that is `None`. Only the simulation sets
//! it (`qcsim campaign|run|exhaust --broken`, or a saved case that names
//! a variant); the real-file tools, the NBD server and the drop-in
//! `qemu-img`/`qemu-io` build their `EngineOptions` without one.

use crate::alloc::allocs::AllocId;
use crate::alloc::allocs::CowFailure;
use crate::dev::{BlockDev, WriteFlags};
use crate::error::Result;
use crate::image::Image;
use crate::options::EngineOptions;

pub(crate) use crate::options::Broken;

/// Whether the image runs broken variant `b`.
#[inline(always)]
pub(crate) fn is(opts: &EngineOptions, b: Broken) -> bool {
    opts.broken == Some(b)
}

impl<D: BlockDev> Image<D> {
    /// `DoubleAlloc`: allocate another cluster for a guest cluster whose
    /// allocation `id` is still in flight, fill it (COW from the old
    /// source plus this write's data) and link it at once. The first
    /// allocation's link later replaces it, and this write's data is lost.
    pub(crate) async fn broken_second_alloc(
        &self,
        id: AllocId,
        off: u64,
        data: &[u8],
    ) -> Result<usize> {
        let cs = self.geo.cluster_size;
        let gstart = self.geo.cluster_start(off);
        let n = ((gstart + cs - off) as usize).min(data.len());
        let src = {
            let inf = self.inflight.borrow();
            match inf.allocs.get(id) {
                Some(a) => self.cow_source(a, gstart),
                None => return Ok(0),
            }
        };
        let host = {
            let mg = self.meta.lock().await;
            self.alloc_data_clusters(&mg, gstart, 1).await?.0
        };
        let mut buf = vec![0u8; cs as usize];
        self.read_cow_source(&src, gstart, &mut buf).await?;
        let o = (off - gstart) as usize;
        buf[o..o + n].copy_from_slice(&data[..n]);
        self.data_write(host, &buf, WriteFlags::default()).await?;
        let mg = self.meta.lock().await;
        let l2 = self.l2_table_for_write(&mg, gstart).await?;
        let old = self.set_l2_entry(&mg, l2, gstart, self.geo.data_entry(host));
        self.release_entry(old);
        Ok(n)
    }

    /// `LinkBeforeData`: link allocation `id` (just made for the write of
    /// `data` at `off` into host `host`, covering `[cover_start,
    /// cover_end)`) before its data is written, so the link may reach the
    /// disk first.
    pub(crate) async fn broken_link_before_data(
        &self,
        id: AllocId,
        cover: (u64, u64),
        host: u64,
        off: u64,
        data: &[u8],
    ) -> Result<usize> {
        // As if the write had ended, covering everything (no wake-up).
        let start = {
            let mut inf = self.inflight.borrow_mut();
            inf.allocs.writer_done(id, Some(cover));
            inf.allocs.alloc(id).guest_start()
        };
        self.commit_alloc(start, CowFailure::Keep).await?;
        let r = self
            .data_write(host + (off - start), data, WriteFlags::default())
            .await;
        r?;
        Ok(data.len())
    }

    /// `ReuseBeforeDurable`: the free of `cluster` counts as durable at
    /// once and waits for no in-flight I/O; the next allocation applies it
    /// (see `alloc_clusters_fresh`) and may hand the cluster out again.
    pub(crate) fn broken_free_at_once(&self, cluster: u64) {
        self.frees.borrow_mut().queue_durable_free(cluster, 0);
    }
}
