//! The crash rules' bookkeeping for debug assertions: a ledger of what the
//! engine wrote, which of it a completed flush made durable, and what each
//! table's content relies on, so that each rule of ARCHITECTURE.md's crash
//! rules is asserted where it is kept (each check names its rule:
//! `crash rule broken: <rule>: ...`).
//!
//! The ledger is told what happens (a write issued or completed, a flush
//! issued or completed, a table entry changed, an allocation reserved, a
//! free queued) and decides by its own counts whether an order holds. It
//! never asks the code it checks whether a flush was done or a write has
//! ended: a broken variant that skips a flush, or says a write ended when
//! it did not, still leaves the ledger's counts as they are, and the next
//! step that relies on them fails here instead of in some crash state
//! that may never be drawn.
//!
//! Flush epochs, per device (the image file, and the data file if any):
//! every completed tracked write gets the next number of its device; a
//! flush notes the number reached when it was issued, and once it
//! completes every write up to that number is durable (the Linux rule
//! the simulated disk keeps too).
//!
//! Metadata objects (an L2 table, a 512-byte sector of the L1 table, a
//! refcount block, the refcount table, the header), by host offset, each
//! in one of two domains, refcounts and references: every change made to
//! one in memory gets a number from one counter, and stays pending until
//! a write of the object issued after it is durable. An L2 table also
//! notes, at each change, how many data writes had completed and the
//! change's own number: it may be written only once those writes and
//! every refcount change up to that number are durable (or, under lazy
//! refcounts, a durable dirty bit stands in for the refcounts).
//!
//! The engine reaches it through `Image::rules`, which does nothing in a
//! release build, and its writes and flushes of guest data through
//! `tracked`. Release builds keep an empty ledger and check nothing:
//! every hook is behind `cfg!(debug_assertions)` and the ledger's own
//! switch (`EngineOptions::rule_checks`), so the optimiser drops it. The
//! checks change no behaviour: a run with them is the same run, request
//! for request, as without.

use std::collections::BTreeMap;

use crate::alloc::ranges::RangeSet;
use crate::format::header::{incompat, Header};
use crate::format::L1Entry;

/// Which device a request goes to. Without an external data file, guest
/// data lives on the image device: `Data` then means `Image`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dev {
    /// The image file.
    Image,
    /// The device guest data goes to (the data file, if any).
    Data,
}

/// What a tracked write is, for what its completion tells the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Guest data or COW (or zeroes standing for them).
    Data,
    /// Growing the file ahead: the range reads as zeroes once it completes.
    Growth,
    /// A metadata write; what it covers is noted at issue.
    Meta,
}

/// The two domains of metadata objects: refcount blocks and the refcount
/// table, and everything that references clusters (L1, L2, the header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Domain {
    Refcounts,
    References,
}

impl Domain {
    fn index(self) -> usize {
        self as usize
    }
}

/// What an L2 table's content relies on since its last change.
#[derive(Debug, Clone, Copy, Default)]
struct L2Needs {
    /// Data writes (on the data device) completed at the change.
    data: u64,
    /// The change's number: every refcount change up to it.
    refcounts: u64,
}

/// One metadata object (see the module doc).
#[derive(Debug)]
struct Obj {
    domain: Domain,
    what: &'static str,
    /// The change that created it this session (a new L2 table or
    /// refcount block): nothing may name it before a write of it after
    /// that change is durable.
    created: Option<u64>,
    /// Changes not yet durable, ascending.
    changes: Vec<u64>,
    /// Every change up to this one is durable.
    durable_upto: u64,
    /// For an L2 table.
    needs: Option<L2Needs>,
}

/// A device's flush epochs.
#[derive(Debug, Default)]
struct Epochs {
    /// Tracked writes completed.
    completed: u64,
    /// The first that many are durable.
    durable: u64,
}

/// A write issued and not completed.
#[derive(Debug)]
struct InFlight {
    token: u64,
    dev: Dev,
    start: u64,
    end: u64,
    kind: Kind,
    /// A metadata write: the change counter when it was issued.
    covers: u64,
    /// A header write: whether it sets the dirty bit.
    dirty: Option<bool>,
}

