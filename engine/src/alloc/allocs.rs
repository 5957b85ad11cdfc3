//! The allocation table: every run of host clusters allocated for guest
//! clusters and not yet linked into the L2 table (QEMU's `QCowL2Meta`),
//! its lifecycle, and what tasks wait for on it.
//!
//! An allocation moves through explicit states, and only through the
//! table's verbs, each of which checks (in debug builds) that it is a legal
//! move:
//!
//! ```text
//! Open ──begin_commit──▶ Committing ──finish──▶ gone (linked)
//! Open ◀─────reopen───── Committing ──doom────▶ Doomed
//! Open ──give_up───────▶ gone (freed)           Doomed ──give_up──▶ gone (freed)
//! ```
//!
//! - **Open**: the allocating write (and, with delayed COW, writes that
//!   join it) may still write into it, and its COW areas may still be
//!   cancelled. Anyone may begin committing it; without delayed COW only
//!   its owner, the write that made it, may give it up.
//! - **Committing**: one task is completing its COW and linking it;
//!   nobody joins it, others wait. Its writers already in flight finish
//!   first. If the COW fails and the caller keeps it, or if linking fails,
//!   it is reopened.
//! - **Doomed**: a guest flush could not complete its COW and will give it
//!   up before it reports the failure. Until then readers still see it and
//!   writers wait, so no read sees the loss before the guest can know.
//! - **Partly linked** is not a state of its own but a fact an allocation
//!   carries from a failed link into Open (and Committing) again: a prefix
//!   of its clusters is in the L2 table already. Committing it again links
//!   the rest; giving it up frees only the rest.
//!
//! Keys: an allocation has an [`AllocId`], unique for the image's life.
//! Its guest start is reused by a later allocation once it is gone, so a
//! verb names the allocation by id; lookups by guest offset answer ids.
//! The table is ordered by guest start (a `BTreeMap`): iteration is
//! deterministic.
//!
//! Waiting: every wait on the table names what it waits for
//! ([`AllocWait`]) and waits in the queue of that name
//! (`Image::alloc_waits`); `alloc_wait` holds the waiting and the waking.
//! This module answers only whether a wait is over
//! ([`AllocTable::wait_over`]).

use std::collections::BTreeMap;

use crate::alloc::ranges::RangeSet;
use crate::format::L2Entry;

/// One allocation's identity, unique among the image's allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllocId(u64);

/// Where an allocation is in its lifecycle (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocState {
    /// Writes may still go into it; anyone may begin committing it.
    Open,
    /// One task is completing its COW and linking it.
    Committing,
    /// A guest flush gives it up once it reports its failure.
    Doomed,
}

/// One allocation of a run of host clusters for guest clusters not linked
/// into the L2 table yet.
#[derive(Debug, Clone)]
pub struct Alloc {
    id: AllocId,
    state: AllocState,
    /// Guest offset of the first cluster (cluster aligned).
    guest_start: u64,
    /// Length in bytes (whole clusters).
    len: u64,
    /// Host offset of the first cluster.
    host: u64,
    /// What each guest cluster mapped to before: the COW source.
    old: Vec<L2Entry>,
    /// Guest bytes whose new data has been written to the new clusters.
    written: RangeSet,
    /// Writes into the new clusters still in flight.
    writers: u32,
    /// The COW areas as created (head of the first cluster, tail of the
    /// last), for counting what was cancelled.
    cow_areas: Vec<(u64, u64)>,
    /// Clusters (a prefix) already linked by an earlier, failed commit.
    linked: u64,
    /// The guest bytes this allocation fills and links: all of its
    /// clusters, or (extended L2 entries) only the subclusters the write
    /// touched; the other subclusters keep their state.
    cover: (u64, u64),
    /// The host cluster is the guest cluster's own (a COPIED cluster whose
    /// unallocated or zero subclusters are filled in place): there is
    /// nothing to free when it is linked or given up.
    in_place: bool,
    /// The new clusters read as zeroes (grown, never used: see
    /// `grow::is_fresh`), so COW areas whose source is zero need no I/O.
    fresh: bool,
    /// A write into the new clusters failed: its bytes may hold anything,
    /// so the COW of the unwritten bytes must be written after all.
    failed_write: bool,
}

