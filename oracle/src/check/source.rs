//! Byte sources the checker reads and the sinks repair writes: the trait
//! seam that lets one checker judge a file, an in-memory image or a crash
//! image from the simulated disk alike.
//!
//! Reads past the end of a source return zeroes, as a read past the end of
//! a file does in QEMU's block layer: the checker then finds the structures
//! that point there empty, and the reference itself is what it reports.

use std::io;

/// A readable image: a length and positional reads.
pub trait ImageSource {
    /// Current length in bytes.
    fn len(&self) -> u64;

    /// Whether the source holds no bytes at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` from `off`; the part past the end reads as zeroes.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()>;
}

/// A writable image, for repair.
pub trait ImageSink: ImageSource {
    /// Writes `buf` at `off`, growing the image when the write ends past it.
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()>;
    /// Sets the length, truncating or zero-extending.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Makes the writes so far durable.
    fn flush(&mut self) -> io::Result<()>;
}

impl ImageSource for [u8] {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        buf.fill(0);
        let total = <[u8]>::len(self) as u64;
        if off >= total {
            return Ok(());
        }
        let start = off as usize;
        let n = buf.len().min(<[u8]>::len(self) - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(())
    }
}

impl ImageSource for Vec<u8> {
    fn len(&self) -> u64 {
        self.as_slice().len() as u64
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.as_slice().read_at(off, buf)
    }
}

/// The largest in-memory image repair will grow a `Vec` to; beyond it a
/// write is refused rather than allocating without bound.
const VEC_SINK_MAX: u64 = 1 << 32;

impl ImageSink for Vec<u8> {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        let end = off
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= VEC_SINK_MAX)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past 4 GiB"))?;
        if end > self.as_slice().len() as u64 {
            self.resize(end as usize, 0);
        }
        self[off as usize..end as usize].copy_from_slice(buf);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        if len > VEC_SINK_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "length past 4 GiB",
            ));
        }
        self.resize(len as usize, 0);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ImageSource for std::fs::File {
    fn len(&self) -> u64 {
        self.metadata().map(|m| m.len()).unwrap_or(0)
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        buf.fill(0);
        let mut done = 0;
        while done < buf.len() {
            let n = FileExt::read_at(self, &mut buf[done..], off + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(())
    }
}

impl ImageSink for std::fs::File {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, off)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

/// The largest offset QEMU's block layer accepts: 2^63 - 1 rounded down to
/// its maximum alignment (1 GiB). Requests reaching past it fail with an
/// I/O error, whatever the file's length.
pub(crate) const MAX_REQUEST_END: u64 = (i64::MAX as u64) & !((1 << 30) - 1);

/// Reads as the checker's every read must: a request ending past
/// `MAX_REQUEST_END` is an I/O error (as in QEMU), the rest goes to `src`.
pub(crate) fn read_checked(src: &dyn ImageSource, off: u64, buf: &mut [u8]) -> io::Result<()> {
    let end = off.checked_add(buf.len() as u64);
    if end.is_none_or(|e| e > MAX_REQUEST_END) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("read at {off:#x} is past the largest possible offset"),
        ));
    }
    src.read_at(off, buf)
}

/// Reads a big-endian u64 at `off`.
pub(crate) fn read_u64(src: &dyn ImageSource, off: u64) -> io::Result<u64> {
    let mut b = [0u8; 8];
    read_checked(src, off, &mut b)?;
    Ok(u64::from_be_bytes(b))
}

/// Reads `count` big-endian u64 entries at `off`.
pub(crate) fn read_u64s(src: &dyn ImageSource, off: u64, count: usize) -> io::Result<Vec<u64>> {
    let mut raw = vec![0u8; count * 8];
    read_checked(src, off, &mut raw)?;
    Ok(raw
        .chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8-byte chunk")))
        .collect())
}
