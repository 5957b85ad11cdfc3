//! The deterministic text dump of an image file's header, L1 and L2
//! tables, refcount table and refcounts (`oracle::dump`), read under QEMU's
//! read-only image locks (so not while another process writes the file,
//! unless `force_share`): [`dump_file`]. A file that cannot be read, or
//! whose header is cut short or is no qcow2 header, is an error naming it.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use engine::dev::LockRequest;
use oracle::check::ImageSource;
use oracle::dump::DumpError;

use crate::files::{open_locked, OpenError};

/// Why an image file could not be dumped.
#[derive(Debug, thiserror::Error)]
pub enum DumpFileError {
    /// The file could not be opened or locked; the error names it.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The file opened but its length could not be found.
    #[error("{path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The file holds no image to dump (truncated header, no qcow2 magic,
    /// an impossible cluster size) or could not be read.
    #[error("{path}: {error}")]
    Dump { path: PathBuf, error: DumpError },
}

/// The file with the length a block device has too (its metadata says 0),
/// so that a header is judged truncated only when the file really ends.
struct Sized {
    file: File,
    len: u64,
}

impl ImageSource for Sized {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        ImageSource::read_at(&self.file, off, buf)
    }
}

/// The dump of the image at `path`, every line ended.
pub fn dump_file(path: &Path, force_share: bool) -> Result<String, DumpFileError> {
    let read_err = |error| DumpFileError::Read {
        path: path.to_owned(),
        error,
    };
    let locked = open_locked(path, false, LockRequest::qcow2_file(true, force_share))?;
    let mut file = locked.file.try_clone().map_err(read_err)?;
    let len = file.seek(SeekFrom::End(0)).map_err(read_err)?;
    oracle::dump::try_dump(&Sized { file, len }).map_err(|error| DumpFileError::Dump {
        path: path.to_owned(),
        error,
    })
}
