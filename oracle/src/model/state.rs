//! The model itself: the events a run feeds it and the checks it makes.
//!
//! A run is a sequence of epochs separated by crashes. Within an epoch the
//! model keeps, per sector touched, its base value (what the epoch started
//! with) and the history of writes to it ([`super::history`]). A crash ends
//! the epoch: [`Model::crash`] fixes what each sector may hold, the runner
//! reopens the image and reads it whole, and [`Model::check_recovered`]
//! checks those bytes and makes them the next epoch's base.

use std::collections::{BTreeMap, BTreeSet};

use smallvec::SmallVec;

use super::history::{self, Book, Entries, Entry, EntryId, Put, Seq};
use super::sectors::SectorMap;
use super::types::{DiscardContract, OpId, SectorRange, Status, Value, WriteKind};
use super::violation::{Violation, When};
use crate::data::{compressible_has_data, decode, is_zero, BackingData, WriteId, SECTOR_SIZE};

/// Counts for a run's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Guest reads checked.
    pub reads: u64,
    /// Sectors returned by guest reads and checked.
    pub read_sectors: u64,
    /// Crashes the model went through.
    pub crashes: u64,
    /// Sectors checked after crashes.
    pub recovered_sectors: u64,
}

/// What a failed flush left a sector allowed to fall back to.
struct Lost {
    /// Every value the sector may have rolled back to.
    values: Vec<Value>,
    /// When the last failed flush that touched it completed: only a write
    /// issued after it, made durable by a later flush, ends the doubt.
    since: Seq,
}

/// The entries a write in flight put in the sectors it covers: one, or
/// (a compressed write, a snapshot being applied) one per value it puts.
type PendingWrite = SmallVec<[EntryId; 2]>;

struct PendingRead {
    range: SectorRange,
    issued: Seq,
}

/// What a crash left each sector allowed to hold, until the runner has
/// read the reopened image back. Built once per crash and walked once in
/// sector order, so it is kept as flat sorted vectors rather than maps:
/// a map node and a value list per written sector cost more than the
/// checks themselves.
struct Recovery {
    /// Sectors with a history this epoch, ascending, each with the range
    /// of `values` it may hold; the others must hold their base.
    allowed: Vec<(u64, std::ops::Range<usize>)>,
    /// The allowed values of every sector in `allowed`, back to back.
    values: Vec<Value>,
    /// The next sector [`Model::check_recovered`] expects.
    next: u64,
    /// Index in `allowed` of the first sector not before `next`.
    cursor: usize,
    /// The next epoch's base values, where they differ from the unwritten
    /// value, ascending.
    base: Vec<(u64, Value)>,
}

impl Recovery {
    /// The sectors of `allowed` in `first..end`, from the cursor on.
    fn allowed_in(&self, end: u64) -> &[(u64, std::ops::Range<usize>)] {
        let rest = &self.allowed[self.cursor..];
        &rest[..rest.partition_point(|(s, _)| *s < end)]
    }
}

/// The reference model of one guest disk.
pub struct Model {
    sectors: u64,
    backing: Option<BackingData>,
    now: Seq,
    epoch: u32,
    /// The epoch's starting values, where they differ from
    /// [`Model::unwritten`], sorted by sector. Only ever walked in order
    /// and replaced whole after a crash (the recovery check collects it
    /// in order), so a vector: rebuilding and dropping a map of every
    /// such sector at each crash was over 1% of a campaign.
    base: Vec<(u64, Value)>,
    history: SectorMap<Entries>,
    /// The entries `history` names.
    book: Book,
    writes: BTreeMap<OpId, PendingWrite>,
    reads: BTreeMap<OpId, PendingRead>,
    flushes: BTreeMap<OpId, Seq>,
    /// The ranges of FUA requests in flight.
    fua_ranges: BTreeMap<OpId, SectorRange>,
    /// The latest issue time of a flush that completed successfully in
    /// this epoch: writes done before it are durable.
    durable_point: Seq,
    /// Sectors a failed flush may have rolled back (see
    /// [`Model::flush_completed`]).
    lost: BTreeMap<u64, Lost>,
    /// The sectors of `lost` that a write was issued to since their doubt
    /// began: the only ones a successful flush can settle
    /// (`settle_lost`), so that it need not look at every sector in
    /// doubt (most stay so: a failed flush casts doubt on every sector
    /// written since the last durable point).
    lost_written: BTreeSet<u64>,
    ids: BTreeSet<WriteId>,
    recovery: Option<Recovery>,
    stats: Stats,
    /// What a discard promises ([`Model::with_discard_contract`]).
    discard: DiscardContract,
}

