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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iotrace::{MAX_END, MAX_LENGTH};

    fn err(text: &str) -> String {
        parse_str(text).unwrap_err().to_string()
    }

    #[test]
    fn every_request_kind_comments_and_blank_lines() {
        let t = parse_str(
            "# a header\n\nw 0 4096\n  r\t512 512  # trailing comment\nz 8192 1\nd 1 2\nf\nf # done\n",
        )
        .unwrap();
        let got: Vec<(u64, Request)> = t.entries.iter().map(|e| (e.line, e.request)).collect();
        assert_eq!(
            got,
            [
                (
                    3,
                    Request::Write {
                        offset: 0,
                        length: 4096,
                        fua: false
                    }
                ),
                (
                    4,
                    Request::Read {
                        offset: 512,
                        length: 512
                    }
                ),
                (
                    5,
                    Request::WriteZeroes {
                        offset: 8192,
                        length: 1,
                        fua: false
                    }
                ),
                (
                    6,
                    Request::Discard {
                        offset: 1,
                        length: 2,
                        fua: false
                    }
                ),
                (7, Request::Flush),
                (8, Request::Flush),
            ]
        );
        assert_eq!(to_text(&t), "w 0 4096\nr 512 512\nz 8192 1\nd 1 2\nf\nf\n");
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        assert_eq!(
            err("w 0 1\nx 0 1\n"),
            "line 2: unknown request \"x\": expected w, r, z, d or f"
        );
        assert_eq!(
            err("\n\nw 0\n"),
            "line 3: write needs an offset and a length: `w OFFSET LENGTH`"
        );
        assert_eq!(
            err("d\n"),
            "line 1: discard needs an offset and a length: `d OFFSET LENGTH`"
        );
        assert_eq!(
            err("w -1 5\n"),
            "line 1: offset \"-1\" is not a decimal number below 2^64"
        );
        assert_eq!(
            err("w 0 0x10\n"),
            "line 1: length \"0x10\" is not a decimal number below 2^64"
        );
        assert_eq!(
            err("w 0 99999999999999999999\n"),
            "line 1: length \"99999999999999999999\" is not a decimal number below 2^64"
        );
        assert_eq!(
            err("f 0\n"),
            "line 1: unexpected \"0\" after the request (a comment starts with #)"
        );
        assert_eq!(
            err("w 0 1 2\n"),
            "line 1: unexpected \"2\" after the request (a comment starts with #)"
        );
        assert_eq!(
            err("z 4096 0\n"),
            "line 1: length 0: a request covers at least one byte"
        );
        assert_eq!(
            err(&format!("w 0 {}\n", MAX_LENGTH + 1)),
            format!(
                "line 1: length {} is more than the {MAX_LENGTH} bytes one request may cover",
                MAX_LENGTH + 1
            )
        );
        assert_eq!(
            err(&format!("w {} 2\n", u64::MAX - 1)),
            format!(
                "line 1: offset {} + length 2 ends past byte {MAX_END}, the largest file offset",
                u64::MAX - 1
            )
        );
        assert_eq!(
            err(&format!("w {MAX_END} 1\n")),
            format!(
                "line 1: offset {MAX_END} + length 1 ends past byte {MAX_END}, the largest file offset"
            )
        );
        assert!(parse_str(&format!("w {} 1\n", MAX_END - 1)).is_ok());
        let long = format!("w 0 1 #{}\n", "x".repeat(MAX_LINE));
        assert_eq!(err(&long), format!("line 1: longer than {MAX_LINE} bytes"));
    }

    #[test]
    fn fua_is_a_last_word_of_writes_zeroes_and_discards() {
        let t = parse_str("w 0 4096 fua\nz 4096 512\tfua # durable\nd 0 1 fua\nw 0 1\n").unwrap();
        let fua: Vec<bool> = t.requests().map(|r| r.is_fua()).collect();
        assert_eq!(fua, [true, true, true, false]);
        assert_eq!(
            t.entries[0].request,
            Request::Write {
                offset: 0,
                length: 4096,
                fua: true
            }
        );
        // The writer prints it where the parser reads it.
        assert_eq!(
            to_text(&t),
            "w 0 4096 fua\nz 4096 512 fua\nd 0 1 fua\nw 0 1\n"
        );
        assert_eq!(t.counts().fua, 3);
    }

    #[test]
    fn fua_is_refused_where_it_means_nothing_or_is_misplaced() {
        assert_eq!(
            err("w 0 1\nr 0 4096 fua\n"),
            "line 2: a read cannot be FUA: only w, z and d take `fua`"
        );
        assert_eq!(
            err("f fua\n"),
            "line 1: a flush cannot be FUA: only w, z and d take `fua`"
        );
        // Only as the last word, spelled as written, once.
        assert_eq!(
            err("w fua 0 1\n"),
            "line 1: offset \"fua\" is not a decimal number below 2^64"
        );
        assert_eq!(
            err("w 0 1 FUA\n"),
            "line 1: unexpected \"FUA\" after the request (a comment starts with #)"
        );
        assert_eq!(
            err("w 0 1 fua fua\n"),
            "line 1: unexpected \"fua\" after the request (a comment starts with #)"
        );
        assert_eq!(
            err("z 0 0 fua\n"),
            "line 1: length 0: a request covers at least one byte"
        );
    }

    #[test]
    fn errors_carry_their_line() {
        let e = parse_str("f\nw\n").unwrap_err();
        assert_eq!(e.line(), Some(2));
    }
}
