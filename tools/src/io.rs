//! The qemu-io subset on an image: the command parser ([`parse_command`]:
//! `read`, `write`, `discard`, `flush`, `quit`, with qemu-io's flags) and
//! its executor, a [`Session`] holding one open of the image (and its
//! locks) across commands. A command's output follows qemu-io's shape
//! ("wrote N/N bytes at offset M", "Pattern verification failed at offset
//! N, N bytes", `read -v` hex dumps) without its timing line, so that runs
//! are reproducible; a failing command prints its failure as qemu-io does
//! and reports it as a [`CmdFailure`], and the session goes on.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::files::{open_image, Disk, OpenError, OpenOptions};
use crate::qemu_args::parse_size;

/// Largest single request, as qemu-io's limit (2 GiB less one sector).
pub const MAX_REQUEST: u64 = (i32::MAX as u64) & !511;

/// Requests are carried out in pieces of at most this many bytes, so that
/// memory stays bounded whatever length a command names.
const PIECE: u64 = 16 << 20;

/// Default data byte of `write` without `-P`, as in qemu-io.
const DEFAULT_PATTERN: u8 = 0xcd;

/// One parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    Read {
        offset: u64,
        len: u64,
        /// Expected byte of every byte read (`-P`).
        pattern: Option<u8>,
        /// Hex dump the data (`-v`).
        verbose: bool,
        quiet: bool,
    },
    Write {
        offset: u64,
        len: u64,
        data: WriteData,
        quiet: bool,
    },
    Discard {
        offset: u64,
        len: u64,
        quiet: bool,
    },
    Flush,
    /// End the session; later commands are not run.
    Quit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteData {
    Pattern(u8),
    /// `-z`, with `-u` to allow unmapping.
    Zeroes {
        unmap: bool,
    },
}

/// A command line that could not be parsed; the message is what qemu-io
/// would say, more or less.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CmdError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, CmdError> {
    Err(CmdError(msg.into()))
}

fn parse_num(s: &str) -> Result<u64, CmdError> {
    parse_size(s).map_err(|e| CmdError(format!("parsing error: {e}")))
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
                        None => return err(format!("{cmd}: option -{c} needs a value")),
                    }
                };
                flags.push((c, Some(value)));
                break;
            } else {
                return err(format!("{cmd}: invalid option -- '{c}'"));
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

    /// The two positional words `off len`, parsed.
    fn offset_len(&self, cmd: &str) -> Result<(u64, u64), CmdError> {
        let [off, len] = self.positional[..] else {
            return err(format!(
                "{cmd}: expected 2 arguments (offset and length), got {}",
                self.positional.len()
            ));
        };
        let offset = parse_num(off)?;
        let len_v = parse_num(len)?;
        if len_v > MAX_REQUEST {
            return err(format!("length cannot exceed {MAX_REQUEST}, given {len}"));
        }
        Ok((offset, len_v))
    }
}

/// Parse one command line. `Ok(None)` for a blank line.
pub fn parse_command(line: &str) -> Result<Option<Cmd>, CmdError> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&name, rest)) = words.split_first() else {
        return Ok(None);
    };
    let cmd = match name {
        "read" | "r" => {
            let o = scan(name, rest, "vqC", "P")?;
            let pattern = o.value('P').map(parse_pattern).transpose()?;
            let (offset, len) = o.offset_len(name)?;
            Cmd::Read {
                offset,
                len,
                pattern,
                verbose: o.has('v'),
                quiet: o.has('q'),
            }
        }
        "write" | "w" => {
            let o = scan(name, rest, "zuqC", "P")?;
            let zero = o.has('z');
            if o.has('u') && !zero {
                return err("-u requires -z to be specified");
            }
            if zero && o.value('P').is_some() {
                return err("-z and -P cannot be specified at the same time");
            }
            let data = if zero {
                WriteData::Zeroes { unmap: o.has('u') }
            } else {
                let p = o.value('P').map(parse_pattern).transpose()?;
                WriteData::Pattern(p.unwrap_or(DEFAULT_PATTERN))
            };
            let (offset, len) = o.offset_len(name)?;
            Cmd::Write {
                offset,
                len,
                data,
                quiet: o.has('q'),
            }
        }
        "discard" | "d" => {
            let o = scan(name, rest, "qC", "")?;
            let (offset, len) = o.offset_len(name)?;
            Cmd::Discard {
                offset,
                len,
                quiet: o.has('q'),
            }
        }
        "flush" | "f" => {
            if !rest.is_empty() {
                return err("flush: takes no arguments");
            }
            Cmd::Flush
        }
        "quit" | "q" => {
            if !rest.is_empty() {
                return err("quit: takes no arguments");
            }
            Cmd::Quit
        }
        other => return err(format!("command \"{other}\" not found")),
    };
    Ok(Some(cmd))
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
    /// "write", "discard", "flush"), `path` the image.
    #[error("{op} failed: {error}")]
    Request {
        op: &'static str,
        path: PathBuf,
        error: engine::Error,
    },
    /// `read -P`: some byte of the range is not the pattern.
    #[error("Pattern verification failed at offset {offset}, {len} bytes")]
    PatternMismatch {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
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
}