impl Model {
    /// A model of a fresh disk of `sectors` guest sectors, reading as the
    /// backing file (or zeroes) everywhere.
    pub fn new(sectors: u64, backing: Option<BackingData>) -> Model {
        Model {
            sectors,
            backing,
            now: 0,
            epoch: 0,
            base: Vec::new(),
            history: SectorMap::default(),
            book: Book::default(),
            writes: BTreeMap::new(),
            reads: BTreeMap::new(),
            flushes: BTreeMap::new(),
            fua_ranges: BTreeMap::new(),
            durable_point: 0,
            lost: BTreeMap::new(),
            lost_written: BTreeSet::new(),
            ids: BTreeSet::new(),
            recovery: None,
            stats: Stats::default(),
            discard: DiscardContract::default(),
        }
    }

    /// The model holding discards to `contract` (the default is
    /// [`DiscardContract::Advisory`], what qcsim's engine promises).
    pub fn with_discard_contract(mut self, contract: DiscardContract) -> Model {
        self.discard = contract;
        self
    }

    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Crashes so far: the current epoch's number.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// What `sector` reads when the image does not cover it.
    pub fn unwritten(&self, sector: u64) -> Value {
        unwritten(self.backing.as_ref(), sector)
    }

    fn tick(&mut self) -> Seq {
        self.now += 1;
        self.now
    }

    fn assert_running(&self) {
        assert!(
            self.recovery.is_none(),
            "guest request between a crash and the end of its recovery check"
        );
    }

    fn assert_in_disk(&self, range: SectorRange) {
        assert!(
            range.len > 0 && range.end() <= self.sectors,
            "{range:?} is not inside a disk of {} sectors",
            self.sectors
        );
    }

    /// Reads issued before this may still see entries that compaction would
    /// drop, so compaction never looks past the oldest of them.
    fn compaction_point(&self) -> Seq {
        self.reads
            .values()
            .map(|r| r.issued)
            .min()
            .unwrap_or(Seq::MAX)
            .min(self.durable_point)
    }

    /// A guest write (data, write_zeroes or discard) was issued.
    pub fn write_issued(&mut self, op: OpId, range: SectorRange, kind: WriteKind) {
        self.write_issued_flagged(op, range, kind, false);
    }

    /// [`Model::write_issued`], flagged FUA or not. A FUA request that
    /// completes successfully is durable at once: after any later crash its
    /// sectors read as it or as a write not done before it was issued,
    /// never older data. One that fails is taken as a failed flush (see
    /// [`Model::flush_completed`]): a driver that emulates FUA with a
    /// flush, or whose own flush behind it fails, may have given up
    /// writes that were not yet durable. One in flight at a crash is like
    /// any write in flight.
    pub fn write_issued_flagged(
        &mut self,
        op: OpId,
        range: SectorRange,
        kind: WriteKind,
        fua: bool,
    ) {
        self.assert_running();
        self.assert_in_disk(range);
        if let WriteKind::Data(id) = kind {
            assert!(self.ids.insert(id), "{id} issued twice");
        }
        let issued = self.tick();
        let put = match kind {
            WriteKind::Data(id) => Put::Value(Value::Data(id)),
            WriteKind::Zero => Put::Value(Value::Zero),
            WriteKind::Discard => match self.discard {
                DiscardContract::Advisory => Put::Discard,
                // Anything from now on, whatever the sector held before
                // (so it may hide older values like a write).
                DiscardContract::Unspecified => Put::Value(Value::Unspecified),
            },
        };
        let entry = self.book.add(Entry {
            put,
            issued,
            completed: None,
            fua,
        });
        let old = self.writes.insert(op, SmallVec::from_elem(entry, 1));
        assert!(old.is_none(), "{op} issued twice");
        if fua {
            self.fua_ranges.insert(op, range);
        }
        let keep_from = self.compaction_point();
        if !self.lost.is_empty() {
            let in_doubt = self.lost.range(range.start..range.start + range.len);
            self.lost_written.extend(in_doubt.map(|(&s, _)| s));
        }
        // One pass over the range, page by page (`SectorMap::fill_range`).
        let book = &self.book;
        self.history
            .fill_range(range.start, range.end(), |_, entries| {
                history::compact(book, entries, keep_from);
                entries.push(entry);
            });
    }

