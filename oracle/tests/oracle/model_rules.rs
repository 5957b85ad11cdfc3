//! The model's rules, on hand-built event sequences: reads during flight,
//! failed writes, discards, and what a crash may leave behind.

use oracle::data::{
    fill_backing, fill_written, BackingData, BackingPattern, Content, WriteId, SECTOR_SIZE,
};
use oracle::model::{
    summarize, DiscardContract, Model, OpId, SectorRange, Status, Value, Violation, When, WriteKind,
};

pub(crate) const DISK: u64 = 64;

/// What a sector may be made to hold in a test.
#[derive(Clone, Copy)]
pub(crate) enum S {
    Zero,
    W(u64),
    /// Write `id`'s data meant for another sector.
    Misplaced(u64, u64),
    Backing,
    Junk,
}

fn sectors(first: u64, contents: &[S]) -> Vec<u8> {
    let mut buf = vec![0u8; contents.len() * SECTOR_SIZE];
    for (i, (c, chunk)) in contents
        .iter()
        .zip(buf.chunks_exact_mut(SECTOR_SIZE))
        .enumerate()
    {
        let s = first + i as u64;
        match *c {
            S::Zero => {}
            S::W(id) => fill_written(chunk, WriteId(id), s),
            S::Misplaced(id, other) => fill_written(chunk, WriteId(id), other),
            S::Backing => fill_backing(chunk, s),
            S::Junk => chunk.fill(0xa5),
        }
    }
    buf
}

/// The whole disk: `contents` at `first`, `rest` everywhere else.
fn disk(first: u64, contents: &[S], rest: S) -> Vec<u8> {
    let mut all = vec![rest; DISK as usize];
    all[first as usize..first as usize + contents.len()].copy_from_slice(contents);
    sectors(0, &all)
}

pub(crate) struct Run {
    pub(crate) m: Model,
    next: u64,
}

impl Run {
    pub(crate) fn new() -> Run {
        Run::with_backing(None)
    }

    fn with_backing(b: Option<BackingData>) -> Run {
        Run {
            m: Model::new(DISK, b),
            next: 1000,
        }
    }

    pub(crate) fn op(&mut self) -> OpId {
        self.next += 1;
        OpId(self.next)
    }

    pub(crate) fn issue(&mut self, start: u64, len: u64, kind: WriteKind) -> OpId {
        let op = self.op();
        self.m.write_issued(op, SectorRange::new(start, len), kind);
        op
    }

    pub(crate) fn write(&mut self, id: u64, start: u64, len: u64) {
        let op = self.issue(start, len, WriteKind::Data(WriteId(id)));
        self.m.write_completed(op, Status::Ok);
    }

    pub(crate) fn flush(&mut self) {
        let op = self.op();
        self.m.flush_issued(op);
        self.m.flush_completed(op, Status::Ok);
    }

    pub(crate) fn read(&mut self, first: u64, contents: &[S]) -> Result<(), Vec<Violation>> {
        let op = self.op();
        self.m.check_read(op, first, &sectors(first, contents))
    }

    pub(crate) fn recover(
        &mut self,
        first: u64,
        contents: &[S],
        rest: S,
    ) -> Result<(), Vec<Violation>> {
        self.m.crash();
        self.m.after_crash_check(&disk(first, contents, rest))
    }
}

pub(crate) fn only(r: Result<(), Vec<Violation>>) -> Violation {
    let mut v = r.expect_err("the model should have found a violation");
    assert_eq!(v.len(), 1, "{v:?}");
    v.pop().unwrap()
}

#[test]
fn fresh_disk_reads_zero_and_nothing_else() {
    let mut r = Run::new();
    r.read(0, &[S::Zero, S::Zero]).unwrap();
    let v = only(r.read(0, &[S::Zero, S::Junk]));
    assert_eq!(v.sector, 1);
    assert_eq!(v.allowed, vec![Value::Zero]);
    assert!(matches!(v.observed, Content::Garbage(_)));
    assert!(matches!(v.when, When::Read { .. }));
    assert!(v.to_string().contains("guest sector 1"), "{v}");
}

