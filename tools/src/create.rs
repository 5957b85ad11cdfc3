//! Creating image files so that a command that fails destroys nothing:
//! `qcsim create` and `qcsim convert` empty an existing file only once
//! everything that could refuse the command has been asked.
//!
//! 1. [`check_create_options`]: the engine's own checks of the options (an
//!    L1 table too large for the size, a refcount table too large, ...),
//!    run without any file.
//! 2. [`prepare`]: every file to be written opened and locked as QEMU's
//!    create locks them (so none is one another process uses), the files
//!    told apart by device and inode, and each file that must reach a
//!    length shown to be able to, all before any of them is emptied. A
//!    failure closes them all as they were, and removes those it created.
//!
//! Only then does the caller empty and write them (the engine's create
//! empties its devices first thing); what can fail from there on is I/O.

use std::cell::Cell;
use std::path::{Path, PathBuf};

use engine::dev::{
    BlockDev, DevError, FileDev, FileOpenError, FileOptions, IoOp, LockError, LockRequest,
    WriteFlags, ZeroFlags,
};
use engine::{CreateOptions, Image};

/// Why the files of a create could not be prepared. Nothing was emptied.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error(transparent)]
    File(#[from] FileOpenError),
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Two of the files to write are one file (through a hard link, a
    /// symlink or another spelling).
    #[error("{second} is the same file as {first}: each file created must be a file of its own")]
    SameFile { first: PathBuf, second: PathBuf },
    /// The file system refuses a file this long (ext4's 16 TiB, say). The
    /// file was put back at its old length.
    #[error(
        "{path}: the file cannot be made {length} bytes long ({error}); it was left as it was"
    )]
    Length {
        path: PathBuf,
        length: u64,
        error: DevError,
    },
    #[error("{path}: cannot tell whether the file exists: {error}")]
    Stat {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// A device that fails every request, noting that one was made: the
/// engine's create validates all of its options before its first request,
/// so a create on it that fails without a request failed a check, and one
/// that reached a request passed them all.
#[derive(Default)]
struct DryRun {
    touched: Cell<bool>,
}

impl DryRun {
    fn stop(&self, op: IoOp) -> DevError {
        self.touched.set(true);
        DevError::Os {
            op,
            offset: 0,
            errno: None,
            message: "dry run: the options passed every check".into(),
        }
    }
}

impl BlockDev for DryRun {
    async fn read(&self, _: u64, _: &mut [u8]) -> Result<(), DevError> {
        Err(self.stop(IoOp::Read))
    }

    async fn write(&self, _: u64, _: &[u8], _: WriteFlags) -> Result<(), DevError> {
        Err(self.stop(IoOp::Write))
    }

    async fn write_zeroes(&self, _: u64, _: u64, _: ZeroFlags) -> Result<(), DevError> {
        Err(self.stop(IoOp::WriteZeroes))
    }

    async fn discard(&self, _: u64, _: u64) -> Result<(), DevError> {
        Err(self.stop(IoOp::Discard))
    }

    async fn flush(&self) -> Result<(), DevError> {
        Err(self.stop(IoOp::Flush))
    }

    fn len(&self) -> u64 {
        0
    }

    async fn truncate(&self, _: u64) -> Result<(), DevError> {
        Err(self.stop(IoOp::Truncate))
    }
}

/// Whether the engine would create an image with `o`: the error it would
/// give, found without touching any file (a data file counts as given when
/// `o` names one).
pub async fn check_create_options(o: &CreateOptions) -> Result<(), engine::Error> {
    let (image, data) = (DryRun::default(), DryRun::default());
    let data_dev = o.data_file.is_some().then_some(&data);
    match Image::create_with_data(&image, data_dev, o).await {
        Err(_) if image.touched.get() || data.touched.get() => Ok(()),
        other => other,
    }
}

/// A file a create will write.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    pub path: &'a Path,
    /// The length the file will be given (a raw image or a data file: the
    /// disk size), shown to be possible before anything is emptied.
    pub length: Option<u64>,
}