    /// A guest request that puts its own value in each sector it covers
    /// was issued: a compressed write (generated data among zeroes, all
    /// of write `id`), or a snapshot being applied (`id` None: each sector
    /// gets back what the snapshot holds, written data of earlier writes).
    /// `values` are in ascending sector order. Completed with
    /// [`Model::write_completed`], and judged like any write: until it is
    /// durable each sector may hold its old value or the new one.
    pub fn write_issued_values(&mut self, op: OpId, id: Option<WriteId>, values: &[(u64, Value)]) {
        self.assert_running();
        if let Some(id) = id {
            assert!(self.ids.insert(id), "{id} issued twice");
        }
        assert!(
            values.windows(2).all(|w| w[0].0 < w[1].0),
            "{op}'s sectors are not in ascending order"
        );
        if let (Some(&(first, _)), Some(&(last, _))) = (values.first(), values.last()) {
            self.assert_in_disk(SectorRange::new(first, last - first + 1));
        }
        let issued = self.tick();
        assert!(!self.writes.contains_key(&op), "{op} issued twice");
        let keep_from = self.compaction_point();
        // One entry per value the request puts, shared by its sectors.
        let mut entry_of: BTreeMap<Value, EntryId> = BTreeMap::new();
        for &(s, v) in values {
            if self.lost.contains_key(&s) {
                self.lost_written.insert(s);
            }
            let book = &mut self.book;
            let entry = *entry_of.entry(v).or_insert_with(|| {
                book.add(Entry {
                    put: Put::Value(v),
                    issued,
                    completed: None,
                    fua: false,
                })
            });
            let entries = self.history.entry(s);
            history::compact(&self.book, entries, keep_from);
            entries.push(entry);
        }
        self.writes.insert(op, entry_of.into_values().collect());
    }

    /// What a compressed write `id` of `sectors` sectors from `sector`
    /// puts in each ([`crate::data::fill_compressible_buffer`]'s data), as
    /// [`Model::write_issued_values`] takes it.
    pub fn compressible_values(id: WriteId, sector: u64, sectors: u64) -> Vec<(u64, Value)> {
        (sector..sector + sectors)
            .map(|s| {
                let v = if compressible_has_data(s) {
                    Value::Data(id)
                } else {
                    Value::Zero
                };
                (s, v)
            })
            .collect()
    }

    /// A guest write issued with [`Model::write_issued`] or
    /// [`Model::write_issued_values`] returned.
    pub fn write_completed(&mut self, op: OpId, status: Status) {
        self.assert_running();
        let entries = self
            .writes
            .remove(&op)
            .unwrap_or_else(|| panic!("{op} completed but is not an issued write"));
        let done = self.tick();
        // Its sectors share its entries: marking them marks every sector.
        for &id in &entries {
            self.book.get_mut(id).completed = Some((done, status));
        }
        if let Some(range) = self.fua_ranges.remove(&op) {
            let e = *self.book.get(entries[0]);
            if status == Status::Ok {
                // A discard promises no value, so it settles nothing.
                if matches!(e.put, Put::Value(_)) {
                    self.settle_lost_by_fua(range, e.issued);
                }
            } else {
                self.cast_doubt(done);
            }
        }
    }