#[test]
fn completed_write_is_the_only_value() {
    let mut r = Run::new();
    r.write(1, 4, 2);
    r.read(4, &[S::W(1), S::W(1)]).unwrap();
    r.write(2, 5, 1);
    r.read(4, &[S::W(1), S::W(2)]).unwrap();
    let v = only(r.read(5, &[S::W(1)]));
    assert_eq!(v.allowed, vec![Value::Data(WriteId(2))]);
    assert_eq!(
        v.observed,
        Content::Written {
            id: WriteId(1),
            sector: 5
        }
    );
}

#[test]
fn misplaced_data_is_a_violation() {
    let mut r = Run::new();
    r.write(1, 0, 4);
    let v = only(r.read(2, &[S::Misplaced(1, 3)]));
    assert_eq!(v.sector, 2);
    assert_eq!(v.allowed, vec![Value::Data(WriteId(1))]);
}

#[test]
fn read_during_a_write_sees_old_or_new() {
    let mut r = Run::new();
    r.write(1, 0, 2);
    let w = r.issue(0, 2, WriteKind::Data(WriteId(2)));
    r.read(0, &[S::W(1), S::W(2)]).unwrap();
    let v = only(r.read(0, &[S::W(1), S::Zero]));
    assert_eq!(
        v.allowed,
        vec![Value::Data(WriteId(1)), Value::Data(WriteId(2))]
    );
    r.m.write_completed(w, Status::Ok);
    only(r.read(0, &[S::W(2), S::W(1)]));
}

#[test]
fn write_issued_during_a_read_may_be_seen() {
    let mut r = Run::new();
    let rd = r.op();
    r.m.read_issued(rd, SectorRange::new(0, 1));
    let w = r.issue(0, 1, WriteKind::Data(WriteId(7)));
    r.m.read_completed(rd, &sectors(0, &[S::W(7)])).unwrap();
    r.m.write_completed(w, Status::Ok);
    // A write that completes during a read may also be missed by it.
    let rd = r.op();
    r.m.read_issued(rd, SectorRange::new(0, 1));
    r.write(8, 0, 1);
    r.m.read_completed(rd, &sectors(0, &[S::W(7)])).unwrap();
    // A write issued after the read returned may not be seen by it.
    only(r.read(0, &[S::W(7)]));
}

#[test]
fn overlapping_writes_may_land_in_either_order() {
    let mut r = Run::new();
    let a = r.issue(0, 1, WriteKind::Data(WriteId(1)));
    let b = r.issue(0, 1, WriteKind::Data(WriteId(2)));
    r.m.write_completed(b, Status::Ok);
    r.m.write_completed(a, Status::Ok);
    r.read(0, &[S::W(1)]).unwrap();
    r.read(0, &[S::W(2)]).unwrap();
    // A write issued after both completed settles it.
    r.write(3, 0, 1);
    only(r.read(0, &[S::W(2)]));
}

#[test]
fn failed_write_leaves_old_or_new_until_overwritten() {
    let mut r = Run::new();
    r.write(1, 0, 2);
    let w = r.issue(0, 2, WriteKind::Data(WriteId(2)));
    r.m.write_completed(w, Status::Failed);
    r.read(0, &[S::W(1), S::W(2)]).unwrap();
    r.read(0, &[S::W(2), S::W(1)]).unwrap();
    only(r.read(0, &[S::Zero, S::W(1)]));
    r.write(3, 0, 1);
    only(r.read(0, &[S::W(2)]));
    r.read(1, &[S::W(2)]).unwrap();
}

#[test]
fn write_zeroes_reads_zero_and_discard_reads_old_zero_or_backing() {
    let backing = BackingData {
        sectors: DISK,
        pattern: BackingPattern::Full,
    };
    let mut r = Run::with_backing(Some(backing));
    r.read(0, &[S::Backing]).unwrap();
    r.write(1, 0, 3);
    let z = r.issue(0, 1, WriteKind::Zero);
    r.m.write_completed(z, Status::Ok);
    r.read(0, &[S::Zero]).unwrap();
    only(r.read(0, &[S::Backing]));
    let d = r.issue(1, 2, WriteKind::Discard);
    r.m.write_completed(d, Status::Ok);
    r.read(1, &[S::W(1), S::Zero]).unwrap();
    r.read(1, &[S::Backing, S::Backing]).unwrap();
    only(r.read(1, &[S::Junk, S::Backing]));
}

