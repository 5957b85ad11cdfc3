//! Importing `strace` output of a program that writes a raw image file:
//!
//! ```text
//! strace -f -tt -e trace=pwrite64,pwritev,pwritev2,fsync,fdatasync,fallocate,open,openat,openat2,creat,dup,dup2,dup3,fcntl,close,close_range -o OUT PROGRAM
//! ```
//!
//! A line is `[PREFIX] [TIMESTAMP] NAME(ARGS) = RESULT [...]`: the prefix
//! is a process id (`1234 ` with `-f -o`, `[pid 1234] ` with `-f` on
//! standard error), the timestamp any of `-t`, `-tt`, `-ttt`, `-r`. A call
//! interrupted by another process's line is split in two,
//! `NAME(ARGS <unfinished ...>` and later `<... NAME resumed>ARGS) =
//! RESULT`, joined here by process id. Only calls that succeeded become
//! requests, in the order they completed, each with the line its call
//! started on:
//!
//! - `pwrite64(fd, buf, count, offset) = n`: `w offset n` (the bytes
//!   written, which a short write makes fewer than `count`);
//! - `pwritev(fd, iov, iovcnt, offset)` and `pwritev2(..., offset, flags)`:
//!   `w offset n`, where `n`, the result, is the sum of the `iov_len`s
//!   for a whole write; `pwritev2` with `RWF_DSYNC` or `RWF_SYNC` is a
//!   FUA write, `w offset n fua` (its data is durable when the call
//!   returns, with no flush of the file's other writes);
//! - a write through a descriptor opened with `O_DSYNC` or `O_SYNC` is
//!   FUA likewise. The importer follows descriptors to know which:
//!   `open`, `openat`, `openat2` and `creat` give their result the flags
//!   strace prints (`O_RDWR|O_CREAT|O_DSYNC`; `creat` never syncs);
//!   `dup`, `dup2`, `dup3` and `fcntl` with `F_DUPFD`/`F_DUPFD_CLOEXEC`
//!   give the copy the original's; `close` and `close_range` forget them.
//!   `fcntl(F_SETFL)` is not followed: Linux ignores `O_DSYNC` and
//!   `O_SYNC` there. A descriptor whose open is not in the recording (one
//!   made without these calls traced, as before they were) is taken as
//!   not syncing. Descriptors are one table for the whole recording, as
//!   threads share theirs; a child's after `fork` start as its parent's.
//!   `write` and `writev` (no offset: where they land is the file
//!   position) are left out and counted, as before;
//! - `pread64`, `preadv`, `preadv2` (if traced): `r offset n`;
//! - `fsync(fd)`, `fdatasync(fd)`: `f`;
//! - `fallocate(fd, mode, offset, len)`: with `FALLOC_FL_PUNCH_HOLE`
//!   `d offset len`, with `FALLOC_FL_ZERO_RANGE` `z offset len` (never
//!   FUA: `O_DSYNC` promises writes, and a file system may or may not
//!   make an fallocate durable before it returns); a plain
//!   preallocation (mode 0 or `FALLOC_FL_KEEP_SIZE`) changes no byte the
//!   guest sees and is left out; a mode that moves data
//!   (`FALLOC_FL_COLLAPSE_RANGE`, `FALLOC_FL_INSERT_RANGE`) cannot be a
//!   block request and is refused.
//!
//! Calls on one file descriptor only: the one [`StraceOptions::fd`] names,
//! or the only one that data calls use (a recording that writes several
//! files is refused until one is chosen). Anything else (other system
//! calls, signals, exits, `strace:` messages, failed calls) is left out and
//! counted.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use super::lines::for_each_line;
use super::{
    keep_one_source, Import, Kind, Problem, Request, Sourced, Summary, TraceError, MAX_REQUESTS,
};

/// Longest line read (strace prints at most 32 bytes of a buffer unless
/// told `-s`, but long iovec arrays make long lines).
pub const MAX_LINE: usize = 1 << 20;

/// What to import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StraceOptions {
    /// The image file's descriptor; None: the only one data calls use.
    pub fd: Option<u64>,
}

/// A call that became requests, from its file descriptor.
type Call = Sourced<u64>;

