//! The trace format: parsing and writing.
//!
//! ```text
//! # mke2fs on a 16 MiB raw file
//! w 1024 3072     # a write of 3072 bytes at byte 1024
//! w 8192 4096 fua # a FUA write: durable once it completes
//! z 16711680 65536
//! d 0 16777216
//! r 0 4096
//! f
//! ```
//!
//! One request a line: a letter, then for all but `f` a decimal byte
//! offset and a decimal byte length (at least 1, at most
//! [`super::MAX_LENGTH`], ending by [`super::MAX_END`]), separated by
//! spaces or tabs; a `w`, `z` or `d` may end with the word `fua` (force
//! unit access), which `r` and `f` refuse. `#` starts a comment that runs
//! to the end of the line; blank lines are ignored. Numbers are plain
//! decimal digits: no sign, suffix or hex. A trace from before the word
//! existed reads as it did: it has no FUA request.

use std::io::{BufRead, Write};

use super::lines::for_each_line;
use super::{Kind, Problem, Request, Trace, TraceError, FUA_WORD};

/// Longest line a trace may have, comment included.
pub const MAX_LINE: usize = 4096;

/// Parse a whole trace.
pub fn parse<R: BufRead>(input: R) -> Result<Trace, TraceError> {
    let mut trace = Trace::default();
    for_each_line(input, MAX_LINE, false, |line, text| {
        match parse_line(text).map_err(|problem| TraceError::Line { line, problem })? {
            Some(request) => trace.push(line, request),
            None => Ok(()),
        }
    })?;
    Ok(trace)
}

/// Parse a trace held in memory.
pub fn parse_str(text: &str) -> Result<Trace, TraceError> {
    parse(text.as_bytes())
}

/// One line: a request, or None for a blank or comment line.
pub fn parse_line(text: &str) -> Result<Option<Request>, Problem> {
    let body = text.split_once('#').map_or(text, |(b, _)| b);
    let mut fields = body.split([' ', '\t']).filter(|f| !f.is_empty());
    let Some(letter) = fields.next() else {
        return Ok(None);
    };
    let kind = Kind::from_letter(letter).ok_or_else(|| Problem::UnknownRequest(letter.into()))?;
    let (offset, length) = if kind == Kind::Flush {
        (0, 0)
    } else {
        let offset = number("offset", fields.next(), kind)?;
        let length = number("length", fields.next(), kind)?;
        (offset, length)
    };
    // The optional last word; anything else there is refused as before.
    let fua = match fields.next() {
        Some(FUA_WORD) if kind.takes_fua() => true,
        Some(FUA_WORD) => return Err(Problem::FuaNotTaken(kind)),
        Some(extra) => return Err(Problem::Extra(extra.into())),
        None => false,
    };
    if let Some(extra) = fields.next() {
        return Err(Problem::Extra(extra.into()));
    }
    Request::new(kind, offset, length).map(|r| Some(r.with_fua(fua)))
}

fn number(field: &'static str, text: Option<&str>, kind: Kind) -> Result<u64, Problem> {
    let text = text.ok_or(Problem::MissingField(kind))?;
    let bad = || Problem::Number {
        field,
        text: text.into(),
    };
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse().map_err(|_| bad())
}

/// Write `requests` as a trace, after `header` as comment lines.
pub fn write<'a, W: Write>(
    mut out: W,
    header: &[String],
    requests: impl IntoIterator<Item = &'a Request>,
) -> std::io::Result<()> {
    for h in header {
        for l in h.lines() {
            writeln!(out, "# {l}")?;
        }
    }
    for r in requests {
        writeln!(out, "{r}")?;
    }
    out.flush()
}

/// A trace as text, one request a line.
pub fn to_text(trace: &Trace) -> String {
    let mut out = Vec::new();
    let requests: Vec<Request> = trace.requests().collect();
    write(&mut out, &[], &requests).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("a trace is ASCII")
}
