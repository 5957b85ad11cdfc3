//! The qemu-io command set on an image: the command parser
//! ([`parse_command`]: `read`, `readv`, `write`, `writev`, `aio_read`,
//! `aio_write`, `aio_flush`, `discard`, `alloc`, `map`, `length`, `info`,
//! `flush`, `open`, `close`, `reopen`, `abort`, `sigraise`, `quit`, with qemu-io's
//! flags and its messages for bad arguments) and its executor, a
//! [`Session`] holding one open of the image (and its locks) across
//! commands. A command's output follows qemu-io's: "wrote N/N bytes at
//! offset M", then, when the session is built [`Session::with_timing`], the
//! size, operation count and timing line (off by default, so that runs are
//! reproducible); "Pattern verification failed at offset N, N bytes";
//! `read -v` hex dumps. A failing command prints its failure as qemu-io
//! does and reports it as a [`CmdFailure`], and the session goes on.
//! Commands that change which image is open (`open`, `close`, `reopen`) or end the
//! process (`quit`, `abort`, `sigraise`) are parsed here and carried out by
//! the caller, which owns the session.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::files::{open_image, Disk, OpenError, OpenOptions};
use crate::qemu_args::{parse_size, ArgError};
use engine::status::Status;

/// Largest single request, as qemu-io's limit (2 GiB less one sector).
pub const MAX_REQUEST: u64 = (i32::MAX as u64) & !511;

/// Requests are carried out in pieces of at most this many bytes, so that
/// memory stays bounded whatever length a command names.
const PIECE: u64 = 16 << 20;

/// Zero `len` bytes at `offset` on `disk`; with `align`, as
/// [`Session::with_zero_alignment`] says: the pieces before the first and
/// after the last multiple of it are written as zeroes.
async fn zero_aligned(
    disk: &Disk,
    offset: u64,
    len: u64,
    unmap: bool,
    align: Option<u64>,
) -> engine::Result<()> {
    let Some(a) = align else {
        return disk.write_zeroes(offset, len, unmap).await;
    };
    let end = offset + len;
    let bulk_start = offset.next_multiple_of(a).min(end);
    let bulk_end = (end / a * a).max(bulk_start);
    write_filled(disk, offset, bulk_start - offset, 0, Fill::Data).await?;
    if bulk_end > bulk_start {
        disk.write_zeroes(bulk_start, bulk_end - bulk_start, unmap)
            .await?;
    }
    write_filled(disk, bulk_end, end - bulk_end, 0, Fill::Data).await
}

/// Where a filled write goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    Data,
    Compressed,
    VmState,
}

/// Write `len` bytes of `byte` at `offset`, in [`PIECE`]s (so that memory
/// stays bounded), stopping at the first error. Pieces are whole clusters
/// of any cluster size (at most 2 MiB), so a compressed write stays
/// aligned.
async fn write_filled(
    disk: &Disk,
    offset: u64,
    len: u64,
    byte: u8,
    to: Fill,
) -> engine::Result<()> {
    let buf = vec![byte; len.min(PIECE) as usize];
    for (at, n) in pieces(offset, len) {
        let piece = &buf[..n as usize];
        match to {
            Fill::Data => disk.write(at, piece).await?,
            Fill::Compressed => disk.write_compressed(at, piece).await?,
            Fill::VmState => disk.write_vmstate(at, piece).await?,
        }
    }
    Ok(())
}

/// `len` bytes at `offset` in [`PIECE`]s, as `(offset, len)`.
fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(PIECE)).map(move |i| {
        let at = i * PIECE;
        (offset + at, (len - at).min(PIECE))
    })
}

/// Default data byte of `write` without `-P`, as in qemu-io.
const DEFAULT_PATTERN: u8 = 0xcd;

/// Default data byte of `writev` without `-P`, as in qemu-io.
const DEFAULT_VECTOR_PATTERN: u8 = 0xcd;

/// `read -P`'s check: every byte of `[offset, offset + len)` of the data
/// read (relative to the request; `-s` and `-l`) must be `byte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternCheck {
    pub byte: u8,
    pub offset: u64,
    /// `None`: to the end of the request.
    pub len: Option<u64>,
}

/// How a request's result is reported (qemu-io's `-q` and `-C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    pub quiet: bool,
    /// `-C`: one comma-separated line instead of the two lines.
    pub csv: bool,
}

/// One parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// `read`, `readv` (several lengths, one after the other) and
    /// `aio_read`, which here completes before the next command.
    Read {
        /// The command's name as qemu-io reports its failures.
        op: &'static str,
        offset: u64,
        lens: Vec<u64>,
        pattern: Option<PatternCheck>,
        verbose: bool,
        report: Report,
        /// `-b`: the offset is in the VM state area, not the disk.
        vmstate: bool,
    },
    /// `write`, `writev` and `aio_write`.
    Write {
        op: &'static str,
        offset: u64,
        lens: Vec<u64>,
        data: WriteData,
        /// `-f`: force unit access, here a flush after the write.
        fua: bool,
        report: Report,
        /// `-b`: the offset is in the VM state area, not the disk.
        vmstate: bool,
    },
    Discard {
        offset: u64,
        len: u64,
        report: Report,
    },
    /// `alloc off [count]`: how much of the range this image (not its
    /// backing file) holds.
    Alloc {
        offset: u64,
        count: u64,
    },
    /// The allocation map of the whole image.
    Map,
    /// The virtual size.
    Length,
    /// Format, cluster size and the format's own information.
    Info,
    Flush,
    /// `aio_flush`: requests complete before the next command, so this is
    /// a flush.
    AioFlush,
    /// `open [-r] [-s] [-n] [-o opts] [FILE]`: without FILE, the options
    /// name it.
    Open {
        file: Option<String>,
        read_only: bool,
        /// `-n`, `-t none`: bypass the host page cache.
        nocache: bool,
        /// `-o key=value,...` as given.
        options: Vec<String>,
    },
    Close,
    /// `reopen [-r|-w] [-c cache] [-o opts]`: the same image, opened
    /// again read-only (`Some(true)`), read-write, or as it was.
    Reopen {
        read_only: Option<bool>,
        /// `-c MODE`: the cache mode, as given.
        cache: Option<String>,
        options: Vec<String>,
    },
    /// `truncate [-m MODE] SIZE`: the virtual size set to SIZE (grown or
    /// shrunk), with preallocation mode MODE as given (only `off` is
    /// carried out). Needs the session mutably: [`Session::truncate`].
    Truncate {
        size: u64,
        prealloc: Option<String>,
    },
    /// End the process with SIGABRT, as a crash would.
    Abort,
    /// Raise the signal of this number.
    Sigraise(i32),
    /// End the session; later commands are not run.
    Quit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteData {
    Pattern(u8),
    /// `write -c`: the pattern, written as compressed clusters (whole
    /// clusters only, as QEMU's qcow2 driver takes them).
    Compressed(u8),
    /// `-z`, with `-u` to allow unmapping.
    Zeroes {
        unmap: bool,
    },
}

