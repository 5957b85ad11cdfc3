//! Importing `blkparse`'s default text output (blktrace recorded on a
//! block device, then `blkparse -i NAME`):
//!
//! ```text
//!   8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]
//!   8,0    3       14     0.009026214     0  C   W 223490 + 8 [0]
//!   8,0    1        2     0.010000000   697  Q FWS [kjournald]
//! ```
//!
//! Each event line is `MAJ,MIN CPU SEQUENCE SECONDS.NANOS PID ACTION RWBS`
//! (the documented default header, `%D %2c %8s %5T.%9t %5p %2a %3d`), then
//! for a request with data `SECTOR + SECTORS`, an optional `(ELAPSED)`,
//! and `[PROCESS]` (`[ERROR]` for a completion). The events of one action
//! become requests: `Q` (queued, the default: what the file system asked
//! for, in the order it asked) or `C` (completed, those with error 0), in
//! the order blkparse prints them. Sectors are 512 bytes. From RWBS:
//!
//! - `W` a write, `R` a read, `D` a discard (also `DE`, secure erase);
//! - an `F` before the operation letter is a flush before it (preflush,
//!   REQ_PREFLUSH); one after it is FUA (REQ_FUA), the request's own
//!   flag (`w OFF LEN fua`: durable once it completes, with no flush of
//!   everything else), so `FWFS` is a flush, then a FUA write; FUA on a
//!   read means nothing and is dropped (counted); an `F` with no data (no
//!   sectors, or no operation letter: `F`, `FN`, `FS`) is a flush; an old
//!   kernel's barrier `B` is a flush before and after;
//! - other letters (`S` sync, `M` meta, `A` readahead) change nothing.
//!
//! Events of other actions, of other devices, and the per-CPU and total
//! summaries blkparse prints at the end are left out. A recording of
//! several devices is refused until one is chosen.

use std::io::BufRead;

use super::lines::for_each_line;
use super::{
    keep_one_source, Import, Kind, Problem, Request, Sourced, Summary, TraceError, MAX_REQUESTS,
};

/// Longest line read.
pub const MAX_LINE: usize = 1 << 16;
/// blkparse's sector.
const SECTOR: u64 = 512;

/// Which events become requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Action {
    /// `Q`: queued.
    #[default]
    Queued,
    /// `C`: completed (with error 0).
    Completed,
}

impl Action {
    fn letter(self) -> &'static str {
        match self {
            Action::Queued => "Q",
            Action::Completed => "C",
        }
    }
}

/// What to import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlkparseOptions {
    pub action: Action,
    /// The device as (major, minor); None: the only one in the recording.
    pub device: Option<(u32, u32)>,
}

/// An event that became requests, from its device.
type Event = Sourced<(u32, u32)>;

/// Import a recording.
pub fn import<R: BufRead>(input: R, opts: &BlkparseOptions) -> Result<Import, TraceError> {
    let mut summary = Summary::default();
    let mut events: Vec<Event> = Vec::new();
    for_each_line(input, MAX_LINE, true, |line, text| {
        summary.lines += 1;
        let fields: Vec<&str> = text.split_whitespace().collect();
        let Some(device) = event_header(&fields) else {
            if !fields.is_empty() {
                summary.skip("lines that are not events (blkparse's summaries)");
            }
            return Ok(());
        };
        if fields[5] != opts.action.letter() {
            summary.skip(format!(
                "events of other actions than {}",
                opts.action.letter()
            ));
            return Ok(());
        }
        let event = parse_event(&fields, opts.action, &mut summary)
            .map_err(|problem| TraceError::Line { line, problem })?;
        if let Some(requests) = event {
            if events.len() >= MAX_REQUESTS {
                return Err(TraceError::Line {
                    line,
                    problem: Problem::TooMany,
                });
            }
            events.push(Sourced {
                line,
                source: device,
                requests,
                data: true,
            });
        }
        Ok(())
    })?;
    keep_one_source(
        events,
        opts.device,
        summary,
        |(a, b)| format!("{a},{b}"),
        |list| {
            format!(
                "the recording holds events of devices {list}: choose one with --device MAJ,MIN"
            )
        },
        "events of other devices",
    )
}

