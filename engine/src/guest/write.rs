//! The guest write path. A write is cut into steps, one per run of
//! clusters that map the same way; each step is:
//!
//! 1. `handle_dependencies`: join an allocation in flight for the same
//!    clusters (delayed COW), or wait for it to be linked;
//! 2. `handle_copied`: write in place where the clusters are ours alone;
//! 3. `handle_alloc`: otherwise allocate a run of new clusters (one record,
//!    an [`Alloc`]), write the data (with its COW areas, zeroed, merged or
//!    deferred as the switches say) and link it, now or at the next flush.
//!
//! Overlapping guest writes are serialised at byte granularity before any
//! of this: a write waits for in-flight writes to the same bytes.

use crate::alloc::allocs::{Alloc, AllocId, AllocState, AllocWait, CowFailure, NewAlloc};
use crate::broken::{self, Broken};
use crate::cluster::mapping::Run;
use crate::cow::{self, Place};
use crate::dev::{BlockDev, WriteFlags};
use crate::error::{Error, Result};
use crate::format::entry::{COPIED, SUBCLUSTERS};
use crate::format::{L2Entry, L2Mapping};
use crate::guards::Guard;
use crate::image::{Image, MetaGuard};

/// How many unlinked allocations may wait for their COW at once; beyond it
/// the oldest is committed, so memory stays bounded.
const MAX_OPEN_ALLOCS: usize = 512;