#[test]
fn discard_without_backing_allows_old_or_zero() {
    let mut r = Run::new();
    r.write(1, 0, 1);
    let d = r.issue(0, 1, WriteKind::Discard);
    r.m.write_completed(d, Status::Ok);
    r.read(0, &[S::W(1)]).unwrap();
    r.read(0, &[S::Zero]).unwrap();
    let v = only(r.read(0, &[S::Backing]));
    assert_eq!(v.allowed, vec![Value::Zero, Value::Data(WriteId(1))]);
}

/// The shape QEMU makes (a discarded cluster reused by a later write to
/// another guest offset before the unlinking L2 change is durable): after
/// the crash the discarded sector holds that write's data, meant for
/// sector 9. The engine's contract calls it a violation; the block
/// layer's contract (external drivers) allows anything until the sector
/// is written again, in the next epoch too, and only there.
#[test]
fn discard_contract_unspecified_allows_anything_until_rewritten() {
    let crash_after_reuse = |contract| {
        let mut r = Run::new();
        r.m = Model::new(DISK, None).with_discard_contract(contract);
        r.write(1, 0, 1);
        r.flush();
        let d = r.issue(0, 1, WriteKind::Discard);
        r.m.write_completed(d, Status::Ok);
        r.write(2, 9, 1);
        r.recover(0, &[S::Misplaced(2, 9)], S::Zero)
    };
    let v = only(crash_after_reuse(DiscardContract::Advisory));
    assert_eq!(v.allowed, vec![Value::Zero, Value::Data(WriteId(1))]);

    let mut r = Run::new();
    r.m = Model::new(DISK, None).with_discard_contract(DiscardContract::Unspecified);
    r.write(1, 0, 2);
    r.flush();
    let d = r.issue(0, 1, WriteKind::Discard);
    r.m.write_completed(d, Status::Ok);
    r.read(0, &[S::Junk]).unwrap();
    r.read(0, &[S::Misplaced(1, 1)]).unwrap();
    // Sector 1 was not discarded: still exact.
    only(r.read(1, &[S::Zero]));
    r.recover(0, &[S::Misplaced(1, 1), S::W(1)], S::Zero)
        .unwrap();
    // Still anything in the next epoch, until written again.
    r.read(0, &[S::Junk]).unwrap();
    r.write(3, 0, 1);
    let v = only(r.read(0, &[S::Junk]));
    assert_eq!(v.allowed, vec![Value::Data(WriteId(3))]);
}

#[test]
fn crash_keeps_flushed_writes_exactly() {
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.flush();
    r.recover(0, &[S::W(1), S::W(1)], S::Zero).unwrap();
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.flush();
    let v = only(r.recover(0, &[S::W(1), S::Zero], S::Zero));
    assert_eq!(v.sector, 1);
    assert_eq!(v.when, When::Recovery { epoch: 0 });
    assert_eq!(v.allowed, vec![Value::Data(WriteId(1))]);
}

#[test]
fn untouched_sectors_must_keep_their_value_after_a_crash() {
    let mut r = Run::new();
    r.write(1, 0, 1);
    let v = only(r.recover(0, &[S::Zero, S::Junk], S::Zero));
    assert_eq!(v.sector, 1);
    assert_eq!(v.allowed, vec![Value::Zero]);
}

#[test]
fn lost_backing_data_is_lost_data() {
    let backing = BackingData {
        sectors: DISK,
        pattern: BackingPattern::Stripes { data: 1, hole: 1 },
    };
    let mut r = Run::with_backing(Some(backing));
    r.write(1, 0, 1);
    r.flush();
    // Sector 2 holds backing data; sector 3 is a hole of the backing file.
    let mut contents = vec![S::W(1), S::Zero, S::Backing, S::Zero];
    contents.extend((4..DISK).map(|s| if s % 2 == 0 { S::Backing } else { S::Zero }));
    r.recover(0, &contents, S::Zero).unwrap();
    let mut r = Run::with_backing(Some(backing));
    r.write(1, 0, 1);
    r.flush();
    contents[2] = S::Zero;
    let v = only(r.recover(0, &contents, S::Zero));
    assert_eq!((v.sector, v.allowed), (2, vec![Value::Backing]));
}