/// The device of an event line (`MAJ,MIN CPU SEQ SECS.NANOS PID ACTION
/// RWBS ...`), or None for any other line.
fn event_header(f: &[&str]) -> Option<(u32, u32)> {
    if f.len() < 7 {
        return None;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (maj, min) = f[0].split_once(',')?;
    let time = f[3]
        .split_once('.')
        .is_some_and(|(s, n)| digits(s) && digits(n));
    if !(digits(maj) && digits(min) && digits(f[1]) && digits(f[2]) && time && digits(f[4])) {
        return None;
    }
    Some((maj.parse().ok()?, min.parse().ok()?))
}

/// One event of the chosen action: its requests, or None (counted) if it
/// makes none.
fn parse_event(
    f: &[&str],
    action: Action,
    summary: &mut Summary,
) -> Result<Option<Vec<Request>>, Problem> {
    let rwbs = f[6];
    let rest = &f[7..];
    // `SECTOR + SECTORS`, or nothing (a request without data).
    let (range, tail) = match rest {
        [s, "+", n, tail @ ..] => {
            let num = |t: &str| {
                t.parse::<u64>()
                    .map_err(|_| Problem::Syntax(format!("sector count {t:?} is not a number")))
            };
            (Some((num(s)?, num(n)?)), tail)
        }
        _ => (None, rest),
    };
    let bracket = tail.iter().find(|t| t.starts_with('[')).ok_or_else(|| {
        Problem::Syntax(format!(
            "expected `SECTOR + SECTORS [...]` or `[...]` after {rwbs:?}"
        ))
    })?;
    if action == Action::Completed {
        let error = bracket.trim_start_matches('[').trim_end_matches(']');
        if error != "0" {
            summary.skip("completions with an error");
            return Ok(None);
        }
    }
    let (offset, length) = match range {
        Some((s, n)) => {
            let bytes = |v: u64| {
                v.checked_mul(SECTOR).ok_or_else(|| {
                    Problem::Syntax(format!("sector {v} is past the largest byte offset"))
                })
            };
            (bytes(s)?, bytes(n)?)
        }
        None => (0, 0),
    };
    let (preflush, op) = match rwbs.strip_prefix('F') {
        Some(r) => (true, r),
        None => (false, rwbs),
    };
    let mut letters = op.chars();
    let letter = letters.next();
    let after: String = letters.collect();
    // The kernel prints RWBS as [F]OP[F][A][S][M] (blk_fill_rwbs): after
    // the operation letter, F can only be REQ_FUA.
    let fua = after.contains('F');
    let barrier = after.contains('B');
    let kind = match letter {
        Some('W') => Kind::Write,
        Some('R') => Kind::Read,
        Some('D') => Kind::Discard,
        Some('N' | 'F' | 'S') | None if preflush => Kind::Flush,
        Some('N') => {
            summary.skip("events without a data operation (N)");
            return Ok(None);
        }
        _ => return Err(Problem::Syntax(format!("RWBS {rwbs:?} names no operation"))),
    };
    let mut out = Vec::new();
    if preflush || barrier || kind == Kind::Flush {
        out.push(Request::Flush);
    }
    if kind != Kind::Flush {
        if length > 0 {
            if fua && !kind.takes_fua() {
                summary.note("FUA flags on reads dropped (a read makes nothing durable)");
            }
            out.push(Request::new(kind, offset, length)?.with_fua(fua));
        } else if !preflush {
            summary.skip("events of no sector");
            return Ok(None);
        }
        // An old kernel's barrier ordered the request against everything
        // before and after it, which a flush on each side says; FUA is
        // the request's flag above, not a flush of everything.
        if barrier {
            summary.note("barrier requests (B) followed by a flush");
            out.push(Request::Flush);
        }
    }
    Ok(Some(out))
}