    /// A FUA request issued at `issued` over `range` succeeded: the
    /// sectors of `range` a failed flush put in doubt before it was issued
    /// are certain again, as a later successful flush would make them.
    fn settle_lost_by_fua(&mut self, range: SectorRange, issued: Seq) {
        let settled: Vec<u64> = self
            .lost
            .range(range.start..range.end())
            .filter(|(_, l)| l.since < issued)
            .map(|(&s, _)| s)
            .collect();
        for s in settled {
            self.lost.remove(&s);
            self.lost_written.remove(&s);
        }
    }

    /// A guest flush was issued.
    pub fn flush_issued(&mut self, op: OpId) {
        self.assert_running();
        let issued = self.tick();
        let old = self.flushes.insert(op, issued);
        assert!(old.is_none(), "{op} issued twice");
    }

    /// A guest flush returned. On success every write done before it was
    /// issued is durable.
    ///
    /// A failed flush promises less: like `fsync` failing on Linux, it may
    /// have dropped writes that were not yet durable (an engine whose
    /// deferred COW fails gives the new cluster up, and the writes that
    /// went into it with it). From then on each sector written since the
    /// durable point may also read any value it could have held after a
    /// crash at that moment, until a write issued after the failure has
    /// been made durable by a later successful flush.
    pub fn flush_completed(&mut self, op: OpId, status: Status) {
        self.assert_running();
        let issued = self
            .flushes
            .remove(&op)
            .unwrap_or_else(|| panic!("{op} completed but is not an issued flush"));
        let now = self.tick();
        if status == Status::Ok {
            self.durable_point = self.durable_point.max(issued);
            self.settle_lost(issued);
            return;
        }
        self.cast_doubt(now);
    }

    /// A flush (or a FUA request) failed at `now`: every sector written
    /// since the durable point, and not made durable by a FUA write since,
    /// may from now on also read any value a crash at this moment could
    /// leave there (see [`Model::flush_completed`]).
    fn cast_doubt(&mut self, now: Seq) {
        let d = self.durable_point;
        // The history, the bases and the sectors already in doubt are all
        // walked in sector order and the new doubt built as one sorted
        // list: a lookup per written sector in two maps was most of the
        // time a failed flush took.
        let mut old = std::mem::take(&mut self.lost).into_iter().peekable();
        let mut bases = BaseWalk::new(&self.base, 0, u64::MAX);
        let mut doubt = Vec::new();
        for (s, entries) in self.history.iter() {
            if self.book.all(entries).all(|e| e.settled_by(d)) {
                continue;
            }
            while let Some(kept) = old.next_if(|(k, _)| *k < s) {
                doubt.push(kept);
            }
            let unwritten = self.unwritten(s);
            let base = bases.at(s, unwritten);
            let mut lost = old.next_if(|(k, _)| *k == s).map_or(
                Lost {
                    values: Vec::new(),
                    since: now,
                },
                |(_, l)| l,
            );
            lost.since = now;
            // Its doubt begins again: writes issued before now settle
            // nothing.
            self.lost_written.remove(&s);
            history::after_crash(
                base,
                &self.book,
                entries,
                d,
                now,
                unwritten,
                &mut lost.values,
            );
            history::normalise(&mut lost.values);
            doubt.push((s, lost));
        }
        doubt.extend(old);
        // Sorted already: the map is built in one pass.
        self.lost = doubt.into_iter().collect();
    }

    /// A flush issued at `flush_issued` succeeded: a sector a failed flush
    /// left in doubt is certain again once a write issued after that
    /// failure completed before this flush was issued.
    ///
    /// Only sectors in `lost_written` can: a settling write was issued
    /// after the sector's doubt began, and every write issued to a sector
    /// in doubt puts it there. One that is settled, or no longer in
    /// doubt, leaves it.
    fn settle_lost(&mut self, flush_issued: Seq) {
        let (history, lost, book) = (&self.history, &mut self.lost, &self.book);
        self.lost_written.retain(|s| {
            let Some(l) = lost.get(s) else {
                return false;
            };
            let settled = history.get(*s).is_some_and(|entries| {
                book.all(entries)
                    .any(|e| e.issued > l.since && Self::durable_value_write(e, flush_issued))
            });
            if settled {
                lost.remove(s);
            }
            !settled
        });
    }