#[test]
fn unflushed_writes_may_or_may_not_survive() {
    for survivor in [S::Zero, S::W(1)] {
        let mut r = Run::new();
        r.write(1, 0, 1);
        r.recover(0, &[survivor], S::Zero).unwrap();
    }
    let mut r = Run::new();
    r.write(1, 0, 1);
    r.flush();
    r.write(2, 0, 1);
    r.write(3, 0, 1);
    // Any value written since the flush, or the flushed one; nothing older.
    for survivor in [S::W(1), S::W(2), S::W(3)] {
        let mut r2 = Run::new();
        r2.write(1, 0, 1);
        r2.flush();
        r2.write(2, 0, 1);
        r2.write(3, 0, 1);
        r2.recover(0, &[survivor], S::Zero).unwrap();
    }
    let v = only(r.recover(0, &[S::Zero], S::Zero));
    assert_eq!(
        v.allowed,
        vec![
            Value::Data(WriteId(1)),
            Value::Data(WriteId(2)),
            Value::Data(WriteId(3))
        ]
    );
}

#[test]
fn in_flight_writes_and_flushes_at_a_crash() {
    let mut r = Run::new();
    r.write(1, 0, 1);
    // The flush is issued while write 2 is in flight: it does not cover it.
    let w = r.issue(1, 1, WriteKind::Data(WriteId(2)));
    let f = r.op();
    r.m.flush_issued(f);
    r.m.write_completed(w, Status::Ok);
    r.m.flush_completed(f, Status::Ok);
    // A flush still in flight at the crash makes nothing durable.
    r.write(3, 2, 1);
    let f2 = r.op();
    r.m.flush_issued(f2);
    let _in_flight = r.issue(3, 1, WriteKind::Data(WriteId(4)));
    r.recover(0, &[S::W(1), S::Zero, S::Zero, S::W(4)], S::Zero)
        .unwrap();

    let mut r = Run::new();
    r.write(1, 0, 1);
    let f = r.op();
    r.m.flush_issued(f);
    r.m.flush_completed(f, Status::Failed);
    // A failed flush makes nothing durable either.
    r.recover(0, &[S::Zero], S::Zero).unwrap();
}

#[test]
fn flush_covers_only_writes_done_before_it_was_issued() {
    let mut r = Run::new();
    r.write(1, 0, 1);
    let f = r.op();
    r.m.flush_issued(f);
    r.write(2, 1, 1);
    r.m.flush_completed(f, Status::Ok);
    // Sector 1's write completed after the flush was issued: it may be lost.
    r.recover(0, &[S::W(1), S::Zero], S::Zero).unwrap();
}

#[test]
fn failed_write_before_a_flush_allows_old_or_new_after_a_crash() {
    for survivor in [S::W(1), S::W(2)] {
        let mut r = Run::new();
        r.write(1, 0, 1);
        let w = r.issue(0, 1, WriteKind::Data(WriteId(2)));
        r.m.write_completed(w, Status::Failed);
        r.flush();
        r.recover(0, &[survivor], S::Zero).unwrap();
    }
}

#[test]
fn epochs_start_from_what_recovery_read() {
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.write(2, 0, 2);
    // Epoch 0 ends with write 1 in sector 0 and write 2 in sector 1.
    r.recover(0, &[S::W(1), S::W(2)], S::Zero).unwrap();
    assert_eq!(r.m.epoch(), 1);
    r.read(0, &[S::W(1), S::W(2)]).unwrap();
    only(r.read(0, &[S::W(2)]));
    // Epoch 1: nothing written, so the disk must come back as it was.
    let v = only(r.recover(0, &[S::W(2), S::W(2)], S::Zero));
    assert_eq!(v.when, When::Recovery { epoch: 1 });
    assert_eq!(v.allowed, vec![Value::Data(WriteId(1))]);
    // Epoch 2 starts from what was read, even when it was wrong.
    r.read(0, &[S::W(2), S::W(2)]).unwrap();
    r.write(3, 5, 1);
    r.flush();
    r.recover(
        0,
        &[S::W(2), S::W(2), S::Zero, S::Zero, S::Zero, S::W(3)],
        S::Zero,
    )
    .unwrap();
    assert_eq!(r.m.stats().crashes, 3);
    assert_eq!(r.m.stats().reads, 3);
    assert_eq!(r.m.stats().read_sectors, 5);
    assert_eq!(r.m.stats().recovered_sectors, 3 * DISK);
}

