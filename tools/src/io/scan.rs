//! The words of one qemu-io command, read as qemu-io reads them: the
//! getopt-style scan of its flags (`scan`, `Opts`), numbers as qemu-io's
//! `cvtnum` (`parse_num`) and pattern bytes as C's `strtol`
//! ([`parse_pattern`]), each with qemu-io's message, and the error a bad
//! command line is ([`CmdError`], with the command's usage line). Below
//! the parser (`parse`), which builds each command from these.

use crate::qemu_args::{parse_size, ArgError};

use super::cmd::{PatternCheck, Report, MAX_REQUEST};

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

pub(super) fn err<T>(msg: impl Into<String>) -> Result<T, CmdError> {
    Err(CmdError {
        message: msg.into(),
        stderr: false,
        usage: None,
    })
}

pub(super) fn err_stderr<T>(msg: impl Into<String>) -> Result<T, CmdError> {
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

pub(super) const OPEN_USAGE: &str =
    "open [-rsCnkU] [-t cache] [-d discard] [-o options] [path] -- open the file specified by path";
const TRUNCATE_USAGE: &str =
    "truncate [-m prealloc_mode] off -- truncates the current file at the given offset";

/// A number as qemu-io's `cvtnum`, with its messages.
pub(super) fn parse_num(s: &str) -> Result<u64, CmdError> {
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
pub(super) struct Opts<'a> {
    pub(super) flags: Vec<(char, Option<&'a str>)>,
    pub(super) positional: Vec<&'a str>,
}

pub(super) fn scan<'a>(
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
    pub(super) fn has(&self, c: char) -> bool {
        self.flags.iter().any(|(f, _)| *f == c)
    }

    pub(super) fn value(&self, c: char) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(f, _)| *f == c)
            .and_then(|(_, v)| *v)
    }

    /// Every value of flag `c`, in order (`-o` may be given more than
    /// once).
    pub(super) fn values(&self, c: char) -> Vec<String> {
        self.flags
            .iter()
            .filter(|(f, _)| *f == c)
            .filter_map(|(_, v)| v.map(str::to_owned))
            .collect()
    }

    pub(super) fn report(&self) -> Report {
        Report {
            quiet: self.has('q'),
            csv: self.has('C'),
        }
    }

    /// The positional words must number between `min` and `max`.
    pub(super) fn count(&self, cmd: &str, min: usize, max: Option<usize>) -> Result<(), CmdError> {
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
    pub(super) fn offset_len(&self, cmd: &str) -> Result<(u64, u64), CmdError> {
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
    pub(super) fn offset_lens(&self, cmd: &str) -> Result<(u64, Vec<u64>), CmdError> {
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

    pub(super) fn pattern_check(&self, total: u64) -> Result<Option<PatternCheck>, CmdError> {
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
