//! The request log of a served disk: everything needed to rebuild it
//! without the client that drove it (QEMU, say): the seed, the disk's
//! options, its content at the start, and every submission (with a write's
//! data) and wait in the order they happened. [`replay`] runs it again on a
//! fresh simulation and gets the same disk, down to its pending writes.
//!
//! Layout (integers little-endian):
//! - the line `qcsim request log 1\n`;
//! - a u32 length and that many bytes of JSON: `{"seed", "size",
//!   "options"}`;
//! - `C` offset:u64 and [`CHUNK`] bytes, for each chunk of the initial
//!   content that is not zeroes;
//! - `S` ticket:u64 kind:u8 offset:u64 len:u64 flags:u8, then for a write
//!   `len` bytes of data (kinds: 0 read, 1 write, 2 write_zeroes,
//!   3 discard, 4 flush; flags: bit 0 FUA, 1 may_unmap, 2 no_fallback);
//! - `W` ticket:u64: the caller waited for that request;
//! - `E`: the log was closed (a log without it was cut short, e.g. the
//!   server was killed, and replays up to its last whole record).

use std::io::{self, BufWriter, Read, Write};

use serde::{Deserialize, Serialize};

use engine::dev::ZeroFlags;

use super::{DiskRequest, ServedDisk, ServedError, Ticket, MAX_REQUEST};
use crate::disk::{DiskOptions, OptionsError, SparseStore, CHUNK};

const MAGIC: &[u8] = b"qcsim request log 1\n";

/// Largest header a log may have: options are a few kilobytes.
const MAX_HEADER: u32 = 1 << 20;

/// Largest disk a log may describe (2^60 bytes: an exbibyte).
const MAX_SIZE: u64 = 1 << 60;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    seed: u64,
    size: u64,
    options: DiskOptions,
}

/// Why a log cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReqLogError {
    #[error("reading the log: {0}")]
    Io(#[from] io::Error),
    #[error(
        "not a qcsim request log (it does not start with {:?})",
        String::from_utf8_lossy(MAGIC)
    )]
    Magic,
    #[error("bad header: {0}")]
    Header(String),
    #[error("record {record} (at byte {at}): {reason}")]
    Record {
        record: u64,
        at: u64,
        reason: String,
    },
    #[error("the disk's options: {0}")]
    Options(#[from] OptionsError),
    #[error("replaying record {record}: {source}")]
    Serve { record: u64, source: ServedError },
}

/// Writes a log as requests arrive.
pub(super) struct Writer {
    out: BufWriter<Box<dyn Write>>,
}

impl Writer {
    pub(super) fn start(
        out: Box<dyn Write>,
        seed: u64,
        options: &DiskOptions,
        content: &SparseStore,
    ) -> io::Result<Writer> {
        let mut out = BufWriter::new(out);
        out.write_all(MAGIC)?;
        let header = serde_json::to_vec(&Header {
            seed,
            size: content.len(),
            options: options.clone(),
        })
        .map_err(io::Error::other)?;
        out.write_all(&(header.len() as u32).to_le_bytes())?;
        out.write_all(&header)?;
        for (at, bytes) in content.chunks() {
            if bytes.iter().all(|&b| b == 0) {
                continue;
            }
            let mut chunk = [0u8; CHUNK as usize];
            chunk[..bytes.len()].copy_from_slice(bytes);
            out.write_all(b"C")?;
            out.write_all(&at.to_le_bytes())?;
            out.write_all(&chunk)?;
        }
        Ok(Writer { out })
    }

    pub(super) fn submit(&mut self, ticket: Ticket, req: &DiskRequest) -> io::Result<()> {
        let (kind, offset, len, flags, data): (u8, u64, u64, ZeroFlags, &[u8]) = match req {
            DiskRequest::Read { offset, len } => (0, *offset, *len, ZeroFlags::default(), &[]),
            DiskRequest::Write { offset, data, fua } => (
                1,
                *offset,
                data.len() as u64,
                ZeroFlags {
                    fua: *fua,
                    ..ZeroFlags::default()
                },
                data,
            ),
            DiskRequest::WriteZeroes { offset, len, flags } => (2, *offset, *len, *flags, &[]),
            DiskRequest::Discard { offset, len } => (3, *offset, *len, ZeroFlags::default(), &[]),
            DiskRequest::Flush => (4, 0, 0, ZeroFlags::default(), &[]),
        };
        let bits =
            u8::from(flags.fua) | u8::from(flags.may_unmap) << 1 | u8::from(flags.no_fallback) << 2;
        self.out.write_all(b"S")?;
        self.out.write_all(&ticket.to_le_bytes())?;
        self.out.write_all(&[kind])?;
        self.out.write_all(&offset.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&[bits])?;
        self.out.write_all(data)
    }

    pub(super) fn wait(&mut self, ticket: Ticket) -> io::Result<()> {
        self.out.write_all(b"W")?;
        self.out.write_all(&ticket.to_le_bytes())
    }

    pub(super) fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub(super) fn finish(mut self) -> io::Result<()> {
        self.out.write_all(b"E")?;
        self.out.flush()
    }
}