/// Open (creating those that do not exist) and lock every file of
/// `wanted`, in order, without emptying any; see the module comment. The
/// devices come back in the order of `wanted`, holding QEMU's create locks
/// ([`LockRequest::create`]), their files as they were.
pub async fn prepare(
    wanted: &[Wanted<'_>],
    opts: &FileOptions,
) -> Result<Vec<FileDev>, CreateError> {
    let mut devs: Vec<FileDev> = Vec::new();
    let mut created: Vec<PathBuf> = Vec::new();
    let result = prepare_each(wanted, opts, &mut devs, &mut created).await;
    if result.is_err() {
        // Close before removing, so nothing of ours holds what is removed.
        drop(devs);
        for path in created {
            let _ = std::fs::remove_file(path);
        }
        return result.map(|()| Vec::new());
    }
    Ok(devs)
}

async fn prepare_each(
    wanted: &[Wanted<'_>],
    opts: &FileOptions,
    devs: &mut Vec<FileDev>,
    created: &mut Vec<PathBuf>,
) -> Result<(), CreateError> {
    for w in wanted {
        let exists = w.path.try_exists().map_err(|error| CreateError::Stat {
            path: w.path.to_owned(),
            error,
        })?;
        let mut dev = if exists {
            FileDev::open(w.path, opts)?
        } else {
            // New, so emptying it (as create does after its locks) loses
            // nothing. Had it appeared since the test above, create's
            // locks would still keep it from another user.
            let dev = FileDev::create(w.path, opts)?;
            created.push(w.path.to_owned());
            dev
        };
        // Before locking: the locks of one file opened twice would
        // conflict with each other and be reported as another process.
        if let Some(i) = devs.iter().position(|d| d.file_id() == dev.file_id()) {
            return Err(CreateError::SameFile {
                first: wanted[i].path.to_owned(),
                second: w.path.to_owned(),
            });
        }
        if exists {
            dev.lock(LockRequest::create())?;
        }
        if let Some(length) = w.length {
            check_length(&dev, w.path, length).await?;
        }
        devs.push(dev);
    }
    Ok(())
}

/// Show that the file of `dev` can be `length` bytes long by making it so
/// and putting it back: extending a file only appends zeroes, and cutting
/// them off again restores it. Block devices have the length they have.
async fn check_length(dev: &FileDev, path: &Path, length: u64) -> Result<(), CreateError> {
    let is_file = std::fs::metadata(path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    let before = dev.len();
    if !is_file || length <= before {
        return Ok(());
    }
    let grow = dev.truncate(length).await;
    let restore = dev.truncate(before).await;
    grow.and(restore).map_err(|error| CreateError::Length {
        path: path.to_owned(),
        length,
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;

    #[test]
    fn the_dry_run_finds_what_the_engine_refuses() {
        let ok = CreateOptions {
            size: 1 << 30,
            ..CreateOptions::default()
        };
        block_on(check_create_options(&ok)).unwrap();
        let with_data = CreateOptions {
            data_file: Some("d.raw".into()),
            data_file_raw: true,
            ..ok.clone()
        };
        block_on(check_create_options(&with_data)).unwrap();
        for (bad, needle) in [
            (
                CreateOptions {
                    size: 1 << 63,
                    ..ok.clone()
                },
                "L1 table",
            ),
            (
                CreateOptions {
                    size: 1 << 40,
                    cluster_size: 512,
                    ..ok.clone()
                },
                "L1 table",
            ),
            (
                CreateOptions {
                    cluster_size: 3000,
                    ..ok.clone()
                },
                "cluster_size",
            ),
            (
                CreateOptions {
                    backing_file: Some("b".repeat(2000)),
                    ..ok.clone()
                },
                "1023",
            ),
        ] {
            let err = block_on(check_create_options(&bad))
                .unwrap_err()
                .to_string();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn prepare_refuses_one_file_twice_and_removes_what_it_created() {
        let dir = tempfile::tempdir().unwrap();
        let keep = dir.path().join("keep");
        std::fs::write(&keep, b"keep me").unwrap();
        let link = dir.path().join("link");
        std::fs::hard_link(&keep, &link).unwrap();
        let new = dir.path().join("new");
        let opts = FileOptions {
            threads: 1,
            ..FileOptions::default()
        };
        let wanted = [
            Wanted {
                path: &new,
                length: None,
            },
            Wanted {
                path: &keep,
                length: Some(1 << 20),
            },
            Wanted {
                path: &link,
                length: None,
            },
        ];
        let err = block_on(prepare(&wanted, &opts)).expect_err("refused");
        assert!(matches!(err, CreateError::SameFile { .. }), "{err}");
        assert_eq!(std::fs::read(&keep).unwrap(), b"keep me");
        assert!(!new.exists(), "the file it created is gone");

        // Too long for any file: refused, and the file is as it was.
        let wanted = [Wanted {
            path: &keep,
            length: Some(u64::MAX),
        }];
        let err = block_on(prepare(&wanted, &opts)).expect_err("refused");
        assert!(matches!(err, CreateError::Length { .. }), "{err}");
        assert_eq!(std::fs::read(&keep).unwrap(), b"keep me");

        let devs = block_on(prepare(&wanted[..0], &opts)).unwrap();
        assert!(devs.is_empty());
        let wanted = [Wanted {
            path: &keep,
            length: Some(1 << 20),
        }];
        let devs = block_on(prepare(&wanted, &opts)).unwrap();
        assert_eq!(devs.len(), 1);
        assert_eq!(std::fs::read(&keep).unwrap(), b"keep me", "not emptied");
    }
}