#[test]
fn long_histories_are_compacted_without_changing_answers() {
    let mut r = Run::new();
    for id in 1..=200 {
        r.write(id, 0, 4);
        if id % 10 == 0 {
            r.flush();
        }
    }
    r.write(201, 0, 1);
    r.read(0, &[S::W(201), S::W(200)]).unwrap();
    only(r.read(0, &[S::W(200)]));
    only(r.read(1, &[S::W(199)]));
    // Flushed at write 200; 201 came later.
    r.recover(0, &[S::W(200), S::W(200), S::W(200), S::W(200)], S::Zero)
        .unwrap();
}

#[test]
fn violations_summarize_into_runs() {
    let mut r = Run::new();
    r.write(1, 0, 8);
    r.flush();
    // Sectors 0..4 lost (zeroes), 4 garbage, 5..8 fine, the rest fine.
    let contents = [
        S::Zero,
        S::Zero,
        S::Zero,
        S::Zero,
        S::Junk,
        S::W(1),
        S::W(1),
        S::W(1),
    ];
    let v = r.recover(0, &contents, S::Zero).unwrap_err();
    assert_eq!(v.len(), 5);
    let lines = summarize(&v, 10);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].contains("guest sector 0 ") && lines[0].contains("next 3 sectors"));
    assert!(lines[1].contains("guest sector 4 ") && lines[1].contains("garbage"));
    let capped = summarize(&v, 1);
    assert_eq!(capped.len(), 2);
    assert!(capped[1].contains("1 more"), "{capped:?}");
}

impl Run {
    pub(crate) fn failed_flush(&mut self) {
        let op = self.op();
        self.m.flush_issued(op);
        self.m.flush_completed(op, Status::Failed);
    }
}

#[test]
fn failed_flush_may_roll_back_unflushed_writes() {
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.flush();
    r.write(2, 0, 1);
    // Before the failure, sector 0 holds write 2 and nothing else.
    only(r.read(0, &[S::W(1)]));
    r.failed_flush();
    // Afterwards it may have rolled back to the durable write 1, or kept 2;
    // sector 1, not written since the durable point, is still certain.
    r.read(0, &[S::W(1), S::W(1)]).unwrap();
    r.read(0, &[S::W(2), S::W(1)]).unwrap();
    let v = only(r.read(0, &[S::Zero, S::W(1)]));
    assert_eq!(
        v.allowed,
        vec![Value::Data(WriteId(1)), Value::Data(WriteId(2))]
    );
    only(r.read(1, &[S::Zero]));
    // A later successful flush does not bring the dropped write back: the
    // rolled-back value stays allowed, also after a crash.
    r.flush();
    r.read(0, &[S::W(1)]).unwrap();
    r.recover(0, &[S::W(1), S::W(1)], S::Zero).unwrap();
}

#[test]
fn doubt_ends_when_a_later_write_is_made_durable() {
    // Writes 1 (durable), 2 (then a failed flush), 3.
    let three_writes = || {
        let mut r = Run::new();
        r.write(1, 0, 1);
        r.flush();
        r.write(2, 0, 1);
        r.failed_flush();
        r.write(3, 0, 1);
        r
    };
    let mut r = three_writes();
    // Write 3 completed after the failure: a read sees it (only another
    // failed flush could drop it)...
    r.read(0, &[S::W(3)]).unwrap();
    only(r.read(0, &[S::W(1)]));
    // ...but it is not durable yet: a crash may still show the rollback.
    let mut crashed = three_writes();
    crashed.recover(0, &[S::W(1)], S::Zero).unwrap();
    let mut again = three_writes();
    again.failed_flush();
    again.flush();
    // Write 3 was issued before the second failure, which may have
    // dropped it: the doubt stays.
    again.read(0, &[S::W(1)]).unwrap();
    r.flush();
    // Write 3 was issued after the only failure and is durable now.
    let v = only(r.read(0, &[S::W(1)]));
    assert_eq!(v.allowed, vec![Value::Data(WriteId(3))]);
    only(r.recover(0, &[S::W(2)], S::Zero));
}