impl Session {
    /// Open the image at `path` as `opts` says; the error names the file at
    /// fault (the image or a file of its chain).
    pub async fn open(path: &Path, opts: &OpenOptions) -> Result<Session, OpenError> {
        let disk = open_image(path, opts).await?;
        Ok(Session {
            disk,
            path: path.to_owned(),
        })
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
    /// the command failed, after its failure line was written. `Quit` does
    /// nothing: ending the session is the caller's.
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

    /// The command, its output written but for a request failure's line.
    async fn run(
        &self,
        cmd: &Cmd,
        out: &mut impl Write,
    ) -> std::io::Result<Result<(), CmdFailure>> {
        let disk = &self.disk;
        let failed = |op, error| {
            Err(CmdFailure::Request {
                op,
                path: self.path.clone(),
                error,
            })
        };
        let pieces = |offset: u64, len: u64| {
            (0..len.div_ceil(PIECE)).map(move |i| {
                let at = i * PIECE;
                (offset + at, (len - at).min(PIECE))
            })
        };
        let range = match *cmd {
            Cmd::Read { offset, len, .. } => Some(("read", offset, len)),
            Cmd::Write { offset, len, .. } => Some(("write", offset, len)),
            Cmd::Discard { offset, len, .. } => Some(("discard", offset, len)),
            Cmd::Flush | Cmd::Quit => None,
        };
        if let Some((op, offset, len)) = range {
            if let Err(e) = in_range(disk, offset, len) {
                return Ok(failed(op, e));
            }
        }
        match *cmd {
            Cmd::Read {
                offset,
                len,
                pattern,
                verbose,
                quiet,
            } => {
                let mut mismatch = false;
                let mut buf = Vec::new();
                for (at, n) in pieces(offset, len) {
                    buf.resize(n as usize, 0);
                    if let Err(e) = disk.read(at, &mut buf).await {
                        return Ok(failed("read", e));
                    }
                    if let Some(p) = pattern {
                        mismatch |= buf.iter().any(|&b| b != p);
                    }
                    if verbose && !quiet {
                        hexdump(out, at, &buf)?;
                    }
                }
                let result = if mismatch {
                    let failure = CmdFailure::PatternMismatch {
                        path: self.path.clone(),
                        offset,
                        len,
                    };
                    writeln!(out, "{failure}")?;
                    Err(failure)
                } else {
                    Ok(())
                };
                if !quiet {
                    writeln!(out, "read {len}/{len} bytes at offset {offset}")?;
                }
                Ok(result)
            }
            Cmd::Write {
                offset,
                len,
                data,
                quiet,
            } => {
                let result = match data {
                    WriteData::Zeroes { unmap } => disk.write_zeroes(offset, len, unmap).await,
                    WriteData::Pattern(p) => {
                        let buf = vec![p; len.min(PIECE) as usize];
                        let mut result = Ok(());
                        for (at, n) in pieces(offset, len) {
                            result = disk.write(at, &buf[..n as usize]).await;
                            if result.is_err() {
                                break;
                            }
                        }
                        result
                    }
                };
                if let Err(e) = result {
                    return Ok(failed("write", e));
                }
                if !quiet {
                    writeln!(out, "wrote {len}/{len} bytes at offset {offset}")?;
                }
                Ok(Ok(()))
            }
            Cmd::Discard { offset, len, quiet } => {
                if let Err(e) = disk.discard(offset, len).await {
                    return Ok(failed("discard", e));
                }
                if !quiet {
                    writeln!(out, "discard {len}/{len} bytes at offset {offset}")?;
                }
                Ok(Ok(()))
            }
            Cmd::Flush => match disk.flush().await {
                Err(e) => Ok(failed("flush", e)),
                Ok(()) => Ok(Ok(())),
            },
            Cmd::Quit => Ok(Ok(())),
        }
    }

    /// End the session with a clean close (for qcow2: flush and clear the
    /// dirty bit; for a writable raw file: flush).
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
                offset: 0,
                len: 65536,
                pattern: Some(0xab),
                verbose: false,
                quiet: false
            }
        );
        assert_eq!(
            parse("read -vP171 1M 512"),
            Cmd::Read {
                offset: 1 << 20,
                len: 512,
                pattern: Some(171),
                verbose: true,
                quiet: false
            }
        );
        assert_eq!(
            parse("write 512 1k"),
            Cmd::Write {
                offset: 512,
                len: 1024,
                data: WriteData::Pattern(0xcd),
                quiet: false
            }
        );
        assert_eq!(
            parse("write -z -u 0 1M"),
            Cmd::Write {
                offset: 0,
                len: 1 << 20,
                data: WriteData::Zeroes { unmap: true },
                quiet: false
            }
        );
        assert_eq!(parse("write -zu 0 1M"), parse("write -z -u 0 1M"));
        assert_eq!(
            parse("  discard -q 4k 4k "),
            Cmd::Discard {
                offset: 4096,
                len: 4096,
                quiet: true
            }
        );
        assert_eq!(parse("flush"), Cmd::Flush);
        assert_eq!(parse("quit"), Cmd::Quit);
        assert_eq!(parse(" q "), Cmd::Quit);
        assert_eq!(parse_command("   ").unwrap(), None);
    }

    #[test]
    fn bad_commands_say_what_is_wrong() {
        let cases = [
            ("bogus 1 2", "command \"bogus\" not found"),
            ("read 0 abc", "'abc'"),
            ("read 0", "expected 2 arguments"),
            ("read 0 1 2", "expected 2 arguments"),
            ("read -P 0x1ff 0 4k", "0x1ff is not a valid pattern byte"),
            ("read -P", "needs a value"),
            ("read -x 0 1", "invalid option -- 'x'"),
            ("write -u 0 4k", "-u requires -z"),
            ("write -z -P 1 0 4k", "cannot be specified at the same time"),
            ("write 0 4G", "length cannot exceed"),
            ("flush now", "no arguments"),
            ("quit now", "no arguments"),
        ];
        for (line, needle) in cases {
            let msg = parse_err(line);
            assert!(msg.contains(needle), "{line}: {msg}");
        }
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