/// A command line that could not be parsed. The message is qemu-io's;
/// `stderr` says whether qemu-io prints it on standard error (unknown
/// commands, bad flags) rather than standard output (bad values).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CmdError {
    pub message: String,
    pub stderr: bool,
    /// The command's one-line usage, which qemu-io prints on standard
    /// output after the message when it met an option it does not take
    /// or one missing its value.
    pub usage: Option<&'static str>,
}

fn err<T>(msg: impl Into<String>) -> Result<T, CmdError> {
    Err(CmdError {
        message: msg.into(),
        stderr: false,
        usage: None,
    })
}

fn err_stderr<T>(msg: impl Into<String>) -> Result<T, CmdError> {
    Err(CmdError {
        message: msg.into(),
        stderr: true,
        usage: None,
    })
}

/// A bad option of `cmd`: the message on standard error, then the
/// command's usage line.
fn bad_option<T>(cmd: &str, msg: String) -> Result<T, CmdError> {
    Err(CmdError {
        message: msg,
        stderr: true,
        usage: usage_of(cmd),
    })
}

/// The one-line usage qemu-io prints for the commands that take options.
fn usage_of(cmd: &str) -> Option<&'static str> {
    Some(match cmd {
        "read" => "read [-abCqrv] [-P pattern [-s off] [-l len]] off len -- reads a number of bytes at a specified offset",
        "readv" => "readv [-Cqrv] [-P pattern] off len [len..] -- reads a number of bytes at a specified offset",
        "write" => "write [-bcCfnqruz] [-P pattern | -s source_file] off len -- writes a number of bytes at a specified offset",
        "writev" => "writev [-Cfqr] [-P pattern] off len [len..] -- writes a number of bytes at a specified offset",
        "aio_read" => "aio_read [-Ciqrv] [-P pattern] off len [len..] -- asynchronously reads a number of bytes",
        "aio_write" => "aio_write [-Cfiqruz] [-P pattern] off len [len..] -- asynchronously writes a number of bytes",
        "discard" => "discard [-Cq] off len -- discards a number of bytes at a specified offset",
        "open" => OPEN_USAGE,
        "reopen" => "reopen [(-r|-w)] [-c cache] [-o options] -- reopens an image with new options",
        "truncate" => TRUNCATE_USAGE,
        _ => return None,
    })
}

const OPEN_USAGE: &str =
    "open [-rsCnkU] [-t cache] [-d discard] [-o options] [path] -- open the file specified by path";
const TRUNCATE_USAGE: &str =
    "truncate [-m prealloc_mode] off -- truncates the current file at the given offset";

/// A number as qemu-io's `cvtnum`, with its messages.
fn parse_num(s: &str) -> Result<u64, CmdError> {
    match parse_size(s) {
        Ok(v) if v <= i64::MAX as u64 => Ok(v),
        Ok(_) | Err(ArgError::SizeTooLarge(_)) => {
            err(format!("Parsing error: argument too large -- {s}"))
        }
        Err(_) => err(format!(
            "Parsing error: non-numeric argument, or extraneous/unrecognized suffix -- {s}"
        )),
    }
}

/// Parse a pattern byte as qemu-io does (C `strtol` with base 0: decimal,
/// `0x` hex or leading-zero octal), which must fit in a byte.
pub fn parse_pattern(s: &str) -> Result<u8, CmdError> {
    let value = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8).ok()
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse::<u64>().ok()
    } else {
        None
    };
    match value {
        Some(v) if v <= 0xff => Ok(v as u8),
        _ => err(format!("{s} is not a valid pattern byte")),
    }
}

/// getopt-style scan of a command's words: flags (several may share one
/// dash), flags that take a value (attached or as the next word), then the
/// positional words.
struct Opts<'a> {
    flags: Vec<(char, Option<&'a str>)>,
    positional: Vec<&'a str>,
}

fn scan<'a>(
    cmd: &str,
    words: &[&'a str],
    bool_flags: &str,
    value_flags: &str,
) -> Result<Opts<'a>, CmdError> {
    let mut flags = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if w == "--" {
            i += 1;
            break;
        }
        let Some(body) = w.strip_prefix('-').filter(|b| !b.is_empty()) else {
            break;
        };
        for (at, c) in body.char_indices() {
            if bool_flags.contains(c) {
                flags.push((c, None));
            } else if value_flags.contains(c) {
                let rest = &body[at + c.len_utf8()..];
                let value = if !rest.is_empty() {
                    rest
                } else {
                    i += 1;
                    match words.get(i) {
                        Some(v) => v,
                        None => {
                            return bad_option(
                                cmd,
                                format!("{cmd}: option requires an argument -- '{c}'"),
                            )
                        }
                    }
                };
                flags.push((c, Some(value)));
                break;
            } else {
                return bad_option(cmd, format!("{cmd}: invalid option -- '{c}'"));
            }
        }
        i += 1;
    }
    Ok(Opts {
        flags,
        positional: words[i..].to_vec(),
    })
}

