//! The unit tests of `engine::dev::file`.

use std::fs::File;
use std::io;

use engine::dev::file::*;
use engine::dev::{BlockDev, DevError, IoOp};

#[test]
fn os_errors_map_to_device_errors() {
    let e = |n| io::Error::from_raw_os_error(n);
    assert_eq!(
        dev_error(IoOp::Read, 7, 9, e(libc::EIO)),
        DevError::Io {
            op: IoOp::Read,
            offset: 7,
            len: 9
        }
    );
    assert_eq!(
        dev_error(IoOp::Write, 1, 2, e(libc::ENOSPC)),
        DevError::NoSpace {
            op: IoOp::Write,
            offset: 1,
            len: 2
        }
    );
    match dev_error(IoOp::Flush, 0, 0, e(libc::EROFS)) {
        DevError::Os {
            op: IoOp::Flush,
            errno: Some(n),
            message,
            ..
        } => {
            assert_eq!(n, libc::EROFS);
            assert!(message.contains("Read-only"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// A file whose `ftruncate` fails: a memfd sealed against growing,
/// opened by its /proc name. The failed truncate leaves the device's
/// length as the file's.
#[test]
fn a_failed_truncate_leaves_the_length_as_the_files() {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::FileExt;

    let name = std::ffi::CString::new("qcsim-truncate-fails").unwrap();
    // SAFETY: a valid NUL-terminated name; the descriptor returned is
    // owned by `memfd` from here on.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let memfd = unsafe { File::from_raw_fd(fd) };
    memfd.write_all_at(&[7u8; 4096], 0).unwrap();
    // SAFETY: fcntl on a descriptor `memfd` owns.
    let sealed = unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_GROW) };
    assert_eq!(sealed, 0, "F_ADD_SEALS: {}", io::Error::last_os_error());

    let opts = FileOptions {
        threads: 1,
        ..FileOptions::default()
    };
    let dev = FileDev::open(format!("/proc/self/fd/{fd}"), &opts).unwrap();
    assert_eq!(dev.len(), 4096);
    let err = futures::executor::block_on(dev.truncate(1 << 20)).unwrap_err();
    assert!(
        matches!(
            err,
            DevError::Os {
                op: IoOp::Truncate,
                errno: Some(libc::EPERM),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        memfd.metadata().unwrap().len(),
        4096,
        "the file kept its length"
    );
    assert_eq!(dev.len(), 4096, "and so does the device");
    // Shrinking is not sealed: a truncate that succeeds is seen.
    futures::executor::block_on(dev.truncate(512)).unwrap();
    assert_eq!(dev.len(), 512);
    assert_eq!(memfd.metadata().unwrap().len(), 512);
}

#[test]
fn create_new_refuses_a_file_that_exists_and_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"theirs").unwrap();
    let opts = FileOptions {
        threads: 1,
        ..FileOptions::default()
    };
    match FileDev::create_new(&path, &opts) {
        Err(FileOpenError::Open { error, .. }) => {
            assert_eq!(error.kind(), io::ErrorKind::AlreadyExists)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
    let new = dir.path().join("g");
    let dev = FileDev::create_new(&new, &opts).unwrap();
    assert_eq!(dev.len(), 0);
    assert!(new.exists());
}
