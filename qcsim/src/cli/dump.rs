//! `qcsim dump FILE`: a deterministic text dump of the image's header, L1
//! and L2 tables, refcount table and refcounts (see `oracle::dump`). The
//! file is read under QEMU's read-only image locks (so not while another
//! process writes it, unless `-U`), and a file that cannot be read or whose
//! header is cut short is an error.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;

use anyhow::Context;
use engine::dev::LockRequest;
use oracle::check::ImageSource;
use tools::files::open_locked;

#[derive(clap::Args)]
pub struct Args {
    /// Force sharing: dump an image other processes have open, even for
    /// writing, without keeping them from writing it (what is read may
    /// then be inconsistent).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Image file.
    pub file: PathBuf,
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

pub fn run(args: Args) -> anyhow::Result<i32> {
    let path = &args.file;
    let named = || format!("{}", path.display());
    let locked = open_locked(path, false, LockRequest::qcow2_file(true, args.force_share))?;
    let mut file = locked.file.try_clone().with_context(named)?;
    let len = file.seek(SeekFrom::End(0)).with_context(named)?;
    let dump = oracle::dump::try_dump(&Sized { file, len }).with_context(named)?;
    print!("{dump}");
    Ok(0)
}