    /// Whether `e` wrote a value and succeeded before `t`.
    fn durable_value_write(e: &Entry, t: Seq) -> bool {
        matches!(e.put, history::Put::Value(_))
            && matches!(e.completed, Some((c, Status::Ok)) if c < t)
    }

    /// A guest read was issued.
    pub fn read_issued(&mut self, op: OpId, range: SectorRange) {
        self.assert_running();
        self.assert_in_disk(range);
        let issued = self.tick();
        let old = self.reads.insert(op, PendingRead { range, issued });
        assert!(old.is_none(), "{op} issued twice");
    }

    /// A guest read returned an error: nothing to check.
    pub fn read_failed(&mut self, op: OpId) {
        self.assert_running();
        self.reads
            .remove(&op)
            .unwrap_or_else(|| panic!("{op} failed but is not an issued read"));
        self.tick();
    }

    /// A guest read returned `bytes`. Each sector must hold a value that was
    /// settled when the read was issued, or one a write in flight during the
    /// read put there.
    pub fn read_completed(&mut self, op: OpId, bytes: &[u8]) -> Result<(), Vec<Violation>> {
        self.assert_running();
        let r = self
            .reads
            .remove(&op)
            .unwrap_or_else(|| panic!("{op} completed but is not an issued read"));
        let now = self.tick();
        assert_eq!(
            bytes.len() as u64,
            r.range.len * SECTOR_SIZE as u64,
            "{op} returned a buffer of the wrong length"
        );
        let mut violations = Vec::new();
        let mut allowed = Vec::new();
        // As in `check_recovered`: past the backing file, a run of sectors
        // with no base, history or doubt must read as zeroes, and is passed
        // over with a test for zero per sector (three lookups a run, not a
        // sector: the final sweep reads the whole disk).
        let plain_from = self.backing.as_ref().map_or(0, |b| b.sectors);
        let (first, end) = (r.range.start, r.range.start + r.range.len);
        let sector_bytes = |s: u64| {
            let i = (s - first) as usize;
            &bytes[i * SECTOR_SIZE..(i + 1) * SECTOR_SIZE]
        };
        // The three maps are walked in step with the sectors, each once,
        // rather than looked up per sector.
        let mut bases = BaseWalk::new(&self.base, first, end);
        let mut histories = self.history.range(first, end).peekable();
        let mut doubts = self.lost.range(first..end).peekable();
        let mut cur = first;
        while cur < end {
            if cur >= plain_from {
                let next = |k: Option<u64>| k.unwrap_or(end);
                let stop = next(bases.next_sector())
                    .min(next(histories.peek().map(|(k, _)| *k)))
                    .min(next(doubts.peek().map(|(&k, _)| k)));
                let from = cur;
                let (i, stop_i) = ((cur - first) as usize, (stop - first) as usize);
                cur = first + zero_sectors(bytes, i, stop_i) as u64;
                if cur > from {
                    continue;
                }
            }
            let s = cur;
            cur += 1;
            let chunk = sector_bytes(s);
            allowed.clear();
            let unwritten = self.unwritten(s);
            let base = bases.at(s, unwritten);
            let entries = histories.next_if(|(k, _)| *k == s).map(|(_, e)| e);
            match entries {
                Some(entries) => {
                    history::settled(base, &self.book, entries, r.issued, unwritten, &mut allowed);
                    history::pending(&self.book, entries, r.issued, now, unwritten, &mut allowed);
                }
                None => allowed.push(base),
            }
            if let Some((_, lost)) = doubts.next_if(|(&k, _)| k == s) {
                // A write issued after the failure and done before this
                // read was issued hides the rolled-back values from it: only
                // another failed flush could drop that write, and that one
                // recomputes the doubt.
                let hidden = entries.is_some_and(|entries| {
                    self.book
                        .all(entries)
                        .any(|e| e.issued > lost.since && Self::durable_value_write(e, r.issued))
                });
                if !hidden {
                    allowed.extend_from_slice(&lost.values);
                }
            }
            check_sector(s, chunk, &mut allowed, When::Read { op }, &mut violations);
        }
        self.stats.reads += 1;
        self.stats.read_sectors += r.range.len;
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }

    /// A read issued and completed with nothing else happening in between.
    pub fn check_read(
        &mut self,
        op: OpId,
        first_sector: u64,
        bytes: &[u8],
    ) -> Result<(), Vec<Violation>> {
        let len = (bytes.len() / SECTOR_SIZE) as u64;
        self.read_issued(op, SectorRange::new(first_sector, len));
        self.read_completed(op, bytes)
    }

    /// The machine crashed. Requests still in flight never complete. Until
    /// [`Model::finish_recovery`], the model only checks the reopened disk.
    ///
    /// Each sector may then hold its durable value (what the writes done
    /// before the last successful flush was issued left there, or the
    /// epoch's base when no flush made anything durable) or the value of
    /// any write not done before that flush was issued, except that a
    /// successful FUA write is durable whenever it completed: what was
    /// done before it was issued is gone ([`history::after_crash`]).
    pub fn crash(&mut self) {
        self.assert_running();
        let d = self.durable_point;
        let mut allowed = Vec::with_capacity(self.history.len());
        let mut all = Vec::new();
        let mut own = Vec::new();
        let mut bases = BaseWalk::new(&self.base, 0, u64::MAX);
        for (s, entries) in self.history.iter() {
            let unwritten = self.unwritten(s);
            let base = bases.at(s, unwritten);
            own.clear();
            history::after_crash(base, &self.book, entries, d, Seq::MAX, unwritten, &mut own);
            if let Some(lost) = self.lost.get(&s) {
                own.extend_from_slice(&lost.values);
            }
            history::normalise(&mut own);
            let start = all.len();
            all.extend_from_slice(&own);
            allowed.push((s, start..all.len()));
        }
        self.writes.clear();
        self.reads.clear();
        self.flushes.clear();
        self.fua_ranges.clear();
        self.tick();
        self.recovery = Some(Recovery {
            allowed,
            values: all,
            next: 0,
            cursor: 0,
            base: Vec::new(),
        });
        self.stats.crashes += 1;
    }

    /// Checks `bytes`, the reopened disk's sectors from `first_sector` on.
    /// Calls after a crash must cover the disk in order, from sector 0.
    /// Whatever was read becomes the next epoch's base.
    pub fn check_recovered(&mut self, first_sector: u64, bytes: &[u8]) -> Vec<Violation> {
        assert_eq!(
            bytes.len() % SECTOR_SIZE,
            0,
            "recovery read of part of a sector"
        );
        let epoch = self.epoch;
        let count = (bytes.len() / SECTOR_SIZE) as u64;
        let end = first_sector + count;
        let rec = self
            .recovery
            .as_mut()
            .expect("check_recovered without a crash");
        assert_eq!(first_sector, rec.next, "recovery reads must be in order");
        assert!(
            end <= self.sectors,
            "recovery read past the end of the disk"
        );
        let backing = self.backing.as_ref();
        // Both walked in step with the sectors: each holds sectors in order.
        let mut bases = BaseWalk::new(&self.base, first_sector, end);
        let in_range = rec.allowed_in(end).len();
        let mut histories = rec.allowed[rec.cursor..rec.cursor + in_range]
            .iter()
            .peekable();
        let mut violations = Vec::new();
        let mut allowed = Vec::new();
        // Past the backing file, a sector the model holds nothing for must
        // read as zeroes and then needs no record: a run of those up to the
        // next sector with a base or a history is passed over with a test
        // for zero per sector, which is all `check_sector` would find.
        let plain_from = backing.map_or(0, |b| b.sectors);
        let sector_bytes = |i: usize| &bytes[i * SECTOR_SIZE..(i + 1) * SECTOR_SIZE];
        let mut i = 0;
        while i < count as usize {
            let s = first_sector + i as u64;
            if s >= plain_from {
                let next_base = bases.next_sector().unwrap_or(end);
                let next_history = histories.peek().map_or(end, |(h, _)| *h);
                let stop = (next_base.min(next_history) - first_sector) as usize;
                let from = i;
                i = zero_sectors(bytes, i, stop);
                if i > from {
                    continue;
                }
            }
            let chunk = sector_bytes(i);
            i += 1;
            let unwritten = unwritten(backing, s);
            let base = bases.at(s, unwritten);
            allowed.clear();
            match histories.next_if(|(h, _)| *h == s) {
                Some((_, values)) => allowed.extend_from_slice(&rec.values[values.clone()]),
                None => allowed.push(base),
            }
            let observed = check_sector(
                s,
                chunk,
                &mut allowed,
                When::Recovery { epoch },
                &mut violations,
            );
            // A sector holding another sector's data stays wrong; calling
            // it garbage keeps the next epoch from reporting it again.
            let value = observed.unwrap_or(Value::Garbage);
            if value != unwritten {
                rec.base.push((s, value));
            }
        }
        rec.cursor += in_range;
        rec.next = end;
        self.stats.recovered_sectors += count;
        violations
    }

