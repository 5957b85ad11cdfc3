//! Fuzz target `check`: bytes taken as a qcow2 image and given to the
//! checker (`oracle::check::check`), then to `repair` (`-r leaks` and
//! `-r all`) on copies, and each repaired copy checked again. None of it
//! may panic; the checker's verdicts are not judged here (the runner and
//! the QEMU interop tests do that), only its robustness against hostile
//! images.
//!
//! Repair may legitimately grow an image (as `qemu-img check -r all` does,
//! into a sparse file, for a refcount block past the end): the copy here
//! refuses to grow past `SINK_MAX`, so that repair meets an I/O error
//! instead of a multi-gigabyte allocation in the harness.

#![no_main]

use std::io;

use libfuzzer_sys::fuzz_target;
use oracle::check::{check, repair, ImageSink, ImageSource, RepairMode};

/// Largest a repaired copy may grow.
const SINK_MAX: u64 = 64 << 20;

/// An in-memory image that refuses to grow past `SINK_MAX`.
struct Bounded(Vec<u8>);

impl Bounded {
    fn room(&self, end: Option<u64>) -> io::Result<()> {
        match end {
            Some(e) if e <= SINK_MAX => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::StorageFull,
                "past the fuzz sink's bound",
            )),
        }
    }
}

impl ImageSource for Bounded {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        ImageSource::read_at(&self.0, off, buf)
    }
}

impl ImageSink for Bounded {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.room(off.checked_add(buf.len() as u64))?;
        ImageSink::write_at(&mut self.0, off, buf)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.room(Some(len))?;
        ImageSink::set_len(&mut self.0, len)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let image = data.to_vec();
    let report = check(&image);
    // The report's JSON and text forms must render for any image.
    let _ = report.to_qemu_json();
    let _ = report.human();
    for mode in [RepairMode::Leaks, RepairMode::All] {
        let mut copy = Bounded(image.clone());
        if repair(&mut copy, mode).is_ok() {
            let _ = check(&copy);
        }
    }
});