impl Opts<'_> {
    fn has(&self, c: char) -> bool {
        self.flags.iter().any(|(f, _)| *f == c)
    }

    fn value(&self, c: char) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(f, _)| *f == c)
            .and_then(|(_, v)| *v)
    }

    fn report(&self) -> Report {
        Report {
            quiet: self.has('q'),
            csv: self.has('C'),
        }
    }

    /// The positional words must number between `min` and `max`.
    fn count(&self, cmd: &str, min: usize, max: Option<usize>) -> Result<(), CmdError> {
        let n = self.positional.len();
        if n < min || max.is_some_and(|m| n > m) {
            let want = match max {
                Some(m) if m == min => format!("expected {min} arguments"),
                Some(m) => format!("expected between {min} and {m} arguments"),
                None => format!("expected at least {min} arguments"),
            };
            return err_stderr(format!("bad argument count {n} to {cmd}, {want}"));
        }
        Ok(())
    }

    /// The two positional words `off len`, parsed.
    fn offset_len(&self, cmd: &str) -> Result<(u64, u64), CmdError> {
        self.count(cmd, 2, Some(2))?;
        let offset = parse_num(self.positional[0])?;
        let len = parse_num(self.positional[1])?;
        if len > MAX_REQUEST {
            return err(format!(
                "length cannot exceed {MAX_REQUEST}, given {}",
                self.positional[1]
            ));
        }
        Ok((offset, len))
    }

    /// `off len [len...]` of the vectored commands.
    fn offset_lens(&self, cmd: &str) -> Result<(u64, Vec<u64>), CmdError> {
        self.count(cmd, 2, None)?;
        let offset = parse_num(self.positional[0])?;
        let mut total = 0u64;
        let mut lens = Vec::new();
        for arg in &self.positional[1..] {
            let len = parse_num(arg)?;
            if len > MAX_REQUEST {
                return err(format!(
                    "Argument '{arg}' exceeds maximum size {MAX_REQUEST}"
                ));
            }
            if total > MAX_REQUEST - len {
                return err(format!(
                    "The total number of bytes exceed the maximum size {MAX_REQUEST}"
                ));
            }
            total += len;
            lens.push(len);
        }
        Ok((offset, lens))
    }

    fn pattern_check(&self, total: u64) -> Result<Option<PatternCheck>, CmdError> {
        let Some(p) = self.value('P') else {
            return Ok(None);
        };
        let byte = parse_pattern(p)?;
        let offset = self.value('s').map(parse_num).transpose()?.unwrap_or(0);
        let len = self.value('l').map(parse_num).transpose()?;
        let end = offset.checked_add(len.unwrap_or(total - offset.min(total)));
        if offset > total || end.is_none_or(|e| e > total) {
            return err("pattern verification range exceeds end of read data");
        }
        Ok(Some(PatternCheck { byte, offset, len }))
    }
}

/// Parse one command line. `Ok(None)` for a blank line or a comment.
pub fn parse_command(line: &str) -> Result<Option<Cmd>, CmdError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&name, rest)) = words.split_first() else {
        return Ok(None);
    };
    if name.starts_with('#') {
        return Ok(None);
    }
    parse_words(name, rest).map(Some).map_err(|mut e| {
        // getopt names the command as typed (`r: invalid option`); the
        // usage line is the command's own.
        if e.usage.is_some() {
            if let Some((typed, tail)) = e.message.split_once(": ") {
                if typed != name {
                    e.message = format!("{name}: {tail}");
                }
            }
        }
        e
    })
}