impl<D: BlockDev> Image<D> {
    pub(crate) fn check_request(&self, offset: u64, len: u64) -> Result<()> {
        let size = self.geo.virtual_size;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::OutOfRange { offset, len, size });
        }
        Ok(())
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly);
        }
        if self.is_poisoned() {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Wait until no in-flight write overlaps [start, end), then register
    /// one. The returned id must be passed to `end_write`.
    pub(crate) async fn begin_write(&self, start: u64, end: u64) -> u64 {
        let (start, end) = self.write_dependency_range(start, end);
        let mut waited = false;
        self.writes_wq
            .wait_until(|| {
                let busy = self.inflight.borrow().overlaps_write(start, end);
                waited |= busy;
                !busy
            })
            .await;
        if waited {
            self.count(|c| c.overlap_waits += 1);
        }
        self.inflight.borrow_mut().add_write(start, end)
    }

    /// The range a write to [start, end) must hold against other writes.
    /// With extended L2 entries, whole subclusters: an allocation fills the
    /// partial subclusters at its ends with their old content, which a
    /// write to other bytes of the same subcluster must not race with.
    /// (Whole clusters are copied only from clusters that are not COPIED,
    /// which nobody writes in place.)
    fn write_dependency_range(&self, start: u64, end: u64) -> (u64, u64) {
        if self.geo.extended_l2 {
            let sc = self.geo.subcluster_size;
            (self.geo.subcluster_start(start), end.next_multiple_of(sc))
        } else {
            (start, end)
        }
    }

    pub(crate) fn end_write(&self, id: u64) {
        self.inflight.borrow_mut().writes.remove(&id);
        self.writes_wq.notify_all();
    }

    /// [`Image::write`]: the implementation.
    pub(crate) async fn write_impl(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.write_request(offset, buf, false).await.map(|_| ())
    }

    /// A guest write; with `fua`, each piece written in place over a
    /// mapping already durable goes to the device with FUA. Returns
    /// whether every piece did (then the write is durable as it returns).
    pub(crate) async fn write_request(&self, offset: u64, buf: &[u8], fua: bool) -> Result<bool> {
        self.check_writable()?;
        self.check_request(offset, buf.len() as u64)?;
        self.count(|c| {
            c.guest_writes += 1;
            c.guest_bytes_written += buf.len() as u64;
        });
        if buf.is_empty() {
            return Ok(true);
        }
        let id = self.begin_write(offset, offset + buf.len() as u64).await;
        let r = self.write_range(offset, buf, fua).await;
        self.end_write(id);
        r
    }

    /// The write loop, with the byte range already reserved.
    pub(crate) async fn write_locked_range(&self, offset: u64, buf: &[u8]) -> Result<()> {
        self.write_range(offset, buf, false).await.map(|_| ())
    }

    /// [`Image::write_locked_range`], FUA where it can be (see
    /// [`Image::write_request`]).
    async fn write_range(&self, offset: u64, buf: &[u8], fua: bool) -> Result<bool> {
        let mut done = 0usize;
        let mut durable = true;
        while done < buf.len() {
            let (n, d) = self
                .write_step(offset + done as u64, &buf[done..], fua)
                .await?;
            done += n;
            durable &= d;
        }
        Ok(durable)
    }

    /// One step of a write; returns how many bytes it wrote, and whether
    /// they went to the device with FUA over a durable mapping.
    async fn write_step(&self, off: u64, data: &[u8], fua: bool) -> Result<(usize, bool)> {
        loop {
            let mg = self.meta.lock().await;
            if self.is_poisoned() {
                return Err(Error::Poisoned);
            }
            // 1. handle_dependencies
            let dep = self.inflight.borrow().allocs.at(off);
            if let Some(id) = dep {
                self.guard_arose(Guard::JoinInflightAlloc);
                if broken::is(&self.opts, Broken::DoubleAlloc) {
                    // Deliberately wrong: a second cluster for a guest
                    // cluster whose allocation is still in flight.
                    drop(mg);
                    return Ok((self.broken_second_alloc(id, off, data).await?, false));
                }
                let (start, joinable, in_cover) = {
                    let inf = self.inflight.borrow();
                    let a = inf.allocs.alloc(id);
                    let (cs, ce) = a.cover();
                    (a.guest_start(), self.may_join(a), (cs..ce).contains(&off))
                };
                drop(mg);
                if joinable {
                    if !in_cover {
                        // Subclusters the allocation leaves as they were:
                        // link it first, then map this write afresh.
                        self.commit_alloc(start, CowFailure::Keep).await?;
                        continue;
                    }
                    return Ok((self.join_alloc(id, off, data).await?, false));
                }
                self.wait_alloc(AllocWait::Settled { start }).await;
                continue;
            }
            let limit = {
                let inf = self.inflight.borrow();
                let mut l = data.len() as u64;
                if let Some(next) = inf.allocs.next_start_after(off) {
                    if next - off < l {
                        self.guard_arose(Guard::CutAtAlloc);
                        if !broken::is(&self.opts, Broken::NoCutAtAlloc) {
                            l = next - off;
                        }
                    }
                }
                l
            };
            let (run, mut len) = self.map_run(&mg, off, limit).await?;
            if self.geo.extended_l2 && !matches!(run, Run::Data { copied: true, .. }) {
                // A run may end inside a cluster where subclusters stop
                // mapping alike; the allocation takes the whole cluster
                // anyway, so let it take the rest of the write there too.
                len = ((off + len).next_multiple_of(self.geo.cluster_size) - off).min(limit);
            }
            // 2. handle_copied
            if let Run::Data { host, copied: true } = run {
                let host = host + self.geo.offset_into_cluster(off);
                self.check_data_clusters(&mg, host, len)?;
                // A FUA write over a mapping already durable needs nothing
                // but its own bytes durable: one device write with FUA.
                let fua = fua && self.mapping_durable(&mg, off);
                let io = self.inflight.borrow_mut().begin_io();
                drop(mg);
                let r = self
                    .data_write(host, &data[..len as usize], WriteFlags { fua })
                    .await;
                self.inflight.borrow_mut().end_io(io);
                r?;
                return Ok((len as usize, fua));
            }
            // 3. handle_alloc
            let n = self.handle_alloc(mg, off, &data[..len as usize]).await?;
            return Ok((n, false));
        }
    }

    /// Give up an allocation whose write failed before anything was
    /// linked to it (without delayed COW no other write can have joined
    /// it): the clusters not yet linked go back to the free pool.
    /// By id: once it is linked, a later allocation may take the same
    /// guest start (a write filling other subclusters of the cluster), and
    /// that one is not this caller's to give up.
    async fn abort_alloc(&self, id: AllocId) {
        // After any metadata sequence in progress, as every give-up but a
        // failed flush's (which must not await).
        let _mg = self.meta.lock().await;
        // A flush may have taken it over meanwhile: then it is completed
        // from its COW sources and linked, which is as good.
        let open = self.inflight.borrow().allocs.state(id) == Some(AllocState::Open);
        if open {
            // Its own writer's failure: no other request's data is in it.
            self.drop_alloc(id);
        }
    }

    /// Forget an allocation and free its clusters that were never linked.
    /// Nothing durable points at them, but a read that began before now may
    /// still be reading one (the written part of an unlinked cluster), so
    /// each is reused only once the I/O started before now has finished.
    /// Returns the guest bytes its clusters held.
    fn drop_alloc(&self, id: AllocId) -> (u64, u64) {
        let a = self.inflight.borrow_mut().allocs.give_up(id);
        self.rules(|r| r.release(a.host_cover()));
        self.wake_alloc_waiters(a.guest_start(), id);
        if a.in_place() {
            // The clusters were there before the allocation: nothing to
            // free.
            return self.count_drop(&a);
        }
        let io_seq = self.inflight.borrow().next_io_seq;
        let cs = self.geo.cluster_size;
        // Data file clusters have no refcount to give back.
        let first = if self.has_data_file() {
            a.clusters()
        } else {
            a.linked()
        };
        {
            let mut frees = self.frees.borrow_mut();
            for i in first..a.clusters() {
                frees.queue_durable_free(a.host() / cs + i, io_seq);
                self.rules(|r| r.free_queued(a.host() / cs + i, io_seq, true));
            }
        }
        self.count_drop(&a)
    }

    /// Count a given-up allocation; returns the guest bytes its clusters
    /// held.
    fn count_drop(&self, a: &Alloc) -> (u64, u64) {
        self.count(|c| c.allocs_dropped += 1);
        let start = self.geo.cluster_start(a.guest_start());
        (start, start + a.clusters() * self.geo.cluster_size)
    }

    /// Write into the new clusters of an allocation still in flight; the
    /// bytes written cancel that part of its COW.
    async fn join_alloc(&self, id: AllocId, off: u64, data: &[u8]) -> Result<usize> {
        let (host, n) = self
            .inflight
            .borrow_mut()
            .allocs
            .join(id, off, data.len() as u64);
        self.count(|c| c.alloc_joins += 1);
        let io = self.inflight.borrow_mut().begin_io();
        let r = self
            .data_write(host, &data[..n as usize], WriteFlags::default())
            .await;
        self.finish_writer(id, io, r.is_ok().then_some((off, off + n)));
        r?;
        self.commit_if_covered(id).await?;
        Ok(n as usize)
    }

    /// A write into allocation `id` has finished: end its I/O, count it
    /// out, record the bytes it wrote (`None` if it failed). Returns whether
    /// writes now cover the whole allocation.
    fn finish_writer(&self, id: AllocId, io: u64, written: Option<(u64, u64)>) -> bool {
        let covered = {
            let mut inf = self.inflight.borrow_mut();
            inf.end_io(io);
            if broken::is(&self.opts, Broken::CommitIgnoresWriters) && inf.allocs.get(id).is_none()
            {
                // The commit that did not wait has linked it already.
                return false;
            }
            inf.allocs.writer_done(id, written)
        };
        self.alloc_waits.wake(AllocWait::WritersDone { id });
        covered
    }

    /// Allocate new clusters for [off, off + data.len()) (which the lookup
    /// found unallocated, zero, compressed or shared), write the data and
    /// the COW areas, and link them. With extended L2 entries, see
    /// [`Image::subcluster_alloc`]: the step may write less than `data`.
    /// `EngineOptions::l2_before_data`: allocate the L2 tables that guest
    /// range `[start, end)` lacks now, before its data clusters, as QEMU
    /// orders them. The tables are linked into the L1 table in memory and
    /// written back in the usual order; linking the data later finds them.
    async fn alloc_missing_l2_tables(
        &self,
        mg: &MetaGuard<'_>,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let span = self.geo.l2_span();
        let mut g = start;
        while g < end {
            let l1i = self.geo.offset_to_l1_index(g);
            if mg.borrow().tables.l1_entry(l1i).l2_offset() == 0 {
                self.l2_table_for_write(mg, g).await?;
            }
            g = (l1i as u64 + 1) * span;
        }
        Ok(())
    }

    async fn handle_alloc(&self, mg: MetaGuard<'_>, off: u64, data: &[u8]) -> Result<usize> {
        let cs = self.geo.cluster_size;
        let gstart = self.geo.cluster_start(off);
        let end = off + data.len() as u64;
        let nclusters = (end.next_multiple_of(cs) - gstart) / cs;
        let mut old = Vec::with_capacity(nclusters as usize);
        for i in 0..nclusters {
            old.push(self.l2_entry(&mg, gstart + i * cs).await?);
        }
        let shape = self.subcluster_alloc(&mut old);
        let nclusters = old.len() as u64;
        let end = end.min(gstart + nclusters * cs);
        let data = &data[..(end - off) as usize];
        let gend = end.next_multiple_of(cs);
        let (cover_start, cover_end) = match shape {
            Some(_) => (
                self.geo.subcluster_start(off),
                end.next_multiple_of(self.geo.subcluster_size),
            ),
            None => (gstart, gend),
        };
        let in_place = shape.flatten();
        let (host, fresh) = match in_place {
            Some(h) => {
                // Filling subclusters of a cluster the L2 entry names:
                // never metadata.
                self.check_data_clusters(&mg, h, nclusters * cs)?;
                (h, false)
            }
            None => {
                if self.opts.l2_before_data {
                    self.alloc_missing_l2_tables(&mg, gstart, gend).await?;
                }
                self.alloc_data_clusters(&mg, gstart, nclusters).await?
            }
        };
        let mut cow_areas = Vec::new();
        if off > cover_start {
            cow_areas.push((cover_start, off));
        }
        if end < cover_end {
            cow_areas.push((end, cover_end));
        }
        let ncow = cow_areas.len() as u64;
        let (id, open_allocs) = {
            let mut inf = self.inflight.borrow_mut();
            let id = inf.allocs.open(NewAlloc {
                guest_start: gstart,
                len: gend - gstart,
                host,
                old,
                cow_areas,
                cover: (cover_start, cover_end),
                in_place: in_place.is_some(),
                fresh,
            });
            (id, inf.allocs.count())
        };
        // What the link will need written: the cover, the data in it.
        let at = |g: u64| host + (g - gstart);
        self.rules(|r| r.reserve((at(cover_start), at(cover_end)), (at(off), at(end))));
        self.count(|c| {
            if in_place.is_none() {
                c.clusters_allocated += nclusters;
            }
            c.cow_created += ncow;
        });
        if ncow > 0 {
            self.guard_arose(Guard::PartialCow);
        }
        drop(mg);

        if broken::is(&self.opts, Broken::LinkBeforeData) {
            // Deliberately wrong: the link may reach the disk before the data.
            return self
                .broken_link_before_data(id, (cover_start, cover_end), host, off, data)
                .await;
        }

        let io = self.inflight.borrow_mut().begin_io();
        let r = if self.opts.switches.delayed_cow {
            self.data_write(host + (off - gstart), data, WriteFlags::default())
                .await
                .map_err(Error::from)
        } else {
            self.write_with_cow(id, off, data).await
        };
        let done = match (&r, self.opts.switches.delayed_cow) {
            (Err(_), _) => None,
            (Ok(()), true) => Some((off, end)),
            // The COW areas were written along with the data.
            (Ok(()), false) => Some((cover_start, cover_end)),
        };
        let covered = self.finish_writer(id, io, done);
        if !self.opts.switches.delayed_cow {
            // The guest learns of any failure here, so the allocation can
            // be given up: the failed write reads as old data.
            let r = match r {
                Ok(()) => self.commit_alloc(gstart, CowFailure::Keep).await,
                Err(e) => Err(e),
            };
            if r.is_err() {
                self.abort_alloc(id).await;
            }
            return r.map(|()| data.len());
        }
        // With delayed COW, other writes may have joined the allocation:
        // on an error it stays, to be completed (from its COW sources) by
        // the next flush, and the failed bytes read as old data.
        r?;
        if covered {
            self.commit_alloc(gstart, CowFailure::Keep).await?;
        } else if open_allocs > MAX_OPEN_ALLOCS {
            // The first by guest offset (not the oldest: any will do).
            let first = self.inflight.borrow().allocs.first_start();
            if let Some(k) = first {
                self.count(|c| c.open_alloc_cap_commits += 1);
                self.commit_alloc(k, CowFailure::Keep).await?;
            }
        }
        Ok(data.len())
    }

    /// How an allocation of the clusters whose entries are `old` goes:
    /// `None`, whole new clusters (clusters that are unallocated,
    /// compressed or shared); `Some(None)` (extended L2 entries), new
    /// clusters for clusters that hold no host cluster, filling and
    /// linking only the subclusters the write touches; `Some(Some(host))`,
    /// a COPIED cluster filled in place: its unallocated or zero
    /// subclusters, or (standard entries) the whole of a zero cluster that
    /// kept its host cluster, the rest copied from zeroes, as QEMU's
    /// driver reuses one. `old` is cut so the kinds never mix in one
    /// allocation.
    fn subcluster_alloc(&self, old: &mut Vec<L2Entry>) -> Option<Option<u64>> {
        if !self.geo.extended_l2 {
            return self.kept_zero_alloc(old);
        }
        let cb = self.geo.cluster_bits;
        let hostless = |e: &L2Entry| {
            matches!(
                e.decode(cb, 3),
                L2Mapping::Unallocated | L2Mapping::Zero { preallocated: None }
            )
        };
        match old.iter().position(|e| !hostless(e)) {
            None => Some(None),
            Some(0) => {
                old.truncate(1);
                match old[0].decode(cb, 3) {
                    L2Mapping::Normal { host, copied: true } => Some(Some(host)),
                    _ => None,
                }
            }
            Some(i) => {
                old.truncate(i);
                Some(None)
            }
        }
    }

    /// [`Image::subcluster_alloc`] for standard L2 entries: a COPIED zero
    /// cluster with a host cluster first is filled in place, alone; one
    /// later cuts the allocation of new clusters before it. (Not with a
    /// data file, whose clusters sit at their guest offsets anyway.)
    fn kept_zero_alloc(&self, old: &mut Vec<L2Entry>) -> Option<Option<u64>> {
        if self.has_data_file() {
            return None;
        }
        let (cb, v) = (self.geo.cluster_bits, self.geo.version);
        let kept = |e: &L2Entry| match e.decode(cb, v) {
            L2Mapping::Zero {
                preallocated: Some(h),
            } if e.word & COPIED != 0 => Some(h),
            _ => None,
        };
        match old.iter().position(|e| kept(e).is_some()) {
            Some(0) => {
                old.truncate(1);
                Some(kept(&old[0]))
            }
            Some(i) => {
                old.truncate(i);
                None
            }
            None => None,
        }
    }

    /// Without delayed COW: data and COW areas go to the new clusters now
    /// (as `cow::plan` decides: zeroed in one request, merged into one
    /// write, or written apart).
    async fn write_with_cow(&self, id: AllocId, off: u64, data: &[u8]) -> Result<()> {
        let end = off + data.len() as u64;
        let (job, place) = {
            let inf = self.inflight.borrow();
            let a = inf.allocs.alloc(id);
            // The bytes the allocation fills: whole clusters, or subclusters.
            let (cover_start, cover_end) = a.cover();
            let head = (cover_start, off);
            let tail = (end, cover_end);
            let todo = [head, tail].into_iter().filter(|(s, e)| s < e).collect();
            (self.cow_job(a, todo, Some((off, end))), Place::of(a))
        };
        let sw = self.cow_switches();
        if !job.todo.is_empty() && !sw.drop_cow {
            self.count(|c| c.cow_performed += job.todo.len() as u64);
        }
        self.run_cow_plan(place, &cow::plan(&job, sw), off, data)
            .await
    }

    /// Commit an allocation once writes have covered all of it.
    async fn commit_if_covered(&self, id: AllocId) -> Result<()> {
        let ready = {
            let inf = self.inflight.borrow();
            inf.allocs
                .ready_to_commit(id)
                .then(|| inf.allocs.alloc(id).guest_start())
        };
        if let Some(start) = ready {
            self.commit_alloc(start, CowFailure::Keep).await?;
        }
        Ok(())
    }

    /// Commit every allocation in flight now (guest flush, close). The
    /// caller must report an error without awaiting anything first.
    pub(crate) async fn commit_all_allocs(&self) -> Result<()> {
        let keys: Vec<u64> = self.inflight.borrow().allocs.starts();
        let mut first_err = None;
        let mut failed = Vec::new();
        for k in keys {
            if let Err(e) = self.settle_alloc(k, CowFailure::Drop).await {
                first_err.get_or_insert(e);
                failed.push(k);
            }
        }
        // Those whose COW failed are Doomed: give them up now, with no
        // await before the flush reports its failure. Not those whose
        // commit failed otherwise (linking): they went back to Open, and
        // another writer may have taken them over since.
        for k in failed {
            let doomed = self
                .inflight
                .borrow()
                .allocs
                .at_start(k)
                .filter(|a| a.state() == AllocState::Doomed)
                .map(|a| a.id());
            if let Some(id) = doomed {
                // Writes that joined it and completed lose their data: a
                // FUA request among them must learn of it (`DropLog`).
                let (start, end) = self.drop_alloc(id);
                self.inflight.borrow_mut().dropped.record(start, end);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// See the allocation at guest start `start` through before a flush
    /// or discard relies on the L2 table. With delayed COW it is committed
    /// here; without, its owner (the write that made it, still in flight)
    /// always commits or gives it up before completing, so only waiting is
    /// needed, and taking it over would race with the owner giving it up.
    pub(crate) async fn settle_alloc(&self, start: u64, on_cow_error: CowFailure) -> Result<()> {
        if self.opts.switches.delayed_cow {
            return self.commit_alloc(start, on_cow_error).await;
        }
        self.wait_alloc(AllocWait::Gone { start }).await;
        Ok(())
    }

    /// the metadata lock, taken once no allocation overlapping guest range
    /// `[start, end)` is in flight (each settled first, any COW failure
    /// keeping it open for a later flush): a caller about to change those
    /// clusters' entries sees them final. None can begin while the lock
    /// is held; one begun while an earlier one settled is settled too.
    pub(crate) async fn lock_with_allocs_settled(
        &self,
        start: u64,
        end: u64,
    ) -> Result<MetaGuard<'_>> {
        loop {
            let keys = self.inflight.borrow().allocs.starts_overlapping(start, end);
            for k in keys {
                self.settle_alloc(k, CowFailure::Keep).await?;
            }
            let mg = self.meta.lock().await;
            if self
                .inflight
                .borrow()
                .allocs
                .starts_overlapping(start, end)
                .is_empty()
            {
                return Ok(mg);
            }
        }
    }

    /// Finish the allocation at guest start `start`: wait for the writes
    /// into it, perform what is left of its COW, and link its clusters into
    /// the L2 table. If another task is already committing it, wait for
    /// that instead; should that commit fail and reopen it, commit it here.
    /// (Whatever is at `start` when this looks: after such a wait it may be
    /// a later allocation of the same place, which a flush commits too.)
    ///
    /// If the COW fails, `on_cow_error` says what becomes of it: a guest
    /// flush dooms it (its failure tells the guest that unflushed
    /// writes may be lost); anyone else reopens it for a later flush,
    /// since their failure promises nothing about other writes' data.
    pub(crate) async fn commit_alloc(&self, start: u64, on_cow_error: CowFailure) -> Result<()> {
        let id = loop {
            let at = self
                .inflight
                .borrow()
                .allocs
                .at_start(start)
                .map(|a| (a.id(), a.state()));
            match at {
                None => return Ok(()),
                Some((id, AllocState::Open)) => {
                    self.inflight.borrow_mut().allocs.begin_commit(id);
                    break id;
                }
                // Someone else is committing it; if that fails it goes back
                // to Open and this commit tries again.
                Some((_, AllocState::Committing | AllocState::Doomed)) => {
                    self.wait_alloc(AllocWait::CommitEnded { start }).await
                }
            }
        };
        let writers = self
            .inflight
            .borrow()
            .allocs
            .get(id)
            .map_or(0, |a| a.writers());
        if writers > 0 {
            self.guard_arose(Guard::CommitWaitsWriters);
        }
        if !broken::is(&self.opts, Broken::CommitIgnoresWriters) {
            self.wait_alloc(AllocWait::WritersDone { id }).await;
        }
        if self.inflight.borrow().allocs.get(id).is_none() {
            return Ok(());
        }
        let cow = self.perform_remaining_cow(id).await;
        if cow.is_ok() {
            // Every byte of the new clusters now holds its data: reads may
            // use them whole.
            self.inflight.borrow_mut().allocs.cow_done(id);
        }
        if let Err(e) = cow {
            self.count(|c| c.cow_failures += 1);
            // The copy failed, so the cluster cannot be linked without
            // losing what it should have copied.
            match on_cow_error {
                // The flush will fail, the image stays as it was before
                // the allocation, and the writes that went only into this
                // cluster are lost, as unflushed writes may be when a
                // flush fails. Doomed, it stays visible to reads and closed
                // to writes until the flush gives it up just before
                // failing, so that no read sees the loss before the guest
                // can know of it.
                CowFailure::Drop => self.inflight.borrow_mut().allocs.doom(id),
                CowFailure::Keep => {
                    self.inflight.borrow_mut().allocs.reopen(id);
                    self.wake_alloc_waiters(start, id);
                }
            }
            return Err(e);
        }
        let mg = self.meta.lock().await;
        let r = self.link_alloc(&mg, id).await;
        let r = match r {
            Ok(()) if !self.opts.switches.delayed_metadata => self.writeback_all(&mg).await,
            other => other,
        };
        drop(mg);
        // Linked and gone, or (linking failed) Open again.
        self.wake_alloc_waiters(start, id);
        r
    }

    /// Copy what no write covered (as `cow::plan` decides), counting
    /// cancelled and performed areas.
    async fn perform_remaining_cow(&self, id: AllocId) -> Result<()> {
        let (job, place) = {
            let inf = self.inflight.borrow();
            let a = inf.allocs.alloc(id);
            if self.opts.switches.delayed_cow {
                for &(s, e) in a.cow_areas() {
                    let left: u64 = a.written().gaps(s, e).iter().map(|(x, y)| y - x).sum();
                    self.count(|c| {
                        if left == 0 {
                            c.cow_cancelled_whole += 1;
                        } else if left < e - s {
                            c.cow_cancelled_partial += 1;
                            c.cow_performed += 1;
                        } else {
                            c.cow_performed += 1;
                        }
                    });
                }
            }
            (self.cow_job(a, a.unwritten(), None), Place::of(a))
        };
        self.run_cow_plan(place, &cow::plan(&job, self.cow_switches()), 0, &[])
            .await
    }

    /// Point the L2 entries at the new clusters and drop the allocation.
    /// On an error the allocation is reopened (partly linked: the clusters
    /// linked so far are remembered) so that a later flush finishes it.
    async fn link_alloc(&self, mg: &MetaGuard<'_>, id: AllocId) -> Result<()> {
        self.guard_arose(Guard::DataBeforeLink);
        let a = self.inflight.borrow().allocs.alloc(id).clone();
        self.rules_check_link(&a);
        let cs = self.geo.cluster_size;
        for i in a.linked()..a.clusters() {
            let guest = a.guest_start() + i * cs;
            match self.l2_table_for_write(mg, guest).await {
                Ok(l2) => {
                    let old =
                        self.update_l2_entry(mg, l2, guest, |cur| self.linked_entry(&a, i, cur));
                    if !a.in_place() {
                        self.release_entry(old);
                    }
                    self.inflight.borrow_mut().allocs.linked_through(id, i + 1);
                }
                Err(e) => {
                    self.count(|c| c.link_failures += 1);
                    self.inflight.borrow_mut().allocs.reopen(id);
                    return Err(e);
                }
            }
        }
        self.inflight.borrow_mut().allocs.finish(id);
        self.rules(|r| r.release(a.host_cover()));
        Ok(())
    }

    /// Rule (debug builds): data before link, checked for allocation `a`
    /// about to be linked; where its COW source is zero, bytes growing
    /// zeroed may stand for the COW.
    fn rules_check_link(&self, a: &Alloc) {
        if self.rules(|_| ()).is_none() {
            return;
        }
        let (cs, ce) = a.cover();
        let zero_source: Vec<(u64, u64)> = self
            .cow_pieces(a, cs, ce)
            .into_iter()
            .filter(|p| p.src.is_zero())
            .map(|p| (a.host_of(p.start), a.host_of(p.end)))
            .collect();
        self.rules(|r| r.check_link(a.host_cover(), &zero_source));
    }

    /// The L2 entry that links cluster `i` of allocation `a` in place of
    /// `cur`: the new host cluster with every subcluster allocated, or
    /// (subcluster allocations) `cur`'s bitmap with the covered subclusters
    /// allocated and no longer zero. (Subclusters outside the cover may have
    /// changed since the allocation began: zeroed.)
    fn linked_entry(&self, a: &Alloc, i: u64, cur: L2Entry) -> L2Entry {
        let cs = self.geo.cluster_size;
        let host = a.host() + i * cs;
        let cstart = a.guest_start() + i * cs;
        let (cover_start, cover_end) = a.cover();
        if !self.geo.extended_l2 || (cover_start == a.guest_start() && cover_end == a.end()) {
            return self.geo.data_entry(host);
        }
        let sc = self.geo.subcluster_size;
        let first = (cover_start.max(cstart) - cstart) / sc;
        let last = (cover_end.min(cstart + cs) - cstart) / sc;
        debug_assert!(first < last && last <= SUBCLUSTERS as u64);
        let mask = ((1u64 << last) - 1) & !((1u64 << first) - 1);
        debug_assert!(
            cur.word & !COPIED == if a.in_place() { host } else { 0 },
            "the cluster's host changed under an allocation"
        );
        L2Entry {
            word: host | COPIED,
            bitmap: (cur.bitmap | mask) & !(mask << SUBCLUSTERS),
        }
    }
}