    /// Passes over `sectors` sectors from `first_sector` in the recovery
    /// check without reading them: a sparse sweep of a large disk skips
    /// what the model holds no record of. Panics if any of them has one (a
    /// value this epoch may have changed, or a base other than the
    /// unwritten value), as those must be read; the skipped sectors keep
    /// their unwritten value in the next epoch.
    pub fn skip_recovered(&mut self, first_sector: u64, sectors: u64) {
        let end = first_sector + sectors;
        assert!(
            BaseWalk::new(&self.base, first_sector, end)
                .next_sector()
                .is_none(),
            "recovery skips a sector with a base value"
        );
        let rec = self
            .recovery
            .as_mut()
            .expect("skip_recovered without a crash");
        assert_eq!(first_sector, rec.next, "recovery reads must be in order");
        assert!(
            end <= self.sectors,
            "recovery skip past the end of the disk"
        );
        assert!(
            rec.allowed_in(end).is_empty(),
            "recovery skips a sector written this epoch"
        );
        rec.next = end;
    }

    /// Passes over the `sectors` sectors from `first_sector` in the
    /// recovery check as past the end of the disk (a resize shrank it):
    /// nothing reads them, and whatever they held is forgotten, so that
    /// they hold their unwritten value in the next epoch, which a grow
    /// that brings them back changes as it says.
    pub fn forget_recovered(&mut self, first_sector: u64, sectors: u64) {
        let end = first_sector + sectors;
        let rec = self
            .recovery
            .as_mut()
            .expect("forget_recovered without a crash");
        assert_eq!(first_sector, rec.next, "recovery reads must be in order");
        assert!(
            end <= self.sectors,
            "recovery skip past the end of the disk"
        );
        rec.cursor += rec.allowed_in(end).len();
        rec.next = end;
    }

    /// Every sector the model holds a record of (a base value, a history
    /// this epoch, a value a failed flush may have lost, or one allowed
    /// after the crash being checked), in order, each once: the sectors a
    /// sparse sweep must read. As many as were written, whatever the disk's
    /// size.
    pub fn recorded_sectors(&self) -> BTreeSet<u64> {
        let mut out: BTreeSet<u64> = self.base.iter().map(|(s, _)| *s).collect();
        out.extend(self.history.iter().map(|(s, _)| s));
        out.extend(self.lost.keys().copied());
        if let Some(rec) = &self.recovery {
            out.extend(rec.allowed.iter().map(|(s, _)| *s));
        }
        out
    }

    /// Sector records held (base values, per-sector histories, allowed
    /// values of a recovery and lost values): what the model's memory
    /// grows with.
    pub fn records(&self) -> usize {
        self.base.len()
            + self.history.len()
            + self.lost.len()
            + self
                .recovery
                .as_ref()
                .map_or(0, |r| r.allowed.len() + r.base.len())
    }

