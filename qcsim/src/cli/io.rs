//! `qcsim io`: a qemu-io subset on an image file. Commands (`read`, `write`,
//! `discard`, `flush`, `quit`) come from `-c` options, in order, or, as in
//! qemu-io, one per line on standard input, each run as soon as its line is
//! read (with a `qemu-io> ` prompt on a terminal) until end of input or
//! `quit`; all run on one open of the image, so a session on standard input
//! holds the image open (and locked) between commands. Output follows
//! qemu-io's shape ("wrote N/N bytes at offset M", "Pattern verification
//! failed at offset N, N bytes", `read -v` hex dumps) without its timing
//! line, so that runs are reproducible. As in qemu-io, a failing command is
//! reported and the next one still runs; the exit code is 1 if any failed.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::Context;
use tools::files::{open_image, Disk, Format, OpenOptions};

use tools::qemu_args::parse_size;

#[derive(clap::Args)]
pub struct Args {
    /// Command to run (repeatable, run in order); without any, commands are
    /// read from standard input, one per line.
    #[arg(short = 'c', long = "cmd", value_name = "CMD")]
    pub commands: Vec<String>,
    /// Image format (raw or qcow2); probed when omitted.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    pub format: Option<String>,
    /// Open the image read-only.
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// Force sharing: with -r, open an image other processes have open for
    /// writing, and do not keep them from writing it (qemu-io's -U).
    #[arg(short = 'U', long = "force-share")]
    pub force_share: bool,
    /// Bypass the host page cache (O_DIRECT).
    #[arg(short = 'n', long = "nocache")]
    pub nocache: bool,
    /// Image file.
    pub file: PathBuf,
}

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

/// Run one command; the error text is printed as "<op> failed: <error>".
async fn execute(disk: &Disk, cmd: &Cmd, out: &mut impl Write) -> anyhow::Result<bool> {
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
            writeln!(out, "{op} failed: {e}")?;
            return Ok(false);
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
                    writeln!(out, "read failed: {e}")?;
                    return Ok(false);
                }
                if let Some(p) = pattern {
                    mismatch |= buf.iter().any(|&b| b != p);
                }
                if verbose && !quiet {
                    hexdump(out, at, &buf)?;
                }
            }
            if mismatch {
                writeln!(
                    out,
                    "Pattern verification failed at offset {offset}, {len} bytes"
                )?;
            }
            if !quiet {
                writeln!(out, "read {len}/{len} bytes at offset {offset}")?;
            }
            Ok(!mismatch)
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
                writeln!(out, "write failed: {e}")?;
                return Ok(false);
            }
            if !quiet {
                writeln!(out, "wrote {len}/{len} bytes at offset {offset}")?;
            }
            Ok(true)
        }
        Cmd::Discard { offset, len, quiet } => {
            if let Err(e) = disk.discard(offset, len).await {
                writeln!(out, "discard failed: {e}")?;
                return Ok(false);
            }
            if !quiet {
                writeln!(out, "discard {len}/{len} bytes at offset {offset}")?;
            }
            Ok(true)
        }
        Cmd::Flush => {
            if let Err(e) = disk.flush().await {
                writeln!(out, "flush failed: {e}")?;
                return Ok(false);
            }
            Ok(true)
        }
        // The caller stops at quit before executing it.
        Cmd::Quit => Ok(true),
    }
}

/// Where commands come from: the `-c` list, or standard input read one
/// line at a time, only when the previous command is done.
enum Source {
    List(std::vec::IntoIter<String>),
    Stdin {
        input: std::io::StdinLock<'static>,
        prompt: bool,
    },
}

impl Source {
    /// The next command line, `None` at the end.
    fn next_line(&mut self) -> anyhow::Result<Option<String>> {
        match self {
            Source::List(lines) => Ok(lines.next()),
            Source::Stdin { input, prompt } => {
                if *prompt {
                    let mut out = std::io::stdout().lock();
                    write!(out, "qemu-io> ")?;
                    out.flush()?;
                }
                let mut line = String::new();
                let n = input
                    .read_line(&mut line)
                    .context("reading commands from standard input")?;
                if n == 0 {
                    if *prompt {
                        println!();
                    }
                    return Ok(None);
                }
                Ok(Some(line))
            }
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let format = args
        .format
        .as_deref()
        .map(str::parse::<Format>)
        .transpose()?;
    let opts = OpenOptions {
        format,
        read_only: args.read_only,
        direct: args.nocache,
        force_share: args.force_share,
        ..OpenOptions::default()
    };
    let mut source = if args.commands.is_empty() {
        let input = std::io::stdin().lock();
        let prompt = input.is_terminal();
        Source::Stdin { input, prompt }
    } else {
        Source::List(args.commands.clone().into_iter())
    };
    futures::executor::block_on(async {
        // Open errors already name the file (and the backing file at fault).
        let disk = open_image(&args.file, &opts).await?;
        let mut ok = true;
        while let Some(line) = source.next_line()? {
            // The lock is taken per command, so that the prompt can print
            // between commands; each command's output is flushed before the
            // next line is read, so a reader on a pipe sees it at once.
            let mut out = std::io::stdout().lock();
            match parse_command(&line) {
                Ok(None) => {}
                Ok(Some(Cmd::Quit)) => break,
                Ok(Some(cmd)) => ok &= execute(&disk, &cmd, &mut out).await?,
                Err(e) => {
                    out.flush()?;
                    eprintln!("qcsim io: {e}");
                    ok = false;
                }
            }
            out.flush()?;
        }
        disk.close()
            .await
            .with_context(|| format!("closing {}", args.file.display()))?;
        Ok(if ok { 0 } else { 1 })
    })
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
