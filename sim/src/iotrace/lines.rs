//! Reading input one bounded line at a time: a line longer than the bound
//! is an error naming it, so no input, however long its lines, makes a
//! reader hold more than the bound.

use std::borrow::Cow;
use std::io::{BufRead, Read};

use super::{Problem, TraceError};

/// Call `f` with each line of `input` (numbered from 1, without its line
/// end, `\r\n` or `\n`) until the input ends or `f` fails. A line longer
/// than `max` bytes is an error; with `lossy`, bytes that are not UTF-8
/// are replaced, otherwise refused.
pub(crate) fn for_each_line<R: BufRead>(
    mut input: R,
    max: usize,
    lossy: bool,
    mut f: impl FnMut(u64, &str) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = (&mut input)
            .take(max as u64 + 2)
            .read_until(b'\n', &mut buf)
            .map_err(|error| TraceError::Io { error })?;
        if n == 0 {
            return Ok(());
        }
        line += 1;
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        if buf.len() > max {
            return Err(TraceError::Line {
                line,
                problem: Problem::LineTooLong { max },
            });
        }
        let text = if lossy {
            String::from_utf8_lossy(&buf)
        } else {
            match std::str::from_utf8(&buf) {
                Ok(s) => Cow::Borrowed(s),
                Err(_) => {
                    return Err(TraceError::Line {
                        line,
                        problem: Problem::NotText,
                    })
                }
            }
        };
        f(line, &text)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8], max: usize) -> Result<Vec<(u64, String)>, TraceError> {
        let mut out = Vec::new();
        for_each_line(input, max, false, |n, s| {
            out.push((n, s.to_string()));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn lines_are_numbered_and_stripped() {
        let got = collect(b"a\r\nb\n\nc", 8).unwrap();
        let want: Vec<(u64, String)> = [(1, "a"), (2, "b"), (3, ""), (4, "c")]
            .iter()
            .map(|&(n, s)| (n, s.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_long_line_is_refused_by_number() {
        let e = collect(b"ok\n0123456789\n", 8).unwrap_err();
        assert_eq!(e.to_string(), "line 2: longer than 8 bytes");
        // Exactly the bound is fine, with or without a line end.
        assert!(collect(b"01234567\n01234567", 8).is_ok());
        assert!(collect(b"01234567\r\n", 8).is_ok());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused_unless_lossy() {
        let e = collect(b"w 0 1\n\xff\n", 8).unwrap_err();
        assert_eq!(e.to_string(), "line 2: not UTF-8 text");
        let mut seen = Vec::new();
        for_each_line(&b"\xffx"[..], 8, true, |_, s| {
            seen.push(s.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["\u{fffd}x"]);
    }
}