    /// Ends the recovery check and starts the next epoch.
    pub fn finish_recovery(&mut self) {
        let rec = self
            .recovery
            .take()
            .expect("finish_recovery without a crash");
        assert_eq!(
            rec.next, self.sectors,
            "recovery did not read the whole disk"
        );
        // Collected in sector order, each sector once.
        debug_assert!(rec.base.windows(2).all(|w| w[0].0 < w[1].0));
        self.base = rec.base;
        self.history.clear();
        self.book.clear();
        self.lost.clear();
        self.lost_written.clear();
        self.durable_point = self.tick();
        self.epoch += 1;
    }

    /// [`Model::check_recovered`] of the whole disk, then
    /// [`Model::finish_recovery`].
    pub fn after_crash_check(&mut self, disk: &[u8]) -> Result<(), Vec<Violation>> {
        assert_eq!(
            disk.len() as u64,
            self.sectors * SECTOR_SIZE as u64,
            "the recovery read is not the whole disk"
        );
        let violations = self.check_recovered(0, disk);
        self.finish_recovery();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}

/// The base values of a span of sectors, walked forward: every caller
/// visits sectors in ascending order, so each lookup moves on from the
/// last instead of searching.
struct BaseWalk<'a>(&'a [(u64, Value)]);

impl<'a> BaseWalk<'a> {
    /// Over sectors `[first, end)` of `base` (sorted by sector).
    fn new(base: &'a [(u64, Value)], first: u64, end: u64) -> Self {
        let from = base.partition_point(|(s, _)| *s < first);
        let to = from + base[from..].partition_point(|(s, _)| *s < end);
        BaseWalk(&base[from..to])
    }

    /// The next sector with a base value, if one is left.
    fn next_sector(&self) -> Option<u64> {
        self.0.first().map(|&(s, _)| s)
    }

    /// The base value of `s` (no lower than any sector asked for before),
    /// or `unwritten` where it has none. Sectors passed over are left
    /// behind.
    fn at(&mut self, s: u64, unwritten: Value) -> Value {
        while let [(b, v), rest @ ..] = self.0 {
            if *b > s {
                break;
            }
            self.0 = rest;
            if *b == s {
                return *v;
            }
        }
        unwritten
    }
}

/// The end of the run of all-zero sectors of `bytes` from sector index
/// `from`, at most `stop`: the first index in `from..stop` that holds a
/// byte other than zero, or `stop`. The fast path of the whole-disk
/// checks (`Model::read_completed`, `Model::check_recovered`) over
/// sectors the model holds nothing for.
fn zero_sectors(bytes: &[u8], from: usize, stop: usize) -> usize {
    (from..stop)
        .find(|&i| !is_zero(&bytes[i * SECTOR_SIZE..(i + 1) * SECTOR_SIZE]))
        .unwrap_or(stop)
}

/// What `sector` reads when the image does not cover it: the backing
/// file's data where it has some, else zeroes ([`Model::unwritten`]; a
/// free function so that a loop holding the recovery state mutably can
/// call it).
fn unwritten(backing: Option<&BackingData>, sector: u64) -> Value {
    match backing {
        Some(b) if b.has_data(sector) => Value::Backing,
        _ => Value::Zero,
    }
}

/// Decodes one sector and checks it against `allowed`; returns the value it
/// stands for (None when it is data meant for another sector).
fn check_sector(
    sector: u64,
    bytes: &[u8],
    allowed: &mut Vec<Value>,
    when: When,
    violations: &mut Vec<Violation>,
) -> Option<Value> {
    let observed = decode(bytes);
    if allowed.contains(&Value::Unspecified) {
        // It stays anything until written again, in the next epoch too.
        return Some(Value::Unspecified);
    }
    let value = Value::of_content(observed, sector);
    if !value.is_some_and(|v| allowed.contains(&v)) {
        history::normalise(allowed);
        violations.push(Violation {
            sector,
            when,
            observed,
            allowed: allowed.clone(),
            got: bytes.to_vec(),
        });
    }
    value
}
