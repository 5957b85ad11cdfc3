//! The model's rules for FUA requests: a successful one is durable when it
//! completes, with no flush; one in flight at a crash is any write in
//! flight; a failed one is taken as a failed flush.

use oracle::data::WriteId;
use oracle::model::{OpId, SectorRange, Status, Value, WriteKind};

use super::model_rules::{only, Run, S};

impl Run {
    fn issue_fua(&mut self, start: u64, len: u64, kind: WriteKind) -> OpId {
        let op = self.op();
        self.m
            .write_issued_flagged(op, SectorRange::new(start, len), kind, true);
        op
    }

    fn write_fua(&mut self, id: u64, start: u64, len: u64) {
        let op = self.issue_fua(start, len, WriteKind::Data(WriteId(id)));
        self.m.write_completed(op, Status::Ok);
    }
}

#[test]
fn a_completed_fua_write_survives_a_crash_without_a_flush() {
    let mut r = Run::new();
    r.write_fua(1, 0, 2);
    r.recover(0, &[S::W(1), S::W(1)], S::Zero).unwrap();
    let mut r = Run::new();
    r.write_fua(1, 0, 2);
    let v = only(r.recover(0, &[S::W(1), S::Zero], S::Zero));
    assert_eq!((v.sector, v.allowed), (1, vec![Value::Data(WriteId(1))]));
}

#[test]
fn nothing_done_before_a_fua_write_was_issued_comes_back() {
    let build = || {
        let mut r = Run::new();
        r.write(1, 0, 1);
        r.flush();
        r.write(2, 0, 1);
        r.write_fua(3, 0, 1);
        r
    };
    build().recover(0, &[S::W(3)], S::Zero).unwrap();
    for old in [S::W(1), S::W(2), S::Zero] {
        let v = only(build().recover(0, &[old], S::Zero));
        assert_eq!(v.allowed, vec![Value::Data(WriteId(3))]);
    }
    // A plain write after it may or may not have reached the disk.
    for survivor in [S::W(3), S::W(4)] {
        let mut r = build();
        r.write(4, 0, 1);
        r.recover(0, &[survivor], S::Zero).unwrap();
    }
}

#[test]
fn a_write_still_in_flight_when_a_fua_write_was_issued_may_land_after_it() {
    for survivor in [S::W(2), S::W(3)] {
        let mut r = Run::new();
        r.write(1, 0, 1);
        r.flush();
        let plain = r.issue(0, 1, WriteKind::Data(WriteId(2)));
        r.write_fua(3, 0, 1);
        r.m.write_completed(plain, Status::Ok);
        r.recover(0, &[survivor], S::Zero).unwrap();
    }
    let mut r = Run::new();
    r.write(1, 0, 1);
    r.flush();
    let plain = r.issue(0, 1, WriteKind::Data(WriteId(2)));
    r.write_fua(3, 0, 1);
    r.m.write_completed(plain, Status::Ok);
    let v = only(r.recover(0, &[S::W(1)], S::Zero));
    assert_eq!(
        v.allowed,
        vec![Value::Data(WriteId(2)), Value::Data(WriteId(3))]
    );
}

#[test]
fn a_fua_write_in_flight_at_the_crash_is_any_write_in_flight() {
    for survivor in [S::W(1), S::W(2)] {
        let mut r = Run::new();
        r.write(1, 0, 1);
        r.flush();
        let _in_flight = r.issue_fua(0, 1, WriteKind::Data(WriteId(2)));
        r.recover(0, &[survivor], S::Zero).unwrap();
    }
}

#[test]
fn a_completed_fua_write_zeroes_reads_zeroes_after_a_crash() {
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.flush();
    let z = r.issue_fua(0, 1, WriteKind::Zero);
    r.m.write_completed(z, Status::Ok);
    // Sector 1 keeps the flushed write; sector 0 must read zeroes.
    r.recover(0, &[S::Zero, S::W(1)], S::Zero).unwrap();
    let mut r = Run::new();
    r.write(1, 0, 2);
    r.flush();
    let z = r.issue_fua(0, 1, WriteKind::Zero);
    r.m.write_completed(z, Status::Ok);
    let v = only(r.recover(0, &[S::W(1), S::W(1)], S::Zero));
    assert_eq!((v.sector, v.allowed), (0, vec![Value::Zero]));
}

#[test]
fn a_failed_fua_write_puts_unflushed_writes_in_doubt_like_a_failed_flush() {
    let mut r = Run::new();
    r.write(1, 0, 1);
    r.flush();
    r.write(2, 0, 1);
    // Before the failure sector 0 holds write 2 and nothing else.
    only(r.read(0, &[S::W(1)]));
    let f = r.issue_fua(1, 1, WriteKind::Data(WriteId(3)));
    r.m.write_completed(f, Status::Failed);
    // A driver that emulates FUA with a flush may have given write 2 up.
    r.read(0, &[S::W(1)]).unwrap();
    r.read(0, &[S::W(2)]).unwrap();
    // The failed request's own sector holds its old value or its new one.
    r.read(1, &[S::Zero]).unwrap();
    r.read(1, &[S::W(3)]).unwrap();
}

#[test]
fn a_successful_fua_write_ends_the_doubt_over_its_own_sectors() {
    let build = || {
        let mut r = Run::new();
        r.write(1, 0, 2);
        r.flush();
        r.write(2, 0, 2);
        r.failed_flush();
        r.write_fua(3, 0, 1);
        r
    };
    // Sector 0 was rewritten durably since the failure; sector 1 was not,
    // and may still show the rollback.
    build().recover(0, &[S::W(3), S::W(1)], S::Zero).unwrap();
    let v = only(build().recover(0, &[S::W(1), S::W(2)], S::Zero));
    assert_eq!((v.sector, v.allowed), (0, vec![Value::Data(WriteId(3))]));
    let mut r = build();
    r.read(0, &[S::W(3), S::W(1)]).unwrap();
    let v = only(r.read(0, &[S::W(1), S::W(2)]));
    assert_eq!((v.sector, v.allowed), (0, vec![Value::Data(WriteId(3))]));
}
