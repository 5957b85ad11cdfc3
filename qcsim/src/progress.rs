//! The progress of every long command (`campaign`, `bench --sim`,
//! `enumerate`, `shrink`, `trace run`, `exhaust`), on standard error.
//!
//! On a terminal it is a bar (position, rate, time left). When standard
//! error is not a terminal (a log file, CI, `2>&1 | cat`) a bar would be
//! invisible or a mess of carriage returns, and a run of minutes that
//! prints nothing looks hung: there it is one plain line every few
//! seconds ([`LINE_EVERY`], or `QCSIM_PROGRESS_EVERY` seconds), and a last
//! line when the work ends, so a log shows that the run moves and how
//! fast. `--quiet` (where a command has it) prints neither. Standard
//! output, which scripts read, never carries progress.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// How often a progress line is printed when standard error is not a
/// terminal: often enough that a log shows a live run, rarely enough
/// that an hour's campaign writes a few hundred lines, not thousands.
pub const LINE_EVERY: Duration = Duration::from_secs(5);

/// The environment variable that sets [`LINE_EVERY`] in seconds (`0`: a
/// line at every step, which the tests use).
pub const LINE_EVERY_VAR: &str = "QCSIM_PROGRESS_EVERY";

/// A long command's progress: a bar, lines, or nothing.
pub struct Progress {
    shown: Shown,
}

enum Shown {
    Bar(ProgressBar),
    Lines(Mutex<Lines>),
    Hidden,
}

/// What the plain lines need between two of them.
struct Lines {
    /// The command, which starts every line (`qcsim campaign`).
    what: String,
    unit: String,
    len: u64,
    pos: u64,
    msg: String,
    started: Instant,
    last: Instant,
    every: Duration,
    printed: bool,
}

/// Progress of command `what` over `len` units named `unit` ("cases",
/// "jobs", "runs").
pub fn bar(what: &str, len: u64, unit: &str, quiet: bool) -> Progress {
    let shown = if quiet {
        Shown::Hidden
    } else if std::io::stderr().is_terminal() {
        Shown::Bar(terminal_bar(len, unit))
    } else {
        let now = Instant::now();
        Shown::Lines(Mutex::new(Lines {
            what: format!("qcsim {what}"),
            unit: unit.to_owned(),
            len,
            pos: 0,
            msg: String::new(),
            started: now,
            last: now,
            every: line_every(),
            printed: false,
        }))
    };
    Progress { shown }
}

/// [`LINE_EVERY`], or the seconds `QCSIM_PROGRESS_EVERY` gives (a value
/// that is not a number of seconds is ignored).
fn line_every() -> Duration {
    std::env::var(LINE_EVERY_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(LINE_EVERY, Duration::from_secs_f64)
}

fn terminal_bar(len: u64, unit: &str) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit}, {{rate}}, {{msg}} [{{elapsed_precise}}, {{eta}} left]"
        ))
        .expect("a valid template")
        // indicatif's own {per_sec} prints four decimals.
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1}/s", s.per_sec());
        }),
    );
    b
}

impl Progress {
    pub fn inc(&self, n: u64) {
        match &self.shown {
            Shown::Bar(b) => b.inc(n),
            Shown::Lines(l) => self.update(l, |l| l.pos += n),
            Shown::Hidden => {}
        }
    }

    pub fn set_position(&self, pos: u64) {
        match &self.shown {
            Shown::Bar(b) => b.set_position(pos),
            Shown::Lines(l) => self.update(l, |l| l.pos = pos),
            Shown::Hidden => {}
        }
    }

    pub fn set_length(&self, len: u64) {
        match &self.shown {
            Shown::Bar(b) => b.set_length(len),
            Shown::Lines(l) => lock(l).len = len,
            Shown::Hidden => {}
        }
    }

    /// The message after the figures (`3 failed`); a line is printed only
    /// when its time comes, so a new message alone prints nothing.
    pub fn set_message(&self, msg: impl Into<String>) {
        match &self.shown {
            Shown::Bar(b) => b.set_message(msg.into()),
            Shown::Lines(l) => lock(l).msg = msg.into(),
            Shown::Hidden => {}
        }
    }