/// What a new allocation is made of; see the fields of [`Alloc`].
pub struct NewAlloc {
    pub guest_start: u64,
    pub len: u64,
    pub host: u64,
    pub old: Vec<L2Entry>,
    pub cow_areas: Vec<(u64, u64)>,
    pub cover: (u64, u64),
    pub in_place: bool,
    pub fresh: bool,
}

impl Alloc {
    /// Whether a write may join it: delayed COW, and Open.
    pub fn may_join(&self, delayed_cow: bool) -> bool {
        self.state == AllocState::Open && delayed_cow
    }

    /// Its identity.
    pub fn id(&self) -> AllocId {
        self.id
    }

    /// Where it is in its lifecycle.
    pub fn state(&self) -> AllocState {
        self.state
    }

    /// Guest offset of the first cluster.
    pub fn guest_start(&self) -> u64 {
        self.guest_start
    }

    /// How many clusters it allocates.
    pub fn clusters(&self) -> u64 {
        self.old.len() as u64
    }

    /// Guest offset just past the last cluster.
    pub fn end(&self) -> u64 {
        self.guest_start + self.len
    }

    /// Host offset of the first cluster.
    pub fn host(&self) -> u64 {
        self.host
    }

    /// Where guest offset `guest` (inside the allocation) lives on the host.
    pub fn host_of(&self, guest: u64) -> u64 {
        self.host + (guest - self.guest_start)
    }

    /// The L2 entry guest cluster `i` of the allocation had before it.
    pub fn old_entry(&self, i: usize) -> L2Entry {
        self.old[i]
    }

    /// Guest bytes already holding their new data.
    pub fn written(&self) -> &RangeSet {
        &self.written
    }

    /// The COW areas as created (head of the first cluster, tail of the
    /// last).
    pub fn cow_areas(&self) -> &[(u64, u64)] {
        &self.cow_areas
    }

    /// Clusters (a prefix) already linked by an earlier, failed commit.
    pub fn linked(&self) -> u64 {
        self.linked
    }

    /// The guest bytes the allocation fills and links.
    pub fn cover(&self) -> (u64, u64) {
        self.cover
    }

    /// Where the cover lies on the host (the data device).
    pub fn host_cover(&self) -> (u64, u64) {
        (self.host_of(self.cover.0), self.host_of(self.cover.1))
    }

    /// The host cluster is the guest cluster's own, filled in place.
    pub fn in_place(&self) -> bool {
        self.in_place
    }

    /// The new clusters read as zeroes (grown, never used).
    pub fn fresh(&self) -> bool {
        self.fresh
    }

    /// A write into the new clusters failed: they may hold anything.
    pub fn failed_write(&self) -> bool {
        self.failed_write
    }

    /// Writes into it in flight (its first writer and those that joined).
    pub fn writers(&self) -> u32 {
        self.writers
    }

    /// Guest bytes of the cover that no write has filled yet.
    pub fn unwritten(&self) -> Vec<(u64, u64)> {
        self.written.gaps(self.cover.0, self.cover.1)
    }

    /// No write into it is in flight and writes have covered all of it.
    fn covered(&self) -> bool {
        self.writers == 0 && self.unwritten().is_empty()
    }
}

/// The unlinked allocations, by guest start, and the id of the next.
#[derive(Default)]
pub struct AllocTable {
    by_start: BTreeMap<u64, Alloc>,
    start_of: BTreeMap<AllocId, u64>,
    last_id: u64,
}

impl AllocTable {
    /// Record a new allocation, Open, with its allocating write counted in
    /// as a writer. Returns its id.
    pub fn open(&mut self, n: NewAlloc) -> AllocId {
        self.last_id += 1;
        let id = AllocId(self.last_id);
        debug_assert!(
            !self.by_start.contains_key(&n.guest_start),
            "{id:?}: opened over another allocation at {:#x}",
            n.guest_start
        );
        self.start_of.insert(id, n.guest_start);
        self.by_start.insert(
            n.guest_start,
            Alloc {
                id,
                state: AllocState::Open,
                guest_start: n.guest_start,
                len: n.len,
                host: n.host,
                old: n.old,
                written: RangeSet::default(),
                writers: 1,
                cow_areas: n.cow_areas,
                linked: 0,
                cover: n.cover,
                in_place: n.in_place,
                fresh: n.fresh,
                failed_write: false,
            },
        );
        id
    }