/// The command `name` with its words `rest`.
fn parse_words(name: &str, rest: &[&str]) -> Result<Cmd, CmdError> {
    let cmd = match name {
        "read" | "r" => {
            let o = scan("read", rest, "abCqprv", "Pls")?;
            let (offset, len) = o.offset_len("read")?;
            Cmd::Read {
                op: "read",
                offset,
                lens: vec![len],
                pattern: o.pattern_check(len)?,
                verbose: o.has('v'),
                report: o.report(),
                vmstate: o.has('b'),
            }
        }
        "readv" | "aio_read" => {
            let o = scan(name, rest, "Cqrvi", "P")?;
            let (offset, lens) = o.offset_lens(name)?;
            let total = lens.iter().sum();
            Cmd::Read {
                op: "readv",
                offset,
                lens,
                pattern: o.pattern_check(total)?,
                verbose: o.has('v'),
                report: o.report(),
                vmstate: false,
            }
        }
        "write" | "w" => {
            let o = scan("write", rest, "bcCfnpqrzu", "Ps")?;
            let zero = o.has('z');
            if o.has('b') && zero {
                return err("-b and -z cannot be specified at the same time");
            }
            if o.has('f') && (o.has('b') || o.has('c')) {
                return err("-f and -b or -c cannot be specified at the same time");
            }
            if o.has('n') && !zero {
                return err("-n requires -z to be specified");
            }
            if o.has('u') && !zero {
                return err("-u requires -z to be specified");
            }
            let sources = [zero, o.value('P').is_some(), o.value('s').is_some()];
            if sources.iter().filter(|&&x| x).count() > 1 {
                return err("Only one of -z, -P, and -s can be specified at the same time");
            }
            if o.value('s').is_some() {
                return err("write -s: writing a file's contents is not supported");
            }
            let data = if zero {
                // qemu-io zeroes without looking at -c.
                WriteData::Zeroes { unmap: o.has('u') }
            } else {
                let p = o.value('P').map(parse_pattern).transpose()?;
                let p = p.unwrap_or(DEFAULT_PATTERN);
                if o.has('c') {
                    WriteData::Compressed(p)
                } else {
                    WriteData::Pattern(p)
                }
            };
            o.count("write", 2, Some(2))?;
            let offset = parse_num(o.positional[0])?;
            let len = parse_num(o.positional[1])?;
            if len > MAX_REQUEST && !o.has('n') {
                return err(format!(
                    "length cannot exceed {MAX_REQUEST} without -n, given {}",
                    o.positional[1]
                ));
            }
            Cmd::Write {
                op: "write",
                offset,
                lens: vec![len],
                data,
                fua: o.has('f'),
                report: o.report(),
                vmstate: o.has('b'),
            }
        }
        "writev" | "aio_write" => {
            let o = scan(name, rest, "Cfqruzi", "P")?;
            let zero = o.has('z');
            if o.has('u') && !zero {
                return err("-u requires -z to be specified");
            }
            if zero && o.value('P').is_some() {
                return err("-z and -P cannot be specified at the same time");
            }
            let (offset, lens) = o.offset_lens(name)?;
            if zero && lens.len() > 1 {
                return err("-z supports only a single length parameter");
            }
            let data = if zero {
                WriteData::Zeroes { unmap: o.has('u') }
            } else {
                let p = o.value('P').map(parse_pattern).transpose()?;
                WriteData::Pattern(p.unwrap_or(DEFAULT_VECTOR_PATTERN))
            };
            Cmd::Write {
                op: if name == "writev" {
                    "writev"
                } else {
                    "aio_write"
                },
                offset,
                lens,
                data,
                fua: o.has('f'),
                report: o.report(),
                vmstate: false,
            }
        }
        "discard" | "d" => {
            let o = scan("discard", rest, "Cq", "")?;
            let (offset, len) = o.offset_len("discard")?;
            Cmd::Discard {
                offset,
                len,
                report: o.report(),
            }
        }
        "alloc" => {
            let o = scan("alloc", rest, "", "")?;
            o.count("alloc", 1, Some(2))?;
            let offset = parse_num(o.positional[0])?;
            let count = match o.positional.get(1) {
                Some(c) => parse_num(c)?,
                None => 512,
            };
            Cmd::Alloc { offset, count }
        }
        "map" => no_args(name, rest, Cmd::Map)?,
        "length" | "len" | "l" => no_args(name, rest, Cmd::Length)?,
        "info" | "i" => no_args(name, rest, Cmd::Info)?,
        "flush" | "f" => no_args(name, rest, Cmd::Flush)?,
        "aio_flush" => no_args(name, rest, Cmd::AioFlush)?,
        "close" | "c" => no_args(name, rest, Cmd::Close)?,
        "abort" => no_args(name, rest, Cmd::Abort)?,
        "quit" | "q" => no_args(name, rest, Cmd::Quit)?,
        "sigraise" => {
            let o = scan(name, rest, "", "")?;
            o.count(name, 1, Some(1))?;
            let arg = o.positional[0];
            let sig = parse_num(arg)?;
            if sig > i32::MAX as u64 {
                return err(format!(
                    "signal argument '{arg}' is too large to be a valid signal"
                ));
            }
            Cmd::Sigraise(sig as i32)
        }
        "open" | "o" => {
            // qemu-io counts every word after the command, flags too: at
            // least one, and at most one that is not a flag.
            if rest.is_empty() {
                return err_stderr("bad argument count 0 to open, expected at least 1 arguments");
            }
            let o = scan("open", rest, "rsnCkU", "otd")?;
            if o.positional.len() > 1 {
                return err(OPEN_USAGE);
            }
            let nocache = o.has('n') || matches!(o.value('t'), Some("none" | "directsync"));
            Cmd::Open {
                file: o.positional.first().map(|f| (*f).to_owned()),
                read_only: o.has('r'),
                nocache,
                options: o
                    .flags
                    .iter()
                    .filter(|(f, _)| *f == 'o')
                    .filter_map(|(_, v)| v.map(str::to_owned))
                    .collect(),
            }
        }
        "truncate" | "t" => {
            // Counted as qemu-io counts them: every word, flags too.
            if rest.is_empty() || rest.len() > 3 {
                return err_stderr(format!(
                    "bad argument count {} to truncate, expected between 1 and 3 arguments",
                    rest.len()
                ));
            }
            let o = scan("truncate", rest, "", "m")?;
            // The first operand is the size, and words after it are not
            // looked at; with none, qemu-io takes the first word (an
            // option, which then fails to parse as a number).
            let size = o.positional.first().unwrap_or(&rest[0]);
            Cmd::Truncate {
                size: parse_num(size)?,
                prealloc: o.value('m').map(str::to_owned),
            }
        }
        "reopen" => {
            let o = scan("reopen", rest, "rw", "co")?;
            o.count("reopen", 0, Some(0))?;
            let (r, w) = (o.has('r'), o.has('w'));
            if r && w {
                return err_stderr("Only one -r/-w option may be given");
            }
            Cmd::Reopen {
                read_only: (r || w).then_some(r),
                cache: o.value('c').map(str::to_owned),
                options: o
                    .flags
                    .iter()
                    .filter(|(f, _)| *f == 'o')
                    .filter_map(|(_, v)| v.map(str::to_owned))
                    .collect(),
            }
        }
        other => return err_stderr(format!("command \"{other}\" not found")),
    };
    Ok(cmd)
}

fn no_args(name: &str, rest: &[&str], cmd: Cmd) -> Result<Cmd, CmdError> {
    if !rest.is_empty() {
        return err_stderr(format!(
            "bad argument count {} to {name}, expected 0 arguments",
            rest.len()
        ));
    }
    Ok(cmd)
}

/// A size as qemu-io prints sizes and rates: three decimals in the largest
/// binary unit the value reaches (six for bytes), cut at a ".000".
pub fn cvtstr(value: f64) -> String {
    const UNITS: [(u32, &str); 6] = [
        (60, "EiB"),
        (50, "PiB"),
        (40, "TiB"),
        (30, "GiB"),
        (20, "MiB"),
        (10, "KiB"),
    ];
    let (mut s, suffix) = UNITS
        .iter()
        .find(|(shift, _)| value >= (1u64 << shift) as f64)
        .map(|&(shift, unit)| (format!("{:.3}", value / (1u64 << shift) as f64), unit))
        .unwrap_or_else(|| (format!("{value:.6}"), "bytes"));
    if let Some(at) = s.find(".000") {
        s.truncate(at);
    }
    format!("{s} {suffix}")
}

/// A duration as qemu-io's report prints it: `SS.ss sec` under a second,
/// `H:MM:SS.ss` from one second on (always with `-C`).
pub fn timestr(t: Duration, verbose: bool) -> String {
    let secs = t.as_secs();
    let frac = f64::from(t.subsec_nanos()) / 1e9;
    if verbose || secs > 0 {
        format!(
            "{}:{:02}:{:05.2}",
            secs / 3600,
            (secs / 60) % 60,
            (secs % 60) as f64 + frac
        )
    } else {
        format!("{frac:05.2} sec")
    }
}

/// `x / t`, infinite for a zero time as in C.
fn per_second(x: f64, t: Duration) -> f64 {
    x / t.as_secs_f64()
}

/// Hex dump lines as qemu-io's `read -v` prints them: offset, 16 bytes in
/// hex, then the alphanumeric ones as text.
pub fn hexdump(out: &mut impl Write, offset: u64, data: &[u8]) -> std::io::Result<()> {
    for (i, line) in data.chunks(16).enumerate() {
        write!(out, "{:08x}:  ", offset + 16 * i as u64)?;
        for b in line {
            write!(out, "{b:02x} ")?;
        }
        let text: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_alphanumeric() {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        writeln!(out, " {text}")?;
    }
    Ok(())
}

/// The whole request against the disk, before it is cut into pieces: an
/// error names the request as given (a piece past the end would name only
/// itself), and a write that does not fit writes nothing rather than its
/// first pieces.
fn in_range(disk: &Disk, offset: u64, len: u64) -> engine::Result<()> {
    let size = disk.virtual_size();
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(engine::Error::OutOfRange { offset, len, size }),
    }
}

