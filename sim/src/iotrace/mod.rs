//! Guest I/O traces: what a real program asked of its disk, request by
//! request, to replay through the engine on the simulated disk.
//!
//! A trace is text (`format`): one request a line, byte offsets and lengths
//! in decimal, `w OFFSET LENGTH` (write), `r OFFSET LENGTH` (read),
//! `z OFFSET LENGTH` (write zeroes), `d OFFSET LENGTH` (discard) and `f`
//! (flush), a write, write zeroes or discard ending in `fua` when it is
//! force unit access; `#` starts a comment, blank lines are ignored. A trace carries
//! no data: a replayed write carries the self-describing data of
//! [`oracle::data`], as every write of a case does.
//!
//! Importers turn what people already record into traces: `strace` output
//! of a program writing a raw image file, and `blkparse`'s default text
//! output. `plan` turns a trace into a [`crate::case::Case`], so that a
//! trace runs, is checked and replays exactly as any case does.
//!
//! Everything here is pure (no files, no clock); input comes through
//! `BufRead`, one bounded line at a time (`compressed` decompresses zstd
//! or gzip input, recognised by its magic bytes, to a bounded size), and every problem is an error
//! naming its line, never a panic.

pub mod blkparse;
pub mod compressed;
pub mod format;
pub mod lines;
pub mod plan;
pub mod strace;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Longest request a trace may hold, in bytes (2 GiB, the most one Linux
/// `pwrite` moves).
pub const MAX_LENGTH: u64 = 1 << 31;
/// Where every request must end: the largest file offset.
pub const MAX_END: u64 = i64::MAX as u64;
/// Most requests one trace may hold (each costs a few dozen bytes).
pub const MAX_REQUESTS: usize = 1 << 24;

/// One guest request. Offsets and lengths are in bytes. `fua` marks a
/// request as force unit access (Linux REQ_FUA, NBD_CMD_FLAG_FUA, a write
/// through an `O_DSYNC` descriptor): once it completes, what it did is
/// durable, as if a flush of it alone had followed. A trace line says so
/// with a trailing `fua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    Write { offset: u64, length: u64, fua: bool },
    Read { offset: u64, length: u64 },
    WriteZeroes { offset: u64, length: u64, fua: bool },
    Discard { offset: u64, length: u64, fua: bool },
    Flush,
}

/// The kinds of request, as a trace spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Write,
    Read,
    WriteZeroes,
    Discard,
    Flush,
}

impl Kind {
    /// The letter that starts a trace line.
    pub fn letter(self) -> char {
        match self {
            Kind::Write => 'w',
            Kind::Read => 'r',
            Kind::WriteZeroes => 'z',
            Kind::Discard => 'd',
            Kind::Flush => 'f',
        }
    }

    fn from_letter(s: &str) -> Option<Kind> {
        Some(match s {
            "w" => Kind::Write,
            "r" => Kind::Read,
            "z" => Kind::WriteZeroes,
            "d" => Kind::Discard,
            "f" => Kind::Flush,
            _ => return None,
        })
    }

    /// Whether a request of this kind may be FUA: those that change the
    /// disk (a read changes nothing to make durable; a flush is already
    /// all FUA would add).
    pub fn takes_fua(self) -> bool {
        matches!(self, Kind::Write | Kind::WriteZeroes | Kind::Discard)
    }

    /// What the kind is called in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Write => "write",
            Kind::Read => "read",
            Kind::WriteZeroes => "write_zeroes",
            Kind::Discard => "discard",
            Kind::Flush => "flush",
        }
    }
}

impl Request {
    /// A request of `kind` over `offset..offset + length`, if a trace may
    /// hold it: at least one byte, at most [`MAX_LENGTH`], ending by
    /// [`MAX_END`]. (A flush ignores both.)
    pub fn new(kind: Kind, offset: u64, length: u64) -> Result<Request, Problem> {
        if kind == Kind::Flush {
            return Ok(Request::Flush);
        }
        if length == 0 {
            return Err(Problem::ZeroLength);
        }
        if length > MAX_LENGTH {
            return Err(Problem::TooLong(length));
        }
        if offset.checked_add(length).is_none_or(|end| end > MAX_END) {
            return Err(Problem::PastEnd { offset, length });
        }
        let fua = false;
        Ok(match kind {
            Kind::Write => Request::Write {
                offset,
                length,
                fua,
            },
            Kind::Read => Request::Read { offset, length },
            Kind::WriteZeroes => Request::WriteZeroes {
                offset,
                length,
                fua,
            },
            Kind::Discard => Request::Discard {
                offset,
                length,
                fua,
            },
            Kind::Flush => unreachable!("handled above"),
        })
    }