/// A metadata write completed and not yet durable.
#[derive(Debug)]
struct Pending {
    seq: u64,
    start: u64,
    end: u64,
    covers: u64,
    dirty: Option<bool>,
}

/// A queued free: the references it waits for (every change up to this
/// number; 0 for a free of clusters nothing on disk named) and the first
/// data I/O that cannot touch the cluster.
#[derive(Debug, Clone, Copy)]
struct Free {
    references: u64,
    io_seq: u64,
}

/// A write the ledger was told of; hand it back when the write completes.
#[must_use]
pub struct Token(u64);

/// Where the image's tables are when it is opened.
pub struct Layout {
    /// The cluster size in bytes.
    pub cluster_size: u64,
    /// Guest data lives in an external data file.
    pub data_file: bool,
    /// The L1 table: offset and bytes.
    pub l1: (u64, u64),
    /// The refcount table: offset and bytes.
    pub reftable: (u64, u64),
    /// The dirty bit is set on disk.
    pub dirty: bool,
}

/// The ledger (see the module doc).
pub struct RuleLedger {
    on: bool,
    cluster_size: u64,
    data_file: bool,
    image: Epochs,
    data: Epochs,
    next_token: u64,
    in_flight: Vec<InFlight>,
    pending: Vec<Pending>,
    /// The change counter.
    changes: u64,
    objects: BTreeMap<u64, Obj>,
    /// Per domain: each change not yet durable, by number, with its
    /// object's key.
    undurable: [BTreeMap<u64, u64>; 2],
    /// The active L1 table, as the header names it: `[start, end)`.
    l1: (u64, u64),
    /// The latest change of each L1 entry of the active table. The table is
    /// an object per 512-byte sector (how it is written), but a FUA
    /// request relies on its own entries only: another entry's change in
    /// the same sector is no concern of it.
    l1_entries: BTreeMap<usize, u64>,
    /// The active refcount table, as the header names it: `[start, end)`.
    pub reftable: (u64, u64),
    /// The latest durable header write set the dirty bit.
    pub dirty_durable: bool,
    /// Image device bytes growing zeroed and no write has touched since.
    zero: RangeSet,
    /// Data device bytes of unlinked allocations (and compressed data not
    /// yet linked), the part of them that must hold the guest's data, and
    /// what completed writes filled.
    reserved: RangeSet,
    must: RangeSet,
    filled: RangeSet,
    frees: BTreeMap<u64, Vec<Free>>,
}

/// Panic naming the broken rule.
macro_rules! broken_rule {
    ($rule:literal, $($arg:tt)*) => {
        panic!(concat!("crash rule broken: ", $rule, ": {}"), format!($($arg)*))
    };
}