/// A snapshot applied: each sector gets back what the snapshot held,
/// through `write_issued_values`, durable only once a flush says so.
#[test]
fn an_applied_snapshot_is_each_sectors_old_value_until_durable() {
    let mut r = Run::new();
    r.write(1, 4, 2);
    r.flush();
    // The snapshot held write 1 at 4..6; write 2 came after it.
    r.write(2, 4, 3);
    let op = r.op();
    let back = [
        (4, Value::Data(WriteId(1))),
        (5, Value::Data(WriteId(1))),
        (6, Value::Zero),
    ];
    r.m.write_issued_values(op, None, &back);
    // In flight, either value.
    r.read(4, &[S::W(2), S::W(1), S::W(2)]).unwrap();
    r.m.write_completed(op, Status::Ok);
    r.read(4, &[S::W(1), S::W(1), S::Zero]).unwrap();
    let v = only(r.read(6, &[S::W(2)]));
    assert_eq!(v.allowed, vec![Value::Zero]);
    // Not yet durable: a crash may keep either, sector by sector.
    r.recover(4, &[S::W(2), S::W(1), S::Zero], S::Zero).unwrap();
}

#[test]
fn a_compressed_write_is_data_among_zeroes() {
    let mut r = Run::new();
    let op = r.op();
    let values = Model::compressible_values(WriteId(7), 8, 8);
    assert_eq!(values.len(), 8);
    assert_eq!(values[0], (8, Value::Data(WriteId(7))));
    assert_eq!(values[1], (9, Value::Zero));
    assert_eq!(values[4], (12, Value::Data(WriteId(7))));
    r.m.write_issued_values(op, Some(WriteId(7)), &values);
    r.m.write_completed(op, Status::Ok);
    let mut buf = vec![0u8; 8 * SECTOR_SIZE];
    oracle::data::fill_compressible_buffer(&mut buf, WriteId(7), 8);
    let read = r.op();
    r.m.check_read(read, 8, &buf).unwrap();
    let v = only(r.read(9, &[S::W(7)]));
    assert_eq!(v.allowed, vec![Value::Zero]);
}

/// Runs of sectors the model holds nothing for are passed over with a test
/// for zero (`Model::read_completed`, `Model::check_recovered`): junk in the
/// middle of such a run, right after a recorded sector, and at the very end
/// of the disk is still found, each sector once.
#[test]
fn junk_inside_runs_of_unrecorded_sectors_is_found() {
    let mut r = Run::new();
    r.write(1, 10, 1);
    let mut contents = vec![S::Zero; 20];
    contents[10] = S::W(1);
    contents[5] = S::Junk;
    contents[11] = S::Junk;
    contents[19] = S::Junk;
    let v = r.read(0, &contents).expect_err("junk must be found");
    let at: Vec<u64> = v.iter().map(|v| v.sector).collect();
    assert_eq!(at, vec![5, 11, 19]);

    r.flush();
    let mut contents = vec![S::Zero; DISK as usize];
    contents[10] = S::W(1);
    contents[3] = S::Junk;
    contents[11] = S::Junk;
    contents[DISK as usize - 1] = S::Junk;
    let v = r
        .recover(0, &contents, S::Zero)
        .expect_err("junk must be found");
    let at: Vec<u64> = v.iter().map(|v| v.sector).collect();
    assert_eq!(at, vec![3, 11, DISK - 1]);
}

/// Write 1 durable over sectors 0 and 1, write 2 over both, a failed
/// flush, then a write of per-sector values (a compressed write, a
/// snapshot applied) of write 3 to sector 0 alone, done, and a flush.
fn value_write_after_failed_flush() -> Run {
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.flush();
    r.write(2, 0, 2);
    r.failed_flush();
    let op = r.op();
    r.m.write_issued_values(op, Some(WriteId(3)), &[(0, Value::Data(WriteId(3)))]);
    r.m.write_completed(op, Status::Ok);
    r.flush();
    r
}

/// Doubt cast by a failed flush also ends with a write of per-sector
/// values made durable, and only for the sectors it wrote: after a crash,
/// sector 0 holds write 3 and nothing else, and sector 1 may still show
/// the rollback to write 1.
#[test]
fn doubt_ends_when_a_later_value_write_is_made_durable() {
    let mut r = value_write_after_failed_flush();
    let v = only(r.recover(0, &[S::W(1), S::W(1)], S::Zero));
    assert_eq!((v.sector, v.allowed), (0, vec![Value::Data(WriteId(3))]));
    let mut r = value_write_after_failed_flush();
    r.recover(0, &[S::W(3), S::W(1)], S::Zero).unwrap();
}