    /// The same request with its FUA flag set to `on`, for the kinds that
    /// take one ([`Kind::takes_fua`]); a read or a flush comes back
    /// unchanged (as `case::Op::with_fua` does), so callers that read FUA
    /// from input refuse it on those themselves, naming the line.
    pub fn with_fua(mut self, on: bool) -> Request {
        if let Request::Write { fua, .. }
        | Request::WriteZeroes { fua, .. }
        | Request::Discard { fua, .. } = &mut self
        {
            *fua = on;
        }
        self
    }

    /// Whether the request is FUA.
    pub fn is_fua(&self) -> bool {
        matches!(
            self,
            Request::Write { fua: true, .. }
                | Request::WriteZeroes { fua: true, .. }
                | Request::Discard { fua: true, .. }
        )
    }

    pub fn kind(&self) -> Kind {
        match self {
            Request::Write { .. } => Kind::Write,
            Request::Read { .. } => Kind::Read,
            Request::WriteZeroes { .. } => Kind::WriteZeroes,
            Request::Discard { .. } => Kind::Discard,
            Request::Flush => Kind::Flush,
        }
    }

    /// The bytes the request covers, as (offset, length); None for a flush.
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            Request::Write { offset, length, .. }
            | Request::Read { offset, length }
            | Request::WriteZeroes { offset, length, .. }
            | Request::Discard { offset, length, .. } => Some((offset, length)),
            Request::Flush => None,
        }
    }
}

/// As a trace line: `w 8192 4096`, `w 8192 4096 fua`, `f`.
impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.range() {
            Some((offset, length)) => write!(f, "{} {offset} {length}", self.kind().letter())?,
            None => write!(f, "{}", self.kind().letter())?,
        }
        if self.is_fua() {
            write!(f, " {FUA_WORD}")?;
        }
        Ok(())
    }
}

/// The word that ends a FUA request's line.
pub const FUA_WORD: &str = "fua";

/// A request and the line of the input it came from (counting from 1):
/// the trace file's, or the recording's for an imported trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub line: u64,
    pub request: Request,
}

/// A whole trace, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trace {
    pub entries: Vec<Entry>,
}

impl Trace {
    /// Append a request, refusing more than [`MAX_REQUESTS`].
    pub fn push(&mut self, line: u64, request: Request) -> Result<(), TraceError> {
        if self.entries.len() >= MAX_REQUESTS {
            return Err(TraceError::Line {
                line,
                problem: Problem::TooMany,
            });
        }
        self.entries.push(Entry { line, request });
        Ok(())
    }

    pub fn requests(&self) -> impl Iterator<Item = Request> + '_ {
        self.entries.iter().map(|e| e.request)
    }

    /// How many requests of each kind, and the bytes they cover.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for r in self.requests() {
            let (n, bytes) = match r.kind() {
                Kind::Write => (&mut c.writes, &mut c.write_bytes),
                Kind::Read => (&mut c.reads, &mut c.read_bytes),
                Kind::WriteZeroes => (&mut c.write_zeroes, &mut c.zero_bytes),
                Kind::Discard => (&mut c.discards, &mut c.discard_bytes),
                Kind::Flush => {
                    c.flushes += 1;
                    continue;
                }
            };
            *n += 1;
            *bytes += r.range().map_or(0, |(_, l)| l);
            c.fua += u64::from(r.is_fua());
        }
        c
    }

    /// Where the last request ends, in bytes: the least disk that holds
    /// the trace.
    pub fn end(&self) -> u64 {
        self.requests()
            .filter_map(|r| r.range())
            .map(|(o, l)| o + l)
            .max()
            .unwrap_or(0)
    }
}

/// What a trace holds, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub writes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub write_zeroes: u64,
    pub zero_bytes: u64,
    pub discards: u64,
    pub discard_bytes: u64,
    pub flushes: u64,
    /// Writes, write_zeroes and discards that are FUA (counted in their
    /// kind's too).
    pub fua: u64,
}

impl fmt::Display for Counts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} writes ({} bytes), {} reads ({} bytes), {} write_zeroes ({} bytes), \
             {} discards ({} bytes), {} flushes",
            self.writes,
            self.write_bytes,
            self.reads,
            self.read_bytes,
            self.write_zeroes,
            self.zero_bytes,
            self.discards,
            self.discard_bytes,
            self.flushes
        )?;
        // Only when there are any, so that a trace without FUA is
        // described exactly as before the flag existed.
        if self.fua > 0 {
            write!(f, "; {} FUA requests", self.fua)?;
        }
        Ok(())
    }
}