/// Why a command failed. Its text is the line the command printed last
/// (qemu-io's).
#[derive(Debug, thiserror::Error)]
pub enum CmdFailure {
    /// The request was refused or failed: `op` is the command ("read",
    /// "write", "discard", "flush"), `path` the image. qemu-io names the
    /// error by its errno only, which is what the message says; `error`
    /// holds the engine's account.
    #[error("{op} failed: {}", errno_text(error))]
    Request {
        op: &'static str,
        path: PathBuf,
        error: engine::Error,
    },
    /// A write to an image opened read-only (qemu-io says so on standard
    /// error, with its prefix).
    #[error("Block node is read-only")]
    ReadOnly { path: PathBuf },
    /// `truncate` refused or failed: the message is qemu-io's, which it
    /// prints on standard error with its prefix.
    #[error("{message}")]
    Truncate { path: PathBuf, message: String },
    /// `read -P`: some byte of the range is not the pattern.
    #[error("Pattern verification failed at offset {offset}, {len} bytes")]
    PatternMismatch {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
}

/// The C library's text for the errno QEMU would return for `error`.
pub fn errno_text(error: &engine::Error) -> &'static str {
    use engine::CompressedWriteError as C;
    match error {
        engine::Error::ReadOnly => "Operation not permitted",
        engine::Error::Compressed(C::DataFile | C::Format) => "Operation not supported",
        engine::Error::Compressed(C::Misaligned { .. }) => "Invalid argument",
        engine::Error::Compressed(C::Allocated { .. }) => "Input/output error",
        engine::Error::Unsupported(_) => "Operation not supported",
        engine::Error::OutOfRange { .. } => "Input/output error",
        _ => "Input/output error",
    }
}

/// Why a session could not end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The clean close (flush, clear the dirty bit) failed.
    #[error("closing {path}")]
    Close {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
}

/// One command's output, as lines without their ends, and its failure.
#[derive(Debug)]
pub struct Executed {
    /// Everything the command printed, its failure line included.
    pub lines: Vec<String>,
    pub failure: Option<CmdFailure>,
}

/// One open image (and its backing chain) on which commands run in turn.
pub struct Session {
    disk: Disk,
    path: PathBuf,
    timing: bool,
    /// QEMU's `detect-zeroes`: a write whose data is all zeroes is made a
    /// write_zeroes, unmapping when `Some(true)`.
    detect_zeroes: Option<bool>,
    /// A zeroing is cut at multiples of this, and a piece shorter than it
    /// is written as zeroes (`with_zero_alignment`).
    zero_alignment: Option<u64>,
}

impl Session {
    /// Open the image at `path` as `opts` says; the error names the file at
    /// fault (the image or a file of its chain).
    pub async fn open(path: &Path, opts: &OpenOptions) -> Result<Session, OpenError> {
        let disk = open_image(path, opts).await?;
        Ok(Session {
            disk,
            path: path.to_owned(),
            timing: false,
            detect_zeroes: None,
            zero_alignment: None,
        })
    }

    /// Zero as QEMU's block layer does over a node whose preferred zeroing
    /// alignment is `align` that refuses shorter requests (blkdebug with
    /// `opt-write-zero`): the head and tail of a zeroing, up to and from
    /// its multiples, are written as zeroes; the whole units between are
    /// zeroed.
    pub fn with_zero_alignment(mut self, align: Option<u64>) -> Session {
        self.zero_alignment = align.filter(|&a| a > 0);
        self
    }

    /// Writes of zeroes become write_zeroes (`Some(unmap)`), as QEMU's
    /// `detect-zeroes=on` (`Some(false)`) or `unmap` with `discard=unmap`
    /// (`Some(true)`) make them.
    pub fn with_detect_zeroes(mut self, detect: Option<bool>) -> Session {
        self.detect_zeroes = detect;
        self
    }

    /// Print qemu-io's size, count and timing line after each request (as
    /// qemu-io does; its times make the output differ run to run).
    pub fn with_timing(mut self, timing: bool) -> Session {
        self.timing = timing;
        self
    }

    /// The opened image.
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// Run `cmd`, collecting what it prints. For commands whose output is
    /// small: a `read -v` of a large range is better streamed with
    /// [`Session::execute_to`].
    pub async fn execute(&self, cmd: &Cmd) -> Executed {
        let mut out = Vec::new();
        let result = self
            .execute_to(cmd, &mut out)
            .await
            .expect("writing to memory cannot fail");
        let text = String::from_utf8(out).expect("command output is ASCII");
        Executed {
            lines: text.lines().map(str::to_owned).collect(),
            failure: result.err(),
        }
    }

    /// Run `cmd`, writing its output to `out` as it goes (a hex dump a
    /// piece at a time, so memory stays bounded whatever length the
    /// command names). The outer error is `out`'s; the inner says whether
    /// the command failed, after its failure line was written (but for
    /// [`CmdFailure::ReadOnly`], whose line is the caller's to put on
    /// standard error). `Open`, `Close`, `Quit`, `Abort` and `Sigraise` do
    /// nothing: they are the caller's.
    pub async fn execute_to(
        &self,
        cmd: &Cmd,
        out: &mut impl Write,
    ) -> std::io::Result<Result<(), CmdFailure>> {
        let result = self.run(cmd, out).await?;
        if let Err(failure @ CmdFailure::Request { .. }) = &result {
            writeln!(out, "{failure}")?;
        }
        Ok(result)
    }

    /// The two report lines (or the `-C` line) of a request.
    fn report(
        &self,
        out: &mut impl Write,
        verb: &str,
        offset: u64,
        total: u64,
        t: Duration,
        report: Report,
    ) -> std::io::Result<()> {
        if report.quiet {
            return Ok(());
        }
        if report.csv && self.timing {
            return writeln!(
                out,
                "{total},1,{},{:.3},{:.3}",
                timestr(t, true),
                per_second(total as f64, t),
                per_second(1.0, t)
            );
        }
        writeln!(out, "{verb} {total}/{total} bytes at offset {offset}")?;
        if self.timing {
            writeln!(
                out,
                "{}, 1 ops; {} ({}/sec and {:.4} ops/sec)",
                cvtstr(total as f64),
                timestr(t, false),
                cvtstr(per_second(total as f64, t)),
                per_second(1.0, t)
            )?;
        }
        Ok(())
    }

