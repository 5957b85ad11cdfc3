//! The unit tests of `engine::dev::lock`.

use engine::dev::lock::*;
use std::fs::File;

/// The byte ranges QEMU 10.0 holds for each kind of open, as
/// `/proc/locks` shows them for qemu-io (and what this module must
/// hold to match): bytes locked = 100+perm bits, 200+unshared bits.
#[test]
fn requests_match_what_qemu_locks() {
    let bytes = |r: LockRequest| {
        let mut v: Vec<u64> = r.perm.each().map(|(i, _)| PERM_BASE + i).collect();
        v.extend(r.shared.complement().each().map(|(i, _)| SHARED_BASE + i));
        v
    };
    assert_eq!(
        bytes(LockRequest::qcow2_file(false, false)),
        [100, 101, 103, 201, 203]
    );
    assert_eq!(bytes(LockRequest::qcow2_file(true, false)), [100, 201, 203]);
    assert_eq!(bytes(LockRequest::qcow2_file(true, true)), [100]);
    assert_eq!(
        bytes(LockRequest::data_file(false, false)),
        [100, 101, 103, 203]
    );
    assert_eq!(bytes(LockRequest::data_file(true, false)), [100, 203]);
    assert_eq!(bytes(LockRequest::data_file(true, true)), [100]);
    assert_eq!(bytes(LockRequest::raw_file(false)), [100, 101]);
    assert_eq!(bytes(LockRequest::raw_file(true)), [100]);
    assert_eq!(bytes(LockRequest::create()), [101, 103, 203]);
}

fn open(path: &std::path::Path) -> File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// Two descriptions of one file in one process conflict exactly as two
/// processes would (OFD locks are per description, not per process).
#[test]
fn writers_exclude_each_other_and_readers_follow_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let (a, b, c) = (open(&path), open(&path), open(&path));
    let mut ha = Held::default();
    apply(&a, &path, &mut ha, LockRequest::qcow2_file(false, false)).unwrap();

    let mut hb = Held::default();
    let err = apply(&b, &path, &mut hb, LockRequest::qcow2_file(false, false)).unwrap_err();
    assert!(
        matches!(err, LockError::Conflict { perm, shared: false, .. } if perm == Perms::WRITE),
        "{err:?}"
    );
    assert_eq!(hb, Held::default(), "a refused open keeps no lock");
    let err = apply(&b, &path, &mut hb, LockRequest::qcow2_file(true, false)).unwrap_err();
    assert!(
        matches!(err, LockError::Conflict { perm, shared: true, .. } if perm == Perms::WRITE),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains("shared \"write\" lock"), "{msg}");
    // Force share gets in, and blocks nobody afterwards.
    apply(&b, &path, &mut hb, LockRequest::qcow2_file(true, true)).unwrap();

    // Once the writer lowers itself to a reader, a second reader gets
    // in but a writer still does not.
    apply(&a, &path, &mut ha, LockRequest::qcow2_file(true, false)).unwrap();
    let mut hc = Held::default();
    apply(&c, &path, &mut hc, LockRequest::qcow2_file(true, false)).unwrap();
    let mut hc2 = Held::default();
    let d = open(&path);
    let err = apply(&d, &path, &mut hc2, LockRequest::qcow2_file(false, false)).unwrap_err();
    assert!(
        matches!(err, LockError::Conflict { shared: false, .. }),
        "{err:?}"
    );
    // Closing the descriptions drops their locks.
    drop((a, c));
    apply(&d, &path, &mut hc2, LockRequest::qcow2_file(false, false)).unwrap();
}

#[test]
fn create_refuses_a_file_in_use_by_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"x").unwrap();
    let (a, b) = (open(&path), open(&path));
    let mut ha = Held::default();
    apply(&a, &path, &mut ha, LockRequest::qcow2_file(true, false)).unwrap();
    let mut hb = Held::default();
    let err = apply(&b, &path, &mut hb, LockRequest::create()).unwrap_err();
    assert!(matches!(err, LockError::Conflict { .. }), "{err:?}");
    // A force-share reader does not stop it (QEMU's create tests only
    // write and resize users and non-sharers).
    apply(&a, &path, &mut ha, LockRequest::qcow2_file(true, true)).unwrap();
    apply(&b, &path, &mut hb, LockRequest::create()).unwrap();
}
