//! An image opened for checking: the byte source (read-only, or writable
//! for repair), the header, the active L1 table and the stored refcount
//! table, loaded as QEMU's open loads them.

use std::io;

use super::header::{self, Header};
use super::refcounts::DiskRefcounts;
use super::source::{read_u64s, ImageSink, ImageSource};

/// The image bytes: read-only for a check, writable for a repair.
pub(crate) enum Io<'a> {
    Ro(&'a dyn ImageSource),
    Rw(&'a mut dyn ImageSink),
}

impl Io<'_> {
    pub fn src(&self) -> &dyn ImageSource {
        match self {
            Io::Ro(s) => *s,
            Io::Rw(s) => &**s,
        }
    }

    pub fn len(&self) -> u64 {
        self.src().len()
    }

    pub fn sink(&mut self) -> io::Result<&mut dyn ImageSink> {
        match self {
            Io::Ro(_) => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "image opened read-only",
            )),
            Io::Rw(s) => Ok(&mut **s),
        }
    }
}

/// What open loads: the header, the active L1 table and the refcount table.
pub(crate) struct OpenImage<'a> {
    pub io: Io<'a>,
    pub h: Header,
    pub l1: Vec<u64>,
    pub disk: DiskRefcounts,
}

impl<'a> OpenImage<'a> {
    /// Opens as QEMU does in check mode; `Err` carries the message of a
    /// failed open.
    pub fn open(io: Io<'a>) -> Result<Self, String> {
        let h = header::parse(io.src())?;
        let l1 = read_u64s(io.src(), h.l1_table_offset, h.l1_size as usize)
            .map_err(|e| format!("Could not read L1 table: {e}"))?;
        super::bitmap::validate_for_open(io.src(), &h)?;
        let disk = DiskRefcounts::load(io.src(), &h)
            .map_err(|e| format!("Could not read refcount table: {e}"))?;
        Ok(OpenImage { io, h, l1, disk })
    }
}