    /// The command, its output written but for a request failure's line.
    async fn run(
        &self,
        cmd: &Cmd,
        out: &mut impl Write,
    ) -> std::io::Result<Result<(), CmdFailure>> {
        let disk = &self.disk;
        let failed = |op, error| {
            if matches!(error, engine::Error::ReadOnly) {
                return Err(CmdFailure::ReadOnly {
                    path: self.path.clone(),
                });
            }
            Err(CmdFailure::Request {
                op,
                path: self.path.clone(),
                error,
            })
        };
        let range = match cmd {
            // The VM state area lies past the disk: its bounds are the
            // engine's.
            Cmd::Read { vmstate: true, .. } | Cmd::Write { vmstate: true, .. } => None,
            Cmd::Read {
                op, offset, lens, ..
            }
            | Cmd::Write {
                op, offset, lens, ..
            } => Some((*op, *offset, lens.iter().sum())),
            Cmd::Discard { offset, len, .. } => Some(("discard", *offset, *len)),
            _ => None,
        };
        if let Some((op, offset, len)) = range {
            if let Err(e) = in_range(disk, offset, len) {
                return Ok(failed(op, e));
            }
        }
        let start = Instant::now();
        match cmd {
            Cmd::Read {
                op,
                offset,
                lens,
                pattern,
                verbose,
                report,
                vmstate,
            } => {
                let offset = *offset;
                let len: u64 = lens.iter().sum();
                // The range -P checks, in guest offsets.
                let check = pattern.map(|p| {
                    let from = offset + p.offset;
                    let to = p.len.map_or(offset + len, |l| from + l);
                    (p.byte, from, to)
                });
                let mut mismatch = false;
                let mut buf = Vec::new();
                // The hex dump follows the mismatch line, as in qemu-io,
                // so a verbose read keeps its data; only a dump of at
                // most one piece is held back (larger ones stream).
                let mut held: Option<Vec<u8>> = None;
                for (at, n) in pieces(offset, len) {
                    buf.resize(n as usize, 0);
                    let r = if *vmstate {
                        disk.read_vmstate(at, &mut buf).await
                    } else {
                        disk.read(at, &mut buf).await
                    };
                    if let Err(e) = r {
                        return Ok(failed(op, e));
                    }
                    if let Some((byte, from, to)) = check {
                        let lo = from.max(at);
                        let hi = to.min(at + n);
                        if lo < hi {
                            let s = &buf[(lo - at) as usize..(hi - at) as usize];
                            mismatch |= s.iter().any(|&b| b != byte);
                        }
                    }
                    if *verbose && !report.quiet {
                        if len <= PIECE {
                            held = Some(buf.clone());
                        } else {
                            hexdump(out, at, &buf)?;
                        }
                    }
                }
                let t = start.elapsed();
                let result = if let (true, Some((_, from, to))) = (mismatch, check) {
                    let failure = CmdFailure::PatternMismatch {
                        path: self.path.clone(),
                        offset: from,
                        len: to - from,
                    };
                    writeln!(out, "{failure}")?;
                    Err(failure)
                } else {
                    Ok(())
                };
                if let Some(data) = held {
                    hexdump(out, offset, &data)?;
                }
                self.report(out, "read", offset, len, t, *report)?;
                Ok(result)
            }
            Cmd::Write {
                op,
                offset,
                lens,
                data,
                fua,
                report,
                vmstate,
            } => {
                let offset = *offset;
                let len: u64 = lens.iter().sum();
                let mut result = match (data, self.detect_zeroes) {
                    // qemu-io saves VM state as it is given, whatever -c
                    // or detect-zeroes say.
                    (WriteData::Pattern(p) | WriteData::Compressed(p), _) if *vmstate => {
                        write_filled(disk, offset, len, *p, Fill::VmState).await
                    }
                    (WriteData::Zeroes { unmap }, _) => {
                        zero_aligned(disk, offset, len, *unmap, self.zero_alignment).await
                    }
                    // detect-zeroes turns a write of zeroes into zeroing,
                    // compressed or not, as QEMU's block layer does.
                    (WriteData::Pattern(0) | WriteData::Compressed(0), Some(unmap)) => {
                        zero_aligned(disk, offset, len, unmap, self.zero_alignment).await
                    }
                    (WriteData::Pattern(p), _) => {
                        write_filled(disk, offset, len, *p, Fill::Data).await
                    }
                    (WriteData::Compressed(p), _) => {
                        write_filled(disk, offset, len, *p, Fill::Compressed).await
                    }
                };
                if result.is_ok() && *fua {
                    result = disk.flush().await;
                }
                if let Err(e) = result {
                    return Ok(failed(op, e));
                }
                self.report(out, "wrote", offset, len, start.elapsed(), *report)?;
                Ok(Ok(()))
            }
            Cmd::Discard {
                offset,
                len,
                report,
            } => {
                if let Err(e) = disk.discard(*offset, *len).await {
                    return Ok(failed("discard", e));
                }
                self.report(out, "discard", *offset, *len, start.elapsed(), *report)?;
                Ok(Ok(()))
            }
            Cmd::Alloc { offset, count } => {
                let size = disk.virtual_size();
                let end = offset.saturating_add(*count).min(size);
                let mut at = *offset;
                let mut allocated = 0;
                while at < end {
                    let (held, n) = match self.allocated(at, end - at).await {
                        Ok(r) => r,
                        Err(e) => {
                            writeln!(out, "is_allocated failed: {}", errno_text(&e))?;
                            return Ok(Err(CmdFailure::Request {
                                op: "alloc",
                                path: self.path.clone(),
                                error: e,
                            }));
                        }
                    };
                    if n == 0 {
                        break;
                    }
                    if held {
                        allocated += n;
                    }
                    at += n;
                }
                let counted = end.saturating_sub(*offset);
                writeln!(
                    out,
                    "{allocated}/{counted} bytes allocated at offset {}",
                    cvtstr(*offset as f64)
                )?;
                Ok(Ok(()))
            }
            Cmd::Map => {
                let size = disk.virtual_size();
                let mut at = 0;
                while at < size {
                    let (first, mut n) = match self.allocated(at, size - at).await {
                        Ok(r) => r,
                        Err(e) => return Ok(failed("map", e)),
                    };
                    // Runs of the same answer print as one line.
                    while at + n < size {
                        match self.allocated(at + n, size - at - n).await {
                            Ok((a, m)) if a == first && m > 0 => n += m,
                            Ok(_) => break,
                            Err(e) => return Ok(failed("map", e)),
                        }
                    }
                    let what = if first {
                        "    allocated"
                    } else {
                        "not allocated"
                    };
                    writeln!(
                        out,
                        "{} (0x{n:x}) bytes {what} at offset {} (0x{at:x})",
                        cvtstr(n as f64),
                        cvtstr(at as f64)
                    )?;
                    at += n;
                }
                Ok(Ok(()))
            }
            Cmd::Length => {
                // QEMU's block layer counts a raw file in whole sectors.
                let len = match disk {
                    Disk::Raw(_) => disk.virtual_size().next_multiple_of(512),
                    Disk::Qcow2(_) => disk.virtual_size(),
                };
                writeln!(out, "{}", cvtstr(len as f64))?;
                Ok(Ok(()))
            }
            Cmd::Info => {
                self.info(out)?;
                Ok(Ok(()))
            }
            Cmd::Flush | Cmd::AioFlush => match disk.flush().await {
                Err(e) => Ok(failed("flush", e)),
                Ok(()) => Ok(Ok(())),
            },
            Cmd::Open { .. }
            | Cmd::Close
            | Cmd::Reopen { .. }
            | Cmd::Truncate { .. }
            | Cmd::Abort
            | Cmd::Sigraise(_)
            | Cmd::Quit => Ok(Ok(())),
        }
    }