/// The entry of a table of big-endian 64-bit words at byte `i * 8`.
fn be64_at(bytes: &[u8], i: usize) -> u64 {
    u64::from_be_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

impl RuleLedger {
    /// The ledger of an image just opened; `on` false checks nothing.
    pub fn new(on: bool, l: Layout) -> Self {
        RuleLedger {
            on,
            cluster_size: l.cluster_size,
            data_file: l.data_file,
            image: Epochs::default(),
            data: Epochs::default(),
            next_token: 0,
            in_flight: Vec::new(),
            pending: Vec::new(),
            changes: 0,
            objects: BTreeMap::new(),
            undurable: [BTreeMap::new(), BTreeMap::new()],
            l1: (l.l1.0, l.l1.0 + l.l1.1),
            l1_entries: BTreeMap::new(),
            reftable: (l.reftable.0, l.reftable.0 + l.reftable.1),
            dirty_durable: l.dirty,
            zero: RangeSet::default(),
            reserved: RangeSet::default(),
            must: RangeSet::default(),
            filled: RangeSet::default(),
            frees: BTreeMap::new(),
        }
    }

    /// Whether it checks anything.
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// `dev` as it is: the data device is the image device without a
    /// data file.
    fn real(&self, dev: Dev) -> Dev {
        if self.data_file {
            dev
        } else {
            Dev::Image
        }
    }

    fn epochs(&self, dev: Dev) -> &Epochs {
        match self.real(dev) {
            Dev::Image => &self.image,
            Dev::Data => &self.data,
        }
    }

    fn epochs_mut(&mut self, dev: Dev) -> &mut Epochs {
        match self.real(dev) {
            Dev::Image => &mut self.image,
            Dev::Data => &mut self.data,
        }
    }

    // ---- writes and flushes ----

    /// A write of `len` bytes at `start` on `dev` is issued. Rule: no two
    /// of the engine's writes are in flight over the same bytes.
    pub fn issue(&mut self, dev: Dev, start: u64, len: u64, kind: Kind) -> Token {
        let dev = self.real(dev);
        let end = start + len;
        if let Some(w) = self
            .in_flight
            .iter()
            .find(|w| w.dev == dev && overlaps((w.start, w.end), (start, end)))
        {
            broken_rule!(
                "no overlapping writes",
                "a write to {start:#x}..{end:#x} on the {dev:?} device while one to {:#x}..{:#x} is in flight",
                w.start,
                w.end
            );
        }
        if dev == Dev::Image {
            // In flight, the bytes hold anything.
            self.zero.remove(start, end);
        }
        self.next_token += 1;
        self.in_flight.push(InFlight {
            token: self.next_token,
            dev,
            start,
            end,
            kind,
            covers: 0,
            dirty: None,
        });
        Token(self.next_token)
    }

    /// The write `t` completed (`ok`), or failed.
    pub fn complete(&mut self, t: Token, ok: bool) {
        if let Some(p) = self.finish(t, ok) {
            self.pending.push(p);
        }
    }

    /// The write `t` ended: its device's count and what its kind tells
    /// the ledger; a metadata write that succeeded comes back, completed
    /// and not yet durable.
    fn finish(&mut self, t: Token, ok: bool) -> Option<Pending> {
        let i = self.in_flight.iter().position(|w| w.token == t.0)?;
        let w = self.in_flight.swap_remove(i);
        if !ok {
            return None;
        }
        let e = self.epochs_mut(w.dev);
        e.completed += 1;
        let seq = e.completed;
        match w.kind {
            Kind::Data => {
                for (s, e) in self.reserved.parts_in(w.start, w.end) {
                    self.filled.insert(s, e);
                }
            }
            Kind::Growth => self.zero.insert(w.start, w.end),
            Kind::Meta => {
                return Some(Pending {
                    seq,
                    start: w.start,
                    end: w.end,
                    covers: w.covers,
                    dirty: w.dirty,
                })
            }
        }
        None
    }

    /// What a flush of `dev` issued now will make durable.
    pub fn flush_mark(&self, dev: Dev) -> u64 {
        self.epochs(dev).completed
    }

    /// A flush of `dev` issued at `mark` completed.
    pub fn flushed(&mut self, dev: Dev, mark: u64) {
        let e = self.epochs_mut(dev);
        e.durable = e.durable.max(mark);
        if self.real(dev) != Dev::Image {
            return;
        }
        let (mut done, keep): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| p.seq <= mark);
        self.pending = keep;
        done.sort_by_key(|p| p.seq);
        for p in done {
            self.settle(p);
        }
    }

    /// The metadata write `p` is durable: the changes it covers are.
    fn settle(&mut self, p: Pending) {
        let keys: Vec<u64> = self
            .objects
            .range(p.start..p.end)
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            self.made_durable(k, p.covers);
        }
        if let Some(d) = p.dirty {
            self.dirty_durable = d;
        }
    }

    /// The write `t`, sent with FUA, completed (`ok`): durable as it
    /// completes. A metadata write makes what it covers durable at once;
    /// a data write counts as any other (its device's watermark does not
    /// move, so later checks can only ask more of the engine, never less).
    pub(crate) fn complete_fua(&mut self, t: Token, ok: bool) {
        if let Some(p) = self.finish(t, ok) {
            self.settle(p);
        }
    }

    /// Every change of object `key` up to `upto` is durable.
    fn made_durable(&mut self, key: u64, upto: u64) {
        let Some(o) = self.objects.get_mut(&key) else {
            return;
        };
        o.durable_upto = o.durable_upto.max(upto);
        let n = o.changes.partition_point(|&c| c <= o.durable_upto);
        let idx = o.domain.index();
        for c in o.changes.drain(..n) {
            self.undurable[idx].remove(&c);
        }
    }

    /// The dirty bit is durable and no header write that clears it is
    /// under way.
    fn dirty_stands(&self) -> bool {
        self.dirty_durable
            && !self.pending.iter().any(|p| p.dirty == Some(false))
            && !self.in_flight.iter().any(|w| w.dirty == Some(false))
    }

    // ---- metadata objects ----

    /// Forget object `key` (its cluster was freed, or its table moved).
    fn forget(&mut self, key: u64) {
        if let Some(o) = self.objects.remove(&key) {
            for c in o.changes {
                self.undurable[o.domain.index()].remove(&c);
            }
        }
    }

    /// Object `key` (of `domain`) changes in memory; the change's number.
    fn change(&mut self, key: u64, domain: Domain, what: &'static str) -> u64 {
        if self.objects.get(&key).is_some_and(|o| o.domain != domain) {
            // The cluster was freed and now holds something else.
            self.forget(key);
        }
        self.changes += 1;
        let c = self.changes;
        let o = self.objects.entry(key).or_insert_with(|| Obj {
            domain,
            what,
            created: None,
            changes: Vec::new(),
            durable_upto: 0,
            needs: None,
        });
        o.changes.push(c);
        self.undurable[domain.index()].insert(c, key);
        c
    }

    /// An entry of the L2 table at `table` changed: the table now relies on
    /// every data write completed so far and every refcount change made.
    pub fn l2_changed(&mut self, table: u64) {
        let c = self.change(table, Domain::References, "L2 table");
        let data = self.epochs(Dev::Data).completed;
        if let Some(o) = self.objects.get_mut(&table) {
            o.needs = Some(L2Needs { data, refcounts: c });
        }
    }

    /// A new L2 table at `table`, not on disk yet.
    pub fn l2_created(&mut self, table: u64) {
        self.forget(table);
        self.l2_changed(table);
        let o = self.objects.get_mut(&table).expect("just changed");
        o.created = o.changes.last().copied();
    }

    /// L1 entry `index` of the active table changed.
    pub fn l1_changed(&mut self, index: usize) {
        let key = self.l1_key(index);
        let c = self.change(key, Domain::References, "L1 table");
        self.l1_entries.insert(index, c);
    }

    /// The object holding L1 entry `index`: its 512-byte sector.
    fn l1_key(&self, index: usize) -> u64 {
        self.l1.0 + (index as u64 * 8) / 512 * 512
    }

    /// A refcount counted by the block at `block` changed.
    pub fn refcount_changed(&mut self, block: u64) {
        self.change(block, Domain::Refcounts, "refcount block");
    }

    /// A new refcount block at `block`, named by the refcount table in
    /// memory, not on disk yet.
    pub fn refblock_added(&mut self, block: u64) {
        self.forget(block);
        let c = self.change(block, Domain::Refcounts, "refcount block");
        self.objects.get_mut(&block).expect("just changed").created = Some(c);
        self.change(self.reftable.0, Domain::Refcounts, "refcount table");
    }

    /// A metadata write of `data` at `off` is issued: the rules that order
    /// it before or after others are checked here, whichever code path
    /// writes it (a writeback, an eviction, a snapshot operation).
    pub fn issue_meta(&mut self, off: u64, data: &[u8]) -> Token {
        let end = off + data.len() as u64;
        let mut dirty = None;
        if off == 0 {
            dirty = self.header_write(data);
            // The header write itself is the change it makes.
            self.change(0, Domain::References, "header");
        }
        if overlaps((off, end), self.l1) {
            self.check_l1_write(off, data);
        }
        if off == self.reftable.0 {
            self.check_reftable_write(data);
        }
        if let Some(needs) = self.objects.get(&off).and_then(|o| o.needs) {
            self.check_l2_write(off, needs);
        }
        let covers = self.changes;
        let t = self.issue(Dev::Image, off, data.len() as u64, Kind::Meta);
        let w = self.in_flight.last_mut().expect("just issued");
        w.covers = covers;
        w.dirty = dirty;
        t
    }

    /// Rules: refcounts before L2 (under lazy refcounts, the dirty bit
    /// before L2); data before L2. An eviction's write included. The
    /// refcounts first: a writeback that skips the flush after them skips
    /// the data's too, and is named for the flush it skipped.
    fn check_l2_write(&self, table: u64, needs: L2Needs) {
        let rc = &self.undurable[Domain::Refcounts.index()];
        if let Some((&c, &key)) = rc.first_key_value() {
            if c <= needs.refcounts && !self.dirty_stands() {
                let what = self.objects.get(&key).map_or("refcounts", |o| o.what);
                broken_rule!(
                    "refcounts before L2",
                    "the L2 table at {table:#x} is written while change {c} of the {what} at {key:#x}, which it relies on, is not durable, and no durable dirty bit stands in for it"
                );
            }
        }
        let data = self.epochs(Dev::Data);
        if data.durable < needs.data {
            broken_rule!(
                "data before L2",
                "the L2 table at {table:#x} is written while the data it links is not durable ({} of the first {} data writes are)",
                data.durable,
                needs.data
            );
        }
    }

    /// Rule: an L1 entry names a new L2 table only once that table is
    /// durable.
    fn check_l1_write(&self, off: u64, data: &[u8]) {
        for i in 0..data.len() / 8 {
            let t = L1Entry(be64_at(data, i)).l2_offset();
            let Some(o) = self.objects.get(&t).filter(|_| t != 0) else {
                continue;
            };
            if o.created.is_some_and(|c| o.durable_upto < c) {
                broken_rule!(
                    "L2 before L1",
                    "the L1 entry at {:#x} names the new L2 table at {t:#x} before that table is durable",
                    off + i as u64 * 8
                );
            }
        }
    }

    /// Rule: the refcount table names a new block only once that block is
    /// durable.
    fn check_reftable_write(&self, data: &[u8]) {
        for i in 0..data.len() / 8 {
            let b = be64_at(data, i) & !0x1ff;
            let Some(o) = self.objects.get(&b).filter(|_| b != 0) else {
                continue;
            };
            if o.domain == Domain::Refcounts && o.created.is_some_and(|c| o.durable_upto < c) {
                broken_rule!(
                    "blocks before the refcount table",
                    "refcount table entry {i} names the new block at {b:#x} before that block is durable"
                );
            }
        }
    }

    /// Rule: the tables a header names are durable before it is written
    /// (a grown refcount table, a new L1 table, a new snapshot table).
    /// Then the header's tables are the active ones. Returns whether it
    /// sets the dirty bit (None: a version 2 header, which has none).
    fn header_write(&mut self, data: &[u8]) -> Option<bool> {
        let h = Header::parse(data).ok()?;
        let cs = self.cluster_size;
        let l1 = (
            h.l1_table_offset,
            h.l1_table_offset + u64::from(h.l1_size) * 8,
        );
        let reftable = (
            h.refcount_table_offset,
            h.refcount_table_offset + u64::from(h.refcount_table_clusters) * cs,
        );
        let snapshots = (
            h.snapshots_offset,
            h.snapshots_offset + u64::from(h.nb_snapshots > 0),
        );
        for (what, r) in [
            ("L1 table", l1),
            ("refcount table", reftable),
            ("snapshot table", snapshots),
        ] {
            let unflushed = self
                .pending
                .iter()
                .map(|p| (p.start, p.end))
                .chain(
                    self.in_flight
                        .iter()
                        .filter(|w| w.dev == Dev::Image)
                        .map(|w| (w.start, w.end)),
                )
                .find(|&w| r.0 < r.1 && overlaps(w, r));
            if let Some((s, e)) = unflushed {
                broken_rule!(
                    "tables before the header",
                    "the header names the {what} at {:#x} while a write to {s:#x}..{e:#x} is not durable",
                    r.0
                );
            }
        }
        if l1 != self.l1 {
            let old: Vec<u64> = self
                .objects
                .range(self.l1.0..self.l1.1)
                .map(|(&k, _)| k)
                .collect();
            for k in old {
                self.forget(k);
            }
            self.l1 = l1;
            self.l1_entries.clear();
        }
        if reftable != self.reftable {
            self.forget(self.reftable.0);
            self.reftable = reftable;
        }
        (h.version >= 3).then_some(h.incompatible_features & incompat::DIRTY != 0)
    }

    // ---- allocations ----

    /// Host bytes `cover` (on the data device) are an allocation's, not
    /// linked yet; `must` of them are to hold the guest data written into
    /// it. Nothing written before counts.
    pub fn reserve(&mut self, cover: (u64, u64), must: (u64, u64)) {
        self.reserved.insert(cover.0, cover.1);
        self.filled.remove(cover.0, cover.1);
        self.must.insert(must.0, must.1);
    }

    /// The allocation of host bytes `cover` is linked or given up.
    pub fn release(&mut self, cover: (u64, u64)) {
        self.reserved.remove(cover.0, cover.1);
        self.filled.remove(cover.0, cover.1);
        self.must.remove(cover.0, cover.1);
    }

    /// Rule: data (and COW) before the link. Host bytes `cover` are about
    /// to be linked: no write into them is in flight, the guest data is
    /// written, and every other byte was written too, or reads as zeroes
    /// (growing zeroed it and nothing wrote it since) where its COW source
    /// (`zero_source`) is zero.
    pub fn check_link(&self, cover: (u64, u64), zero_source: &[(u64, u64)]) {
        let dev = self.real(Dev::Data);
        if let Some(w) = self
            .in_flight
            .iter()
            .find(|w| w.dev == dev && overlaps((w.start, w.end), cover))
        {
            broken_rule!(
                "data before link",
                "host {:#x}..{:#x} is linked while a write to {:#x}..{:#x} is in flight",
                cover.0,
                cover.1,
                w.start,
                w.end
            );
        }
        for (s, e) in self.must.parts_in(cover.0, cover.1) {
            if let Some((a, b)) = self.filled.gaps(s, e).first() {
                broken_rule!(
                    "data before link",
                    "host {:#x}..{:#x} is linked before its guest data at {a:#x}..{b:#x} was written",
                    cover.0,
                    cover.1
                );
            }
        }
        let mut zero_ok = RangeSet::default();
        if !self.data_file {
            for &(s, e) in zero_source {
                for (a, b) in self.zero.parts_in(s, e) {
                    zero_ok.insert(a, b);
                }
            }
        }
        for (s, e) in self.filled.gaps(cover.0, cover.1) {
            if let Some((a, b)) = zero_ok.gaps(s, e).first() {
                broken_rule!(
                    "data before link",
                    "host {:#x}..{:#x} is linked before its COW at {a:#x}..{b:#x} was written",
                    cover.0,
                    cover.1
                );
            }
        }
    }

    // ---- frees ----

    /// The free of `cluster` is queued: it waits for every reference
    /// change made so far (none if `durable`: nothing on disk named the
    /// cluster) and for the data I/O numbered below `io_seq`.
    pub fn free_queued(&mut self, cluster: u64, io_seq: u64, durable: bool) {
        let references = if durable { 0 } else { self.changes };
        self.frees
            .entry(cluster)
            .or_default()
            .push(Free { references, io_seq });
    }

    /// The reference change not durable that a free waiting for changes
    /// up to `upto` still waits for.
    fn undurable_reference(&self, upto: u64) -> Option<(u64, u64)> {
        self.undurable[Domain::References.index()]
            .first_key_value()
            .filter(|(&c, _)| c <= upto)
            .map(|(&c, &k)| (c, k))
    }

    /// Rules: frees after the reference is gone (durably), and after the
    /// I/O started before them (one rule of ARCHITECTURE.md, two names). The refcount of `cluster` drops now;
    /// `oldest_io` is the oldest data I/O in flight.
    pub fn free_applied(&mut self, cluster: u64, oldest_io: Option<u64>) {
        let Some(list) = self.frees.get(&cluster) else {
            return;
        };
        let ready = |f: &Free| {
            self.undurable_reference(f.references).is_none()
                && oldest_io.is_none_or(|o| o >= f.io_seq)
        };
        if let Some(i) = list.iter().position(ready) {
            let list = self.frees.get_mut(&cluster).expect("looked up");
            list.remove(i);
            if list.is_empty() {
                self.frees.remove(&cluster);
            }
            return;
        }
        let f = list[0];
        if let Some((c, key)) = self.undurable_reference(f.references) {
            let what = self.objects.get(&key).map_or("table", |o| o.what);
            broken_rule!(
                "frees after the reference is gone",
                "cluster {cluster} is freed while change {c} of the {what} at {key:#x}, made before the free, is not durable"
            );
        }
        broken_rule!(
            "frees after the I/O before them",
            "cluster {cluster} is freed while data I/O {} started before the free is in flight",
            oldest_io.unwrap_or(0)
        );
    }

    /// The cluster at host offset `off` is free: whatever object was there
    /// is gone.
    pub(crate) fn cluster_freed(&mut self, off: u64) {
        let keys: Vec<u64> = self
            .objects
            .range(off..off + self.cluster_size)
            .map(|(&k, _)| k)
            .collect();
        for k in keys {
            self.forget(k);
        }
    }

    // ---- flushes the guest sees ----

    /// The number of the last change to any object so far.
    pub(crate) fn change_mark(&self) -> u64 {
        self.changes
    }

    /// Rule `rule`: every change up to `upto` (a [`RuleLedger::change_mark`])
    /// to the L2 tables `tables` and to the L1 entries `l1` (indices) is
    /// durable: what a FUA request relies on to be read back after a
    /// crash. Later changes are other requests'.
    pub(crate) fn check_mapping_durable(
        &self,
        tables: &[u64],
        l1: &[usize],
        upto: u64,
        rule: &str,
    ) {
        // An L1 entry is durable once its sector's writes reach past its
        // latest change: the changes still pending on an object are the
        // latest ones (a write takes every change made before it).
        let keys = tables.iter().map(|&t| (t, upto)).chain(l1.iter().map(|&i| {
            let last = self.l1_entries.get(&i).copied().unwrap_or(0);
            (self.l1_key(i), upto.min(last))
        }));
        for (key, upto) in keys {
            let Some(o) = self.objects.get(&key) else {
                continue;
            };
            if let Some(c) = o.changes.first().filter(|&&c| c <= upto) {
                panic!(
                    "crash rule broken: {rule}: change {c} of the {} at {key:#x} is not durable",
                    o.what
                );
            }
        }
    }

    /// The writes completed so far on the image and data devices.
    pub fn completed(&self) -> (u64, u64) {
        (self.image.completed, self.epochs(Dev::Data).completed)
    }

    /// Rule `rule`: every write completed at `marks` (from
    /// [`RuleLedger::completed`]) is durable.
    pub fn check_durable(&self, marks: (u64, u64), rule: &str) {
        let (image, data) = (self.image.durable, self.epochs(Dev::Data).durable);
        if image < marks.0 || data < marks.1 {
            panic!(
                "crash rule broken: {rule}: of the writes completed before it, {image} of {} on the image device and {data} of {} on the data device are durable",
                marks.0, marks.1
            );
        }
    }
}
