//! Reading a trace or a recording that may be compressed: zstd and gzip
//! are recognised by their magic bytes (never by a file name), anything
//! else is read as it is. Decompression streams, so memory stays bounded
//! by the decoder's window, and the decompressed text is capped: a stream
//! that decompresses past the cap is an error naming it, so a small file
//! cannot turn into unbounded input.

use std::io::{self, BufRead, BufReader, Cursor, Read};

/// The most bytes a compressed input may decompress to by default (4 GiB:
/// 40 times the largest recorded trace in the repository).
pub const MAX_DECOMPRESSED: u64 = 4 << 30;

/// Largest zstd window accepted, as a power of two (128 MiB, zstd's own
/// default bound for decoding; `zstd -19` uses 8 MiB).
const ZSTD_WINDOW_LOG_MAX: u32 = 27;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How an input is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Zstd,
    Gzip,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "plain",
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }
}

/// `input` as text: decompressed if it starts with zstd's or gzip's magic
/// bytes (several frames or members back to back are read in turn), as it
/// is otherwise. A compressed input yields at most `limit` bytes; reading
/// past them is an error (`InvalidData`), as is a corrupt stream.
pub fn reader<'a, R: Read + 'a>(
    mut input: R,
    limit: u64,
) -> io::Result<(Compression, Box<dyn BufRead + 'a>)> {
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < head.len() {
        match input.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let head = &head[..got];
    let whole = Cursor::new(head.to_vec()).chain(input);
    if head == ZSTD_MAGIC {
        let mut d = zstd::stream::read::Decoder::new(whole)?;
        d.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
        Ok((Compression::Zstd, capped(d, limit, "zstd")))
    } else if head.starts_with(&GZIP_MAGIC) {
        let d = flate2::read::MultiGzDecoder::new(whole);
        Ok((Compression::Gzip, capped(d, limit, "gzip")))
    } else {
        Ok((Compression::None, Box::new(BufReader::new(whole))))
    }
}

fn capped<'a, R: Read + 'a>(inner: R, limit: u64, name: &'static str) -> Box<dyn BufRead + 'a> {
    Box::new(BufReader::new(Capped {
        inner,
        left: limit,
        limit,
        name,
    }))
}

/// A decoder that refuses to yield more than `limit` bytes.
struct Capped<R> {
    inner: R,
    left: u64,
    limit: u64,
    name: &'static str,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            // At the cap: the stream must end here.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} input decompresses to more than {} bytes",
                        self.name, self.limit
                    ),
                )),
            };
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} input does not decompress: {e}", self.name),
            )
        })?;
        self.left -= n as u64;
        Ok(n)
    }
}