/// Import a recording.
pub fn import<R: BufRead>(input: R, opts: &StraceOptions) -> Result<Import, TraceError> {
    let mut summary = Summary::default();
    let mut calls: Vec<Call> = Vec::new();
    let mut sync_fds = SyncFds::default();
    // Unfinished calls by process: (name, text so far, line).
    let mut pending: HashMap<Option<u64>, (String, String, u64)> = HashMap::new();
    // A call line that strace's own message (`strace: Process N
    // attached`, on the same standard error) cut in two: its head, and
    // the line it started on.
    let mut cut: Option<(String, u64)> = None;
    for_each_line(input, MAX_LINE, true, |line, text| {
        summary.lines += 1;
        let joined;
        let (text, line) = match cut.take() {
            Some((head, start)) => {
                joined = format!("{head}{text}");
                (joined.as_str(), start)
            }
            None => (text, line),
        };
        if let Some(at) = text.find("strace: Process ").filter(|&at| at > 0) {
            summary.skip("lines about processes and signals");
            cut = Some((text[..at].to_string(), line));
            return Ok(());
        }
        let (pid, rest) = split_prefix(text);
        let rest = rest.trim_end();
        if rest.is_empty() {
            return Ok(());
        }
        if rest.starts_with("+++") || rest.starts_with("---") || rest.starts_with("strace:") {
            summary.skip("lines about processes and signals");
            return Ok(());
        }
        let (whole, start) = if let Some(resumed) = rest.strip_prefix("<... ") {
            let Some((name, tail)) = resumed.split_once(" resumed>") else {
                return Err(syntax(line, "a resumed call without \" resumed>\""));
            };
            match pending.remove(&pid) {
                Some((n, head, start)) if n == name => (format!("{head}{tail}"), start),
                _ => {
                    summary.skip("resumed calls whose start is not in the recording");
                    return Ok(());
                }
            }
        } else if let Some(head) = rest.strip_suffix("<unfinished ...>") {
            let name = call_name(head).unwrap_or_default().to_string();
            pending.insert(pid, (name, head.trim_end().to_string(), line));
            return Ok(());
        } else {
            (rest.to_string(), line)
        };
        if let Some(call) =
            parse_call(&whole, &mut sync_fds, &mut summary).map_err(|problem| TraceError::Line {
                line: start,
                problem,
            })?
        {
            if calls.len() >= MAX_REQUESTS {
                return Err(TraceError::Line {
                    line,
                    problem: Problem::TooMany,
                });
            }
            calls.push(Sourced {
                line: start,
                ..call
            });
        }
        Ok(())
    })?;
    for _ in pending {
        summary.skip("calls unfinished when the recording ends");
    }
    keep_one_source(
        calls,
        opts.fd,
        summary,
        u64::to_string,
        |list| {
            format!(
                "the recording writes through file descriptors {list}: choose the image file's \
                 with --fd"
            )
        },
        "calls on other file descriptors",
    )
}

fn syntax(line: u64, what: &str) -> TraceError {
    TraceError::Line {
        line,
        problem: Problem::Syntax(what.to_string()),
    }
}

/// The process id prefix (`1234 ` or `[pid 1234] `) and the timestamp
/// (`12:34:56`, `12:34:56.123456`, `1700000000.123456`, `0.000123`) cut
/// off.
pub fn split_prefix(text: &str) -> (Option<u64>, &str) {
    let mut rest = text.trim_start();
    let mut pid = None;
    if let Some(r) = rest.strip_prefix("[pid") {
        let r = r.trim_start();
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        if let (Ok(p), Some(after)) = (r[..end].parse(), r[end..].strip_prefix(']')) {
            pid = Some(p);
            rest = after.trim_start();
        }
    } else if let Some((first, after)) = rest.split_once([' ', '\t']) {
        if !first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) {
            pid = first.parse().ok();
            rest = after.trim_start();
        }
    }
    if let Some((first, after)) = rest.split_once([' ', '\t']) {
        let stamp = first
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'.')
            && first.bytes().any(|b| b == b':' || b == b'.')
            && first.bytes().next().is_some_and(|b| b.is_ascii_digit());
        if stamp {
            rest = after.trim_start();
        }
    }
    (pid, rest)
}

/// The name before `(`, if the text starts with a system call.
fn call_name(text: &str) -> Option<&str> {
    let (name, _) = text.split_once('(')?;
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then_some(name)
}