    /// Whether this image itself holds `[offset, offset + len)`'s first
    /// bytes (data or zero clusters, not the backing file's), and for how
    /// many bytes the answer holds.
    async fn allocated(&self, offset: u64, len: u64) -> engine::Result<(bool, u64)> {
        match &self.disk {
            // A raw file holds all of itself.
            Disk::Raw(_) => Ok((true, len)),
            Disk::Qcow2(image) => {
                let (status, n) = image.block_status(offset, len).await?;
                Ok((matches!(status, Status::Data | Status::Zero), n.min(len)))
            }
        }
    }

    /// qemu-io's `info`: format, cluster size, where VM state would go,
    /// and the format's own information.
    fn info(&self, out: &mut impl Write) -> std::io::Result<()> {
        writeln!(out, "format name: {}", self.disk.format().name())?;
        let Some(image) = self.disk.qcow2() else {
            return Ok(());
        };
        let cluster = image.cluster_size();
        // VM state lives past the guest disk, at the first L1 entry the
        // disk does not use.
        let per_l1 = cluster * (cluster / 8);
        let vm_state = image.virtual_size().div_ceil(per_l1) * per_l1;
        writeln!(out, "cluster size: {}", cvtstr(cluster as f64))?;
        writeln!(out, "vm state offset: {}", cvtstr(vm_state as f64))?;
        let h = image.header();
        let v3 = h.version >= 3;
        use engine::format::header::{compat, incompat};
        writeln!(out, "Format specific information:")?;
        writeln!(out, "    compat: {}", if v3 { "1.1" } else { "0.10" })?;
        writeln!(out, "    compression type: {}", h.compression().name())?;
        if v3 {
            writeln!(
                out,
                "    lazy refcounts: {}",
                h.compatible_features & compat::LAZY_REFCOUNTS != 0
            )?;
        }
        writeln!(
            out,
            "    refcount bits: {}",
            1u32 << h.refcount_order.min(6)
        )?;
        if let Some(f) = h.data_file() {
            writeln!(out, "    data file: {f}")?;
            writeln!(out, "    data file raw: {}", h.data_file_raw())?;
        }
        if v3 {
            writeln!(
                out,
                "    corrupt: {}",
                h.incompatible_features & incompat::CORRUPT != 0
            )?;
            writeln!(
                out,
                "    extended l2: {}",
                h.incompatible_features & incompat::EXTENDED_L2 != 0
            )?;
        }
        Ok(())
    }

    /// End the session with a clean close (for qcow2: flush and clear the
    /// dirty bit; for a writable raw file: flush).
    /// `truncate`: set the virtual size to `size`, growing or shrinking
    /// (a shrink drops the data past the new end, as qemu-io's truncate
    /// does). Returns whether a qcow2 image shrank: its file then keeps
    /// the clusters freed at its end until the caller trims it with the
    /// image closed (`resize::trim_after_shrink`), as QEMU's driver cuts
    /// its file after a shrink.
    pub async fn truncate(
        &mut self,
        size: u64,
        prealloc: Option<&str>,
    ) -> Result<bool, CmdFailure> {
        let fail = |message: String| CmdFailure::Truncate {
            path: self.path.clone(),
            message,
        };
        if self.disk.device().is_read_only() {
            return Err(CmdFailure::ReadOnly {
                path: self.path.clone(),
            });
        }
        let current = self.disk.virtual_size();
        match prealloc.unwrap_or("off") {
            "off" => {}
            "metadata" | "falloc" | "full" if size < current => {
                return Err(fail(
                    "Preallocation can't be used for shrinking an image".into(),
                ))
            }
            m @ ("metadata" | "falloc" | "full") => {
                return Err(fail(format!(
                    "truncate with preallocation mode '{m}' is not supported by qcsim"
                )))
            }
            m => return Err(fail(format!("Invalid preallocation mode '{m}'"))),
        }
        match &mut self.disk {
            Disk::Raw(d) => {
                engine::dev::BlockDev::truncate(d, size)
                    .await
                    .map_err(|e| fail(format!("Failed to resize the file: {e}")))?;
                Ok(false)
            }
            Disk::Qcow2(img) => {
                if !size.is_multiple_of(512) {
                    return Err(fail("The new size must be a multiple of 512".into()));
                }
                img.resize(size).await.map_err(|e| fail(e.to_string()))?;
                Ok(size < current)
            }
        }
    }

