//! The qemu-io command line parser: [`parse_command`] turns one line into
//! a [`Cmd`] with qemu-io's flags, names (and short names: `r`, `w`, `d`,
//! ...) and its messages for bad arguments. One function per command
//! family builds the command from the words `scan` read.

use super::cmd::{Cmd, ReadCmd, WriteCmd, WriteData, MAX_REQUEST};
use super::scan::{err, err_stderr, parse_num, parse_pattern, scan, CmdError, OPEN_USAGE};

/// Default data byte of `write` without `-P`, as in qemu-io.
const DEFAULT_PATTERN: u8 = 0xcd;

/// Default data byte of `writev` without `-P`, as in qemu-io.
const DEFAULT_VECTOR_PATTERN: u8 = 0xcd;

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
    match name {
        "read" | "r" => parse_read(rest),
        "readv" | "aio_read" => parse_readv(name, rest),
        "write" | "w" => parse_write(rest),
        "writev" | "aio_write" => parse_writev(name, rest),
        "discard" | "d" => parse_discard(rest),
        "alloc" => parse_alloc(rest),
        "map" => no_args(name, rest, Cmd::Map),
        "length" | "len" | "l" => no_args(name, rest, Cmd::Length),
        "info" | "i" => no_args(name, rest, Cmd::Info),
        "flush" | "f" => no_args(name, rest, Cmd::Flush),
        "aio_flush" => no_args(name, rest, Cmd::AioFlush),
        "close" | "c" => no_args(name, rest, Cmd::Close),
        "abort" => no_args(name, rest, Cmd::Abort),
        "quit" | "q" => no_args(name, rest, Cmd::Quit),
        "sigraise" => parse_sigraise(name, rest),
        "open" | "o" => parse_open(rest),
        "truncate" | "t" => parse_truncate(rest),
        "reopen" => parse_reopen(rest),
        other => err_stderr(format!("command \"{other}\" not found")),
    }
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

fn parse_read(rest: &[&str]) -> Result<Cmd, CmdError> {
    let o = scan("read", rest, "abCqprv", "Pls")?;
    let (offset, len) = o.offset_len("read")?;
    Ok(Cmd::Read(ReadCmd {
        op: "read",
        offset,
        lens: vec![len],
        pattern: o.pattern_check(len)?,
        verbose: o.has('v'),
        report: o.report(),
        vmstate: o.has('b'),
    }))
}

/// `readv` and `aio_read`: several lengths one after the other.
fn parse_readv(name: &str, rest: &[&str]) -> Result<Cmd, CmdError> {
    let o = scan(name, rest, "Cqrvi", "P")?;
    let (offset, lens) = o.offset_lens(name)?;
    let total = lens.iter().sum();
    Ok(Cmd::Read(ReadCmd {
        op: "readv",
        offset,
        lens,
        pattern: o.pattern_check(total)?,
        verbose: o.has('v'),
        report: o.report(),
        vmstate: false,
    }))
}

fn parse_write(rest: &[&str]) -> Result<Cmd, CmdError> {
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
    Ok(Cmd::Write(WriteCmd {
        op: "write",
        offset,
        lens: vec![len],
        data,
        fua: o.has('f'),
        report: o.report(),
        vmstate: o.has('b'),
    }))
}

/// `writev` and `aio_write`: several lengths, no `-c` and no `-b`; only
/// `aio_write` zeroes (`-z`, `-u`) or takes `-i`, as in qemu-io.
fn parse_writev(name: &str, rest: &[&str]) -> Result<Cmd, CmdError> {
    let flags = if name == "writev" { "Cfqr" } else { "Cfqruzi" };
    let o = scan(name, rest, flags, "P")?;
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
    Ok(Cmd::Write(WriteCmd {
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
    }))
}

fn parse_discard(rest: &[&str]) -> Result<Cmd, CmdError> {
    let o = scan("discard", rest, "Cq", "")?;
    let (offset, len) = o.offset_len("discard")?;
    Ok(Cmd::Discard {
        offset,
        len,
        report: o.report(),
    })
}

fn parse_alloc(rest: &[&str]) -> Result<Cmd, CmdError> {
    let o = scan("alloc", rest, "", "")?;
    o.count("alloc", 1, Some(2))?;
    let offset = parse_num(o.positional[0])?;
    let count = match o.positional.get(1) {
        Some(c) => parse_num(c)?,
        None => 512,
    };
    Ok(Cmd::Alloc { offset, count })
}

fn parse_sigraise(name: &str, rest: &[&str]) -> Result<Cmd, CmdError> {
    let o = scan(name, rest, "", "")?;
    o.count(name, 1, Some(1))?;
    let arg = o.positional[0];
    let sig = parse_num(arg)?;
    if sig > i32::MAX as u64 {
        return err(format!(
            "signal argument '{arg}' is too large to be a valid signal"
        ));
    }
    Ok(Cmd::Sigraise(sig as i32))
}

fn parse_open(rest: &[&str]) -> Result<Cmd, CmdError> {
    // qemu-io counts every word after the command, flags too: at least
    // one, and at most one that is not a flag.
    if rest.is_empty() {
        return err_stderr("bad argument count 0 to open, expected at least 1 arguments");
    }
    let o = scan("open", rest, "rsnCkU", "otd")?;
    if o.positional.len() > 1 {
        return err(OPEN_USAGE);
    }
    let nocache = o.has('n') || matches!(o.value('t'), Some("none" | "directsync"));
    Ok(Cmd::Open {
        file: o.positional.first().map(|f| (*f).to_owned()),
        read_only: o.has('r'),
        nocache,
        options: o.values('o'),
    })
}

fn parse_truncate(rest: &[&str]) -> Result<Cmd, CmdError> {
    // Counted as qemu-io counts them: every word, flags too.
    if rest.is_empty() || rest.len() > 3 {
        return err_stderr(format!(
            "bad argument count {} to truncate, expected between 1 and 3 arguments",
            rest.len()
        ));
    }
    let o = scan("truncate", rest, "", "m")?;
    // The first operand is the size, and words after it are not looked
    // at; with none, qemu-io takes the first word (an option, which then
    // fails to parse as a number).
    let size = o.positional.first().unwrap_or(&rest[0]);
    Ok(Cmd::Truncate {
        size: parse_num(size)?,
        prealloc: o.value('m').map(str::to_owned),
    })
}

fn parse_reopen(rest: &[&str]) -> Result<Cmd, CmdError> {
    let o = scan("reopen", rest, "rw", "co")?;
    o.count("reopen", 0, Some(0))?;
    let (r, w) = (o.has('r'), o.has('w'));
    if r && w {
        return err_stderr("Only one -r/-w option may be given");
    }
    Ok(Cmd::Reopen {
        read_only: (r || w).then_some(r),
        cache: o.value('c').map(str::to_owned),
        options: o.values('o'),
    })
}