/// A call's top-level arguments, and what follows its closing parenthesis.
fn split_args(text: &str) -> Option<(Vec<&str>, &str)> {
    let open = text.find('(')?;
    let body = &text[open + 1..];
    let mut args = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in body.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '(' | '[' | '{' | '<' => depth += 1,
            ')' if depth == 0 => {
                let last = body[start..i].trim();
                if !last.is_empty() || !args.is_empty() {
                    args.push(last);
                }
                return Some((args, &body[i + 1..]));
            }
            ')' | ']' | '}' | '>' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                args.push(body[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    None
}

/// The decimal number `text` starts with (a descriptor may read `3</path>`
/// with `-y`).
fn leading_number(text: &str) -> Option<u64> {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text[..end].parse().ok()
}

const FALLOC_FL_KEEP_SIZE: u64 = 0x01;
const FALLOC_FL_PUNCH_HOLE: u64 = 0x02;
const FALLOC_FL_NO_HIDE_STALE: u64 = 0x04;
const FALLOC_FL_COLLAPSE_RANGE: u64 = 0x08;
const FALLOC_FL_ZERO_RANGE: u64 = 0x10;
const FALLOC_FL_INSERT_RANGE: u64 = 0x20;
const FALLOC_FL_UNSHARE_RANGE: u64 = 0x40;

/// fallocate's mode, as strace prints it (`FALLOC_FL_A|FALLOC_FL_B`, `0`,
/// or a number for bits it has no name for).
fn falloc_mode(text: &str) -> Result<u64, Problem> {
    let mut mode = 0;
    for part in text.split('|').map(str::trim) {
        mode |= match part {
            "FALLOC_FL_KEEP_SIZE" => FALLOC_FL_KEEP_SIZE,
            "FALLOC_FL_PUNCH_HOLE" => FALLOC_FL_PUNCH_HOLE,
            "FALLOC_FL_NO_HIDE_STALE" => FALLOC_FL_NO_HIDE_STALE,
            "FALLOC_FL_COLLAPSE_RANGE" => FALLOC_FL_COLLAPSE_RANGE,
            "FALLOC_FL_ZERO_RANGE" => FALLOC_FL_ZERO_RANGE,
            "FALLOC_FL_INSERT_RANGE" => FALLOC_FL_INSERT_RANGE,
            "FALLOC_FL_UNSHARE_RANGE" => FALLOC_FL_UNSHARE_RANGE,
            p => match p.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => p.parse().ok(),
            }
            .ok_or_else(|| {
                Problem::Syntax(format!("fallocate mode {p:?} is not one strace prints"))
            })?,
        };
    }
    Ok(mode)
}

/// The descriptors open with `O_DSYNC` or `O_SYNC`, as far as the
/// recording shows: writes through them are FUA.
#[derive(Debug, Default)]
struct SyncFds(HashSet<u64>);

impl SyncFds {
    /// `fd` was just opened (or made a copy of another): whether it syncs
    /// is `sync`, whatever a closed descriptor of the same number did.
    fn set(&mut self, fd: u64, sync: bool) {
        if sync {
            self.0.insert(fd);
        } else {
            self.0.remove(&fd);
        }
    }

    fn syncs(&self, fd: u64) -> bool {
        self.0.contains(&fd)
    }
}

/// Whether open flags, as strace prints them (`O_RDWR|O_CREAT|O_DSYNC`,
/// or openat2's `{flags=O_RDWR|O_SYNC, mode=0644, resolve=0}`), make
/// writes synchronous. strace names `O_SYNC` (which holds `O_DSYNC`'s
/// bit) and `O_DSYNC` alone; `O_RSYNC` is `O_SYNC` on Linux.
fn sync_flags(text: &str) -> bool {
    names_flag(text, &["O_DSYNC", "O_SYNC", "O_RSYNC"])
}

/// Whether strace's rendering of a flags argument (`A|B|C`, or inside a
/// struct) names one of `flags`.
fn names_flag(text: &str, flags: &[&str]) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|w| flags.contains(&w))
}