    pub async fn close(self) -> Result<(), SessionError> {
        self.disk
            .close()
            .await
            .map_err(|error| SessionError::Close {
                path: self.path,
                error,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Cmd {
        parse_command(line).unwrap().unwrap()
    }

    fn parse_err(line: &str) -> String {
        parse_command(line).unwrap_err().to_string()
    }

    #[test]
    fn commands_parse_with_qemu_io_flags() {
        assert_eq!(
            parse("read -P 0xab 0 64k"),
            Cmd::Read {
                op: "read",
                offset: 0,
                lens: vec![65536],
                pattern: Some(PatternCheck {
                    byte: 0xab,
                    offset: 0,
                    len: None
                }),
                verbose: false,
                report: Report::default(),
                vmstate: false,
            }
        );
        assert_eq!(
            parse("read -vP171 -s 1 -l 2 1M 512"),
            Cmd::Read {
                op: "read",
                offset: 1 << 20,
                lens: vec![512],
                pattern: Some(PatternCheck {
                    byte: 171,
                    offset: 1,
                    len: Some(2)
                }),
                verbose: true,
                report: Report::default(),
                vmstate: false,
            }
        );
        assert!(matches!(
            parse("read -b 0 512"),
            Cmd::Read { vmstate: true, .. }
        ));
        assert!(matches!(
            parse("write -b -P 1 1T 4k"),
            Cmd::Write { vmstate: true, .. }
        ));
        assert_eq!(
            parse("write -q 512 1k"),
            Cmd::Write {
                op: "write",
                offset: 512,
                lens: vec![1024],
                data: WriteData::Pattern(0xcd),
                fua: false,
                report: Report {
                    quiet: true,
                    csv: false
                },
                vmstate: false,
            }
        );
        assert_eq!(
            parse("writev -P 3 0 512 1k"),
            Cmd::Write {
                op: "writev",
                offset: 0,
                lens: vec![512, 1024],
                data: WriteData::Pattern(3),
                fua: false,
                report: Report::default(),
                vmstate: false,
            }
        );
        assert_eq!(parse("write -zu 0 1M"), parse("write -z -u 0 1M"));
        assert_eq!(
            parse("alloc 4k"),
            Cmd::Alloc {
                offset: 4096,
                count: 512
            }
        );
        assert_eq!(parse("flush"), Cmd::Flush);
        assert_eq!(parse("aio_flush"), Cmd::AioFlush);
        assert_eq!(parse(" q "), Cmd::Quit);
        assert_eq!(parse("sigraise 9"), Cmd::Sigraise(9));
        assert_eq!(parse_command("   ").unwrap(), None);
    }

    /// `write -c` is a compressed write of the pattern; with `-z` qemu-io
    /// zeroes (it does not look at -c then); `-f` with it is refused and
    /// writev and aio_write have no -c, as in qemu-io.
    #[test]
    fn write_c_is_a_compressed_write() {
        let compressed = |line: &str| match parse(line) {
            Cmd::Write { data, .. } => data,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(compressed("write -c 0 64k"), WriteData::Compressed(0xcd));
        assert_eq!(
            compressed("write -c -P 0x11 64k 128k"),
            WriteData::Compressed(0x11)
        );
        assert_eq!(
            compressed("write -c -z 0 64k"),
            WriteData::Zeroes { unmap: false }
        );
        assert_eq!(
            parse_err("write -c -f 0 64k"),
            "-f and -b or -c cannot be specified at the same time"
        );
        assert_eq!(
            parse_err("writev -c 0 64k"),
            "writev: invalid option -- 'c'"
        );
        assert_eq!(
            parse_err("aio_write -c 0 64k"),
            "aio_write: invalid option -- 'c'"
        );
    }

    #[test]
    fn bad_commands_say_what_qemu_io_says() {
        let cases = [
            ("bogus 1 2", "command \"bogus\" not found", true),
            (
                "read 0 abc",
                "Parsing error: non-numeric argument, or extraneous/unrecognized suffix -- abc",
                false,
            ),
            (
                "read 0",
                "bad argument count 1 to read, expected 2 arguments",
                true,
            ),
            (
                "read -P 0x1ff 0 4k",
                "0x1ff is not a valid pattern byte",
                false,
            ),
            (
                "read -P 1 -s 3 -l 2 0 4",
                "pattern verification range exceeds end of read data",
                false,
            ),
            ("read -x 0 1", "read: invalid option -- 'x'", true),
            ("write -u 0 4k", "-u requires -z to be specified", false),
            (
                "write -z -P 1 0 4k",
                "Only one of -z, -P, and -s can be specified at the same time",
                false,
            ),
            ("flush now", "bad argument count 1 to flush", true),
        ];
        for (line, want, stderr) in cases {
            let e = parse_command(line).unwrap_err();
            assert!(e.message.starts_with(want), "{line}: {}", e.message);
            assert_eq!(e.stderr, stderr, "{line}");
        }
        assert!(parse_err("write 0 4G").starts_with("length cannot exceed"));
    }

    #[test]
    fn sizes_print_as_qemu_io_prints_them() {
        assert_eq!(cvtstr(4096.0), "4 KiB");
        assert_eq!(cvtstr(1536.0), "1.500 KiB");
        assert_eq!(cvtstr(512.0), "512 bytes");
        assert_eq!(cvtstr(0.0), "0 bytes");
        assert_eq!(cvtstr(82.484588), "82.484588 bytes");
        assert_eq!(cvtstr(134217728.0), "128 MiB");
        assert_eq!(cvtstr(f64::INFINITY), "inf EiB");
        assert_eq!(timestr(Duration::from_millis(5), false), "00.01 sec");
        assert_eq!(timestr(Duration::from_millis(61_250), false), "0:01:01.25");
    }

    #[test]
    fn patterns_parse_like_strtol_base_0() {
        assert_eq!(parse_pattern("0xcd").unwrap(), 0xcd);
        assert_eq!(parse_pattern("205").unwrap(), 205);
        assert_eq!(parse_pattern("017").unwrap(), 0o17);
        assert_eq!(parse_pattern("0").unwrap(), 0);
        for bad in ["256", "x", "-1", "0x", "09"] {
            assert!(parse_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hexdump_matches_qemu_io_layout() {
        let mut out = Vec::new();
        let mut data = vec![0xab; 16];
        data.extend_from_slice(b"Az0.");
        hexdump(&mut out, 0x20, &data).unwrap();
        let text = String::from_utf8(out).unwrap();
        let want = "00000020:  ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab  ................\n\
                    00000030:  41 7a 30 2e  Az0.\n";
        assert_eq!(text, want);
    }
}