    /// How many allocations are in the table.
    pub fn count(&self) -> usize {
        self.by_start.len()
    }

    /// Allocation `id`, if it is in the table.
    pub fn get(&self, id: AllocId) -> Option<&Alloc> {
        let start = self.start_of.get(&id)?;
        self.by_start.get(start)
    }

    /// Allocation `id`, which must be in the table.
    pub fn alloc(&self, id: AllocId) -> &Alloc {
        self.get(id).expect("allocation in the table")
    }

    fn alloc_mut(&mut self, id: AllocId) -> &mut Alloc {
        let start = self.start_of[&id];
        self.by_start
            .get_mut(&start)
            .expect("allocation in the table")
    }

    /// The state of allocation `id`; `None` once it is gone.
    pub fn state(&self, id: AllocId) -> Option<AllocState> {
        self.get(id).map(|a| a.state)
    }

    /// The allocation covering guest offset `off`.
    pub fn at(&self, off: u64) -> Option<AllocId> {
        self.by_start
            .range(..=off)
            .next_back()
            .filter(|(_, a)| off < a.end())
            .map(|(_, a)| a.id)
    }

    /// The allocation starting at guest offset `start`.
    pub fn at_start(&self, start: u64) -> Option<&Alloc> {
        self.by_start.get(&start)
    }

    /// The guest start of the first allocation starting after `off`.
    pub fn next_start_after(&self, off: u64) -> Option<u64> {
        self.by_start.range(off + 1..).next().map(|(&k, _)| k)
    }

    /// The guest start of the first allocation in guest order.
    pub fn first_start(&self) -> Option<u64> {
        self.by_start.keys().next().copied()
    }

    /// Every allocation's guest start, in guest order.
    pub fn starts(&self) -> Vec<u64> {
        self.by_start.keys().copied().collect()
    }