/// A log replayed.
pub struct Replayed {
    /// The disk as the log leaves it: requests the log submitted but never
    /// waited for are still in flight (pending, for its crash states).
    pub disk: ServedDisk,
    /// Requests submitted.
    pub requests: u64,
    /// The log ended with its end marker (else it was cut short).
    pub closed: bool,
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` at a clean or ragged end
/// of the input (a log cut short ends wherever the writer was stopped).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn u64_at(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

/// Replay a request log from `r`: the same seed, options and content, the
/// same submissions and waits in the same order.
pub fn replay(r: impl Read) -> Result<Replayed, ReqLogError> {
    let mut r = io::BufReader::new(r);
    let mut magic = vec![0u8; MAGIC.len()];
    if !read_full(&mut r, &mut magic)? || magic != MAGIC {
        return Err(ReqLogError::Magic);
    }
    let mut n = [0u8; 4];
    if !read_full(&mut r, &mut n)? {
        return Err(ReqLogError::Header("cut short before its length".into()));
    }
    let n = u32::from_le_bytes(n);
    if n > MAX_HEADER {
        return Err(ReqLogError::Header(format!(
            "{n} bytes long, more than the {MAX_HEADER} a header may have"
        )));
    }
    let mut json = vec![0u8; n as usize];
    if !read_full(&mut r, &mut json)? {
        return Err(ReqLogError::Header("cut short".into()));
    }
    let header: Header =
        serde_json::from_slice(&json).map_err(|e| ReqLogError::Header(e.to_string()))?;
    if header.size > MAX_SIZE {
        return Err(ReqLogError::Header(format!(
            "a disk of {} bytes is larger than the {MAX_SIZE} a log may describe",
            header.size
        )));
    }
    let mut at = (MAGIC.len() + 4) as u64 + u64::from(n);
    let mut record = 0u64;
    let bad = |record: u64, at: u64, reason: String| ReqLogError::Record { record, at, reason };

    let mut content = SparseStore::new();
    let mut served: Option<ServedDisk> = None;
    let mut requests = 0u64;
    let mut closed = false;
    loop {
        let mut tag = [0u8];
        if !read_full(&mut r, &mut tag)? {
            break;
        }
        let start = at;
        at += 1;
        record += 1;
        match tag[0] {
            b'C' => {
                if served.is_some() {
                    return Err(bad(record, start, "content after the first request".into()));
                }
                let mut b = vec![0u8; 8 + CHUNK as usize];
                if !read_full(&mut r, &mut b)? {
                    break;
                }
                at += b.len() as u64;
                let offset = u64_at(&b);
                if !offset.is_multiple_of(CHUNK) || offset >= header.size {
                    return Err(bad(
                        record,
                        start,
                        format!(
                            "a chunk at {offset}, not a chunk of a {}-byte disk",
                            header.size
                        ),
                    ));
                }
                let n = (header.size - offset).min(CHUNK) as usize;
                content.write(offset, &b[8..8 + n]);
            }
            b'S' => {
                let mut b = [0u8; 8 + 1 + 8 + 8 + 1];
                if !read_full(&mut r, &mut b)? {
                    break;
                }
                at += b.len() as u64;
                let ticket = u64_at(&b);
                let (kind, offset, len, bits) = (b[8], u64_at(&b[9..]), u64_at(&b[17..]), b[25]);
                if ticket != requests {
                    return Err(bad(
                        record,
                        start,
                        format!("request #{ticket} where #{requests} comes next"),
                    ));
                }
                if bits > 7 {
                    return Err(bad(record, start, format!("unknown flags {bits:#x}")));
                }
                if matches!(kind, 0 | 1) && len > MAX_REQUEST {
                    return Err(bad(
                        record,
                        start,
                        format!("{len} bytes, more than the {MAX_REQUEST} a request may carry"),
                    ));
                }
                let flags = ZeroFlags {
                    fua: bits & 1 != 0,
                    may_unmap: bits & 2 != 0,
                    no_fallback: bits & 4 != 0,
                };
                let req = match kind {
                    0 => DiskRequest::Read { offset, len },
                    1 => {
                        let mut data = vec![0u8; len as usize];
                        if !read_full(&mut r, &mut data)? {
                            break;
                        }
                        at += len;
                        DiskRequest::Write {
                            offset,
                            data,
                            fua: flags.fua,
                        }
                    }
                    2 => DiskRequest::WriteZeroes { offset, len, flags },
                    3 => DiskRequest::Discard { offset, len },
                    4 => DiskRequest::Flush,
                    k => return Err(bad(record, start, format!("unknown request kind {k}"))),
                };
                let disk = match &mut served {
                    Some(d) => d,
                    None => {
                        content.truncate(header.size);
                        served.insert(ServedDisk::new(
                            header.seed,
                            header.options.clone(),
                            std::mem::take(&mut content),
                        )?)
                    }
                };
                disk.submit(req)
                    .map_err(|source| ReqLogError::Serve { record, source })?;
                requests += 1;
            }
            b'W' => {
                let mut b = [0u8; 8];
                if !read_full(&mut r, &mut b)? {
                    break;
                }
                at += 8;
                let ticket = u64::from_le_bytes(b);
                let Some(disk) = &mut served else {
                    return Err(bad(
                        record,
                        start,
                        format!("a wait for #{ticket} before any request"),
                    ));
                };
                // The disk's answer is what it was live; only its effect on
                // the disk matters here.
                let _answer = disk
                    .wait(ticket)
                    .map_err(|source| ReqLogError::Serve { record, source })?;
            }
            b'E' => {
                closed = true;
                break;
            }
            t => return Err(bad(record, start, format!("unknown record type {t:#04x}"))),
        }
    }
    let disk = match served {
        Some(d) => d,
        None => {
            content.truncate(header.size);
            ServedDisk::new(header.seed, header.options, content)?
        }
    };
    Ok(Replayed {
        disk,
        requests,
        closed,
    })
}