    /// Run `f`, which prints, with the bar out of its way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.shown {
            Shown::Bar(b) => b.suspend(f),
            _ => f(),
        }
    }

    /// The end: the bar goes; after progress lines, one last line says
    /// where the work ended and how long it took.
    pub fn finish_and_clear(&self) {
        match &self.shown {
            Shown::Bar(b) => b.finish_and_clear(),
            Shown::Lines(l) => {
                let l = lock(l);
                if l.printed {
                    print_line(&l.done_line());
                }
            }
            Shown::Hidden => {}
        }
    }

    fn update(&self, l: &Mutex<Lines>, f: impl FnOnce(&mut Lines)) {
        let mut l = lock(l);
        f(&mut l);
        let now = Instant::now();
        if now.duration_since(l.last) >= l.every {
            l.last = now;
            l.printed = true;
            print_line(&l.line(now));
        }
    }
}

/// The lines' state, even if a thread panicked holding it: progress is
/// never worth a second panic.
fn lock(l: &Mutex<Lines>) -> std::sync::MutexGuard<'_, Lines> {
    l.lock().unwrap_or_else(|e| e.into_inner())
}

/// One line to standard error; an error writing it is ignored (progress
/// is not the command's output, and a closed standard error must not
/// stop the work).
fn print_line(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

impl Lines {
    /// `qcsim campaign: 120/500 cases (24%), 4.1/s, 2 failed, 29 s so far, about 1m33s left`
    fn line(&self, now: Instant) -> String {
        let elapsed = now.duration_since(self.started).as_secs_f64();
        let rate = if elapsed > 0.0 {
            self.pos as f64 / elapsed
        } else {
            0.0
        };
        let mut s = format!("{}: {}/{} {}", self.what, self.pos, self.len, self.unit);
        if let Some(pct) = (self.pos.min(self.len) * 100).checked_div(self.len) {
            s.push_str(&format!(" ({pct}%)"));
        }
        s.push_str(&format!(", {rate:.1}/s"));
        if !self.msg.is_empty() {
            s.push_str(&format!(", {}", self.msg));
        }
        s.push_str(&format!(", {} so far", duration(elapsed)));
        if rate > 0.0 && self.len > self.pos {
            let left = (self.len - self.pos) as f64 / rate;
            s.push_str(&format!(", about {} left", duration(left)));
        }
        s
    }

    fn done_line(&self) -> String {
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut s = format!(
            "{}: done, {}/{} {} in {}",
            self.what,
            self.pos,
            self.len,
            self.unit,
            duration(elapsed)
        );
        if !self.msg.is_empty() {
            s.push_str(&format!(", {}", self.msg));
        }
        s
    }
}

/// Seconds as a person reads them: `7 s`, `3m05s`, `1h02m`.
fn duration(secs: f64) -> String {
    let s = secs.round() as u64;
    if s < 60 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(len: u64, pos: u64, msg: &str, secs: u64) -> (Lines, Instant) {
        let started = Instant::now();
        let l = Lines {
            what: "qcsim campaign".into(),
            unit: "cases".into(),
            len,
            pos,
            msg: msg.into(),
            started,
            last: started,
            every: LINE_EVERY,
            printed: false,
        };
        (l, started + Duration::from_secs(secs))
    }

    #[test]
    fn a_line_says_where_how_fast_and_how_long() {
        let (l, now) = lines(500, 120, "2 failed", 30);
        assert_eq!(
            l.line(now),
            "qcsim campaign: 120/500 cases (24%), 4.0/s, 2 failed, 30 s so far, about 1m35s left"
        );
        let (l, now) = lines(10, 0, "", 0);
        assert_eq!(
            l.line(now),
            "qcsim campaign: 0/10 cases (0%), 0.0/s, 0 s so far"
        );
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(duration(7.2), "7 s");
        assert_eq!(duration(185.0), "3m05s");
        assert_eq!(duration(3720.0), "1h02m");
    }
}