/// Why a trace, or a recording to import, was refused.
///
/// As with `CaseError`, no variant reports a `source()`: the message
/// carries its cause, and a chain printer would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// One line is wrong.
    #[error("line {line}: {problem}")]
    Line { line: u64, problem: Problem },
    /// The input could not be read.
    #[error("reading the input: {error}")]
    Io { error: std::io::Error },
    /// The input as a whole cannot be imported (it names what to choose).
    #[error("{0}")]
    Input(String),
}

impl TraceError {
    /// The line a problem is on, if it is on one.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Line { line, .. } => Some(*line),
            _ => None,
        }
    }
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("unknown request {0:?}: expected w, r, z, d or f")]
    UnknownRequest(String),
    #[error("{kind} needs an offset and a length: `{letter} OFFSET LENGTH`", kind = .0.name(), letter = .0.letter())]
    MissingField(Kind),
    #[error("{field} {text:?} is not a decimal number below 2^64")]
    Number { field: &'static str, text: String },
    #[error("unexpected {0:?} after the request (a comment starts with #)")]
    Extra(String),
    #[error("a {kind} cannot be FUA: only w, z and d take `{FUA_WORD}`", kind = .0.name())]
    FuaNotTaken(Kind),
    #[error("length 0: a request covers at least one byte")]
    ZeroLength,
    #[error("length {0} is more than the {MAX_LENGTH} bytes one request may cover")]
    TooLong(u64),
    #[error("offset {offset} + length {length} ends past byte {MAX_END}, the largest file offset")]
    PastEnd { offset: u64, length: u64 },
    #[error("longer than {max} bytes")]
    LineTooLong { max: usize },
    #[error("not UTF-8 text")]
    NotText,
    #[error("more than {MAX_REQUESTS} requests in one trace")]
    TooMany,
    /// A recording's line that does not say what its importer expects.
    #[error("{0}")]
    Syntax(String),
}

/// What an importer made of its input besides the trace: what it left out
/// and what it changed, each with a count, for the imported trace's
/// header and the command's output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Input lines the importer read.
    pub lines: u64,
    /// Calls or events it left out, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// What it turned into something else, by what.
    pub notes: BTreeMap<String, u64>,
}

impl Summary {
    pub(crate) fn skip(&mut self, why: impl Into<String>) {
        *self.skipped.entry(why.into()).or_default() += 1;
    }

    pub(crate) fn note(&mut self, what: impl Into<String>) {
        *self.notes.entry(what.into()).or_default() += 1;
    }

    /// One line per reason: `left out: 3 failed calls`.
    pub fn describe(&self) -> Vec<String> {
        let skipped = self
            .skipped
            .iter()
            .map(|(k, n)| format!("left out: {n} {k}"));
        let notes = self.notes.iter().map(|(k, n)| format!("{n} {k}"));
        skipped.chain(notes).collect()
    }
}

/// An imported trace and what the import left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Import {
    pub trace: Trace,
    pub summary: Summary,
}

/// Requests an importer read from one call or event, with where they came
/// from: the line, and the source (a file descriptor, a device) that the
/// import keeps one of.
pub(crate) struct Sourced<K> {
    pub line: u64,
    pub source: K,
    pub requests: Vec<Request>,
    /// Whether they move data: a flush of another file does not make it
    /// the recording's image.
    pub data: bool,
}

/// The trace of one source's requests: `given`, or the only one whose
/// requests move data (of a recording of flushes only, the only one); a
/// recording of several is refused, `several` saying how to choose
/// (given the list of sources). The others' are left out as `other`.
pub(crate) fn keep_one_source<K: Ord + Copy>(
    items: Vec<Sourced<K>>,
    given: Option<K>,
    mut summary: Summary,
    name: impl Fn(&K) -> String,
    several: impl FnOnce(String) -> String,
    other: &str,
) -> Result<Import, TraceError> {
    let mut sources: BTreeSet<K> = items.iter().filter(|i| i.data).map(|i| i.source).collect();
    if sources.is_empty() {
        sources = items.iter().map(|i| i.source).collect();
    }
    let chosen = match given {
        Some(k) => Some(k),
        None if sources.len() > 1 => {
            let list: Vec<String> = sources.iter().map(&name).collect();
            return Err(TraceError::Input(several(list.join(", "))));
        }
        None => sources.first().copied(),
    };
    let mut trace = Trace::default();
    for item in items {
        if Some(item.source) != chosen {
            summary.skip(other);
            continue;
        }
        for r in item.requests {
            trace.push(item.line, r)?;
        }
    }
    Ok(Import { trace, summary })
}