/// The calls that make, copy or forget descriptors, and how many
/// arguments each has (a range: open's mode is there only with O_CREAT).
fn descriptor_call(name: &str) -> Option<(usize, usize)> {
    Some(match name {
        "open" => (2, 3),
        "openat" => (3, 4),
        "openat2" => (4, 4),
        "creat" => (2, 2),
        "dup" => (1, 1),
        "dup2" => (2, 2),
        "dup3" => (3, 3),
        "fcntl" | "fcntl64" => (2, 3),
        "close" => (1, 1),
        "close_range" => (3, 3),
        _ => return None,
    })
}

/// The note a recording gets once any descriptor call was followed.
const FOLLOWED: &str = "descriptor calls followed (open, dup, fcntl F_DUPFD, close)";

/// Follow a call that makes, copies or forgets descriptors (its name
/// passed [`descriptor_call`]); it makes no request.
fn follow_descriptors(
    name: &str,
    args: &[&str],
    result: &str,
    fds: &mut SyncFds,
    summary: &mut Summary,
) -> Result<(), Problem> {
    let fd_arg = |i: usize| {
        leading_number(args[i])
            .ok_or_else(|| Problem::Syntax(format!("{name} file descriptor {:?}", args[i])))
    };
    // close and close_range forget whatever their result: Linux frees
    // the descriptor even when close reports an error (EINTR, EIO), and
    // forgetting one that was not open changes nothing.
    match name {
        "close" => {
            fds.set(fd_arg(0)?, false);
            summary.note(FOLLOWED);
            return Ok(());
        }
        "close_range" => {
            // CLOSE_RANGE_CLOEXEC only marks them close-on-exec.
            if !args[2].contains("CLOSE_RANGE_CLOEXEC") {
                let first = fd_arg(0)?;
                let last = leading_number(args[1]).unwrap_or(u64::MAX);
                fds.0.retain(|&fd| !(first..=last).contains(&fd));
            }
            summary.note(FOLLOWED);
            return Ok(());
        }
        _ => {}
    }
    // The rest make a descriptor: their result (`3`, or `3</path>` with
    // -y), when they succeed.
    let Some(new) = leading_number(result) else {
        return if result.starts_with('-') || result == "?" {
            summary.skip(format!("failed {name} calls"));
            Ok(())
        } else {
            Err(Problem::Syntax(format!(
                "{name} result {result:?} is not a file descriptor"
            )))
        };
    };
    let sync = match name {
        "open" => sync_flags(args[1]),
        "openat" | "openat2" => sync_flags(args[2]),
        "creat" => false,
        "dup" | "dup2" | "dup3" => fds.syncs(fd_arg(0)?),
        _ => {
            // fcntl: only F_DUPFD and F_DUPFD_CLOEXEC make a descriptor
            // (F_SETFL cannot change O_DSYNC or O_SYNC on Linux).
            if !args[1].starts_with("F_DUPFD") {
                summary.skip("fcntl calls other than F_DUPFD");
                return Ok(());
            }
            fds.syncs(fd_arg(0)?)
        }
    };
    fds.set(new, sync);
    if sync && matches!(name, "open" | "openat" | "openat2") {
        summary.note("descriptors opened with O_DSYNC or O_SYNC (their writes are FUA)");
    }
    summary.note(FOLLOWED);
    Ok(())
}

/// A call's arguments and its result (the word after `=`).
fn call_parts<'a>(name: &str, text: &'a str) -> Result<(Vec<&'a str>, &'a str), Problem> {
    let (args, after) = split_args(text)
        .ok_or_else(|| Problem::Syntax(format!("{name}( without its closing parenthesis")))?;
    let result = after
        .trim_start()
        .strip_prefix('=')
        .map(|r| r.split_whitespace().next().unwrap_or(""))
        .ok_or_else(|| Problem::Syntax(format!("{name}(...) without \"= RESULT\"")))?;
    Ok((args, result))
}