    /// Guest starts of the allocations overlapping [start, end).
    pub fn starts_overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        self.by_start
            .values()
            .filter(|a| a.guest_start < end && start < a.end())
            .map(|a| a.guest_start)
            .collect()
    }

    /// Move `id` from one of `from` to `to`, or (debug builds) panic
    /// naming the illegal move.
    fn step(&mut self, id: AllocId, from: &[AllocState], to: AllocState) -> &mut Alloc {
        let a = self.alloc_mut(id);
        debug_assert!(
            from.contains(&a.state),
            "{id:?}: illegal move {:?} -> {to:?}",
            a.state
        );
        a.state = to;
        a
    }

    /// Take allocation `id` out of the table (it is linked, or given up).
    fn remove(&mut self, id: AllocId) -> Alloc {
        let start = self.start_of.remove(&id).expect("allocation in the table");
        self.by_start
            .remove(&start)
            .expect("allocation in the table")
    }

    /// A write joins Open allocation `id` at guest offset `off`, for at
    /// most `len` bytes. Returns where they go on the host and how many
    /// fall inside the cover.
    pub fn join(&mut self, id: AllocId, off: u64, len: u64) -> (u64, u64) {
        let a = self.alloc_mut(id);
        debug_assert_eq!(a.state, AllocState::Open, "{id:?}: joined while not Open");
        a.writers += 1;
        let n = (a.cover.1 - off).min(len);
        (a.host_of(off), n)
    }

    /// A write into allocation `id` has ended, having written `written`
    /// (`None`: it failed, and its bytes may hold anything). Returns
    /// whether writes now cover the whole allocation.
    pub fn writer_done(&mut self, id: AllocId, written: Option<(u64, u64)>) -> bool {
        let a = self.alloc_mut(id);
        debug_assert!(
            a.writers > 0 && a.state != AllocState::Doomed,
            "{id:?}: a writer ended in state {:?} with {} writers",
            a.state,
            a.writers
        );
        a.writers -= 1;
        a.failed_write |= written.is_none();
        if let Some((s, e)) = written {
            a.written.insert(s, e);
        }
        a.unwritten().is_empty()
    }

    /// Whether Open allocation `id` can be committed at once: no write
    /// into it in flight, and writes have covered all of it.
    pub fn ready_to_commit(&self, id: AllocId) -> bool {
        self.get(id)
            .is_some_and(|a| a.state == AllocState::Open && a.covered())
    }

    /// Open → Committing: this caller completes and links it.
    pub fn begin_commit(&mut self, id: AllocId) {
        self.step(id, &[AllocState::Open], AllocState::Committing);
    }

    /// The commit's COW has filled every byte the writes left: reads may
    /// use the new clusters whole.
    pub fn cow_done(&mut self, id: AllocId) {
        let a = self.alloc_mut(id);
        debug_assert_eq!(
            a.state,
            AllocState::Committing,
            "{id:?}: COW done while not Committing"
        );
        let (s, e) = a.cover;
        a.written.insert(s, e);
    }

    /// Committing → Open: the COW failed and the caller keeps it for a
    /// later flush, or linking failed part way (it may be partly linked).
    pub fn reopen(&mut self, id: AllocId) {
        self.step(id, &[AllocState::Committing], AllocState::Open);
    }

    /// Committing → Doomed: a guest flush could not complete its COW and
    /// gives it up before it reports the failure.
    pub fn doom(&mut self, id: AllocId) {
        self.step(id, &[AllocState::Committing], AllocState::Doomed);
    }

    /// The commit has linked clusters `..n` of allocation `id`.
    pub fn linked_through(&mut self, id: AllocId, n: u64) {
        let a = self.alloc_mut(id);
        debug_assert!(
            a.state == AllocState::Committing && n == a.linked + 1,
            "{id:?}: linked cluster {n} in state {:?} after {}",
            a.state,
            a.linked
        );
        a.linked = n;
    }

    /// Committing → gone: every cluster is linked.
    pub fn finish(&mut self, id: AllocId) {
        let a = self.remove(id);
        debug_assert!(
            a.state == AllocState::Committing && a.linked == a.old.len() as u64,
            "{id:?}: illegal move {:?} -> linked with {} clusters linked",
            a.state,
            a.linked
        );
    }

    /// Open or Doomed → gone: given up before it was linked (all of it or
    /// the rest, if partly linked). Returns it, so that the caller frees
    /// what was never linked.
    pub fn give_up(&mut self, id: AllocId) -> Alloc {
        let a = self.remove(id);
        debug_assert!(
            matches!(a.state, AllocState::Open | AllocState::Doomed),
            "{id:?}: illegal move {:?} -> given up",
            a.state
        );
        a
    }
}

/// What a task waits for on the allocation table, and the key of its
/// queue. Those that name a guest start are about whatever allocation is
/// there when the waiter looks: the one it saw, or one made at the same
/// place after it went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum AllocWait {
    /// handle_dependencies: the allocation at `start` is gone, or may be
    /// joined (delayed COW, Open), or the image has failed.
    Settled { start: u64 },
    /// Flush or discard without delayed COW: the allocation at `start` is
    /// gone (its owner links it or gives it up).
    Gone { start: u64 },
    /// Another task is committing the allocation at `start`: it is gone, or
    /// Open again (that commit failed and this one may try).
    CommitEnded { start: u64 },
    /// The commit of `id` waits for the writes into it to end.
    WritersDone { id: AllocId },
}

impl AllocTable {
    /// Whether the table no longer holds what `w` waits for (the image's
    /// failure, which also ends a `Settled` wait, is the waiter's to add).
    pub(crate) fn wait_over(&self, w: AllocWait, delayed_cow: bool) -> bool {
        match w {
            AllocWait::Settled { start } => {
                self.at_start(start).is_none_or(|a| a.may_join(delayed_cow))
            }
            AllocWait::Gone { start } => self.at_start(start).is_none(),
            AllocWait::CommitEnded { start } => self
                .at_start(start)
                .is_none_or(|a| a.state == AllocState::Open),
            AllocWait::WritersDone { id } => self.get(id).is_none_or(|a| a.writers == 0),
        }
    }
}

/// What a failed deferred COW does to its allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CowFailure {
    /// Give it up and free its clusters (a guest flush).
    Drop,
    /// Keep it open for the next flush.
    Keep,
}
