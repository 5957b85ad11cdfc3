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
pub fn for_each_line<R: BufRead>(
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