/// One complete call: its requests, or None (counted in `summary`) if it
/// makes none. `fds` follows which descriptors sync their writes.
fn parse_call(
    text: &str,
    fds: &mut SyncFds,
    summary: &mut Summary,
) -> Result<Option<Call>, Problem> {
    let Some(name) = call_name(text) else {
        summary.skip("lines that are not system calls");
        return Ok(None);
    };
    if let Some((least, most)) = descriptor_call(name) {
        let (args, result) = call_parts(name, text)?;
        if !(least..=most).contains(&args.len()) {
            let want = if least == most {
                least.to_string()
            } else {
                format!("{least} or {most}")
            };
            return Err(Problem::Syntax(format!(
                "{name} with {} arguments, expected {want}",
                args.len()
            )));
        }
        follow_descriptors(name, &args, result, fds, summary)?;
        return Ok(None);
    }
    let (kind, want) = match name {
        "pwrite64" | "pwritev" => (Kind::Write, 4),
        "pwritev2" => (Kind::Write, 5),
        "pread64" | "preadv" => (Kind::Read, 4),
        "preadv2" => (Kind::Read, 5),
        "fsync" | "fdatasync" => (Kind::Flush, 1),
        "fallocate" => (Kind::Discard, 4),
        other => {
            summary.skip(format!("{other} calls"));
            return Ok(None);
        }
    };
    let (args, result) = call_parts(name, text)?;
    if args.len() != want {
        return Err(Problem::Syntax(format!(
            "{name} with {} arguments, expected {want}",
            args.len()
        )));
    }
    let result: i64 = match result.parse() {
        Ok(r) if r >= 0 => r,
        Ok(_) => {
            summary.skip("failed calls");
            return Ok(None);
        }
        Err(_) if result == "?" => {
            summary.skip("calls without a result (the process ended in them)");
            return Ok(None);
        }
        Err(_) => {
            return Err(Problem::Syntax(format!(
                "{name} result {result:?} is not a number"
            )))
        }
    };
    let fd = leading_number(args[0])
        .ok_or_else(|| Problem::Syntax(format!("{name} file descriptor {:?}", args[0])))?;
    let num = |i: usize, what: &str| {
        args[i]
            .parse::<u64>()
            .map_err(|_| Problem::Syntax(format!("{name} {what} {:?} is not a number", args[i])))
    };
    let done = |requests: Vec<Request>, data: bool| {
        Ok(Some(Sourced {
            line: 0,
            source: fd,
            requests,
            data,
        }))
    };
    match kind {
        Kind::Flush => done(vec![Request::Flush], false),
        Kind::Write | Kind::Read => {
            let offset = num(3, "offset")?;
            let length = result as u64;
            if length == 0 {
                summary.skip(format!("{name} calls that moved no byte"));
                return Ok(None);
            }
            if name.contains('v') {
                let listed: u64 = iov_lens(args[1]).iter().sum();
                if listed > length {
                    summary.note(format!("short {name} calls (the bytes moved count)"));
                }
            } else if num(2, "count")? > length {
                summary.note(format!("short {name} calls (the bytes moved count)"));
            }
            let mut request = Request::new(kind, offset, length)?;
            if kind == Kind::Write {
                // Durable when the call returns: through a descriptor
                // opened O_DSYNC/O_SYNC, or by pwritev2's own flag (for
                // this call only). Not noted in the summary, which counts
                // every descriptor's calls: the trace's own counts say
                // how many of the kept ones are FUA.
                let rwf = name == "pwritev2" && names_flag(args[4], &["RWF_DSYNC", "RWF_SYNC"]);
                request = request.with_fua(rwf || fds.syncs(fd));
            }
            done(vec![request], true)
        }
        Kind::Discard | Kind::WriteZeroes => {
            let mode = falloc_mode(args[1])?;
            let offset = num(2, "offset")?;
            let length = num(3, "length")?;
            if mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE) != 0 {
                return Err(Problem::Syntax(format!(
                    "fallocate mode {} moves the file's data, which no block request does",
                    args[1]
                )));
            }
            let kind = if mode & FALLOC_FL_PUNCH_HOLE != 0 {
                Kind::Discard
            } else if mode & FALLOC_FL_ZERO_RANGE != 0 {
                Kind::WriteZeroes
            } else {
                summary.skip("fallocate calls that only preallocate (no byte changes)");
                return Ok(None);
            };
            if length == 0 {
                summary.skip("fallocate calls of no byte");
                return Ok(None);
            }
            done(vec![Request::new(kind, offset, length)?], true)
        }
    }
}

/// The `iov_len=N` values of an iovec array (those strace printed).
fn iov_lens(text: &str) -> Vec<u64> {
    text.match_indices("iov_len=")
        .filter_map(|(i, k)| leading_number(&text[i + k.len()..]))
        .collect()
}
