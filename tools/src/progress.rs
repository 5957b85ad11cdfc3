//! qemu-img's progress report (`-p`): [`Progress`] turns the percentages
//! a command reaches into the lines qemu-img prints for them, and
//! [`ConvertPlan`] is how `convert` counts its percentages.
//!
//! A line is `    (P/100%)` with two decimals, ended by a carriage return
//! so that on a terminal the next one overwrites it; the report ends with
//! a newline. A percentage is printed only when it is 0 or 100 or moves
//! more than the report's step from the last one printed, so that a long
//! copy prints about a hundred lines. Percentages are `f32`, added and
//! compared as `f32`, because that is the precision qemu-img reports in:
//! computed any other way, a sum of steps could land on the other side of
//! a threshold and print a line qemu-img does not. Nothing here reads the
//! clock: the same work reports the same lines.

use std::io::{self, Write};

/// qemu-img's progress lines, written to `out` as they come.
pub struct Progress<W: Write> {
    out: W,
    current: f32,
    last_print: f32,
    min_skip: f32,
}

impl<W: Write> Progress<W> {
    /// A report that prints a percentage when it moves more than
    /// `min_skip` from the last one printed (1 for `convert`).
    pub fn new(out: W, min_skip: f32) -> Self {
        Progress {
            out,
            current: 0.0,
            last_print: 0.0,
            min_skip,
        }
    }

    /// The work stands at `percent` of the whole.
    pub fn set(&mut self, percent: f32) -> io::Result<()> {
        self.update(percent)
    }

    /// `delta` percent more of a part of the work that is `share` percent
    /// of the whole.
    pub fn advance(&mut self, delta: f32, share: f32) -> io::Result<()> {
        self.update(self.current + delta / 100.0 * share)
    }

    fn update(&mut self, percent: f32) -> io::Result<()> {
        let current = percent.min(100.0);
        self.current = current;
        if current > self.last_print + self.min_skip
            || current < self.last_print - self.min_skip
            || current == 100.0
            || current == 0.0
        {
            self.last_print = current;
            // Printed as the double it widens to, as a C varargs call
            // widens it: the digits are those of the f32's exact value.
            write!(self.out, "    ({:.2}/100%)\r", f64::from(current))?;
            self.out.flush()?;
        }
        Ok(())
    }

    /// The end of the report: a newline after the last line.
    pub fn end(mut self) -> io::Result<W> {
        self.out.write_all(b"\n")?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// qemu-img's largest request, in bytes (`INT_MAX` rounded down to whole
/// sectors): `convert` never asks the block status of more at once.
pub const MAX_STATUS_REQUEST: u64 = (i32::MAX as u64) & !511;

/// The most `convert` copies in one request, unless the destination's
/// clusters are larger (2 MiB).
pub const CONVERT_BUFFER: u64 = 2 << 20;

/// `convert`'s progress as qemu-img counts it: the source is cut into
/// requests, each a run of one block status (as qemu-img asks it, at most
/// [`MAX_STATUS_REQUEST`] at a time, rounded down to the source's cluster
/// size when that leaves something), and a run that is copied as data into
/// pieces of at most the copy buffer. Only those data requests count: the
/// percentage after each is the share of data sectors copied so far, and
/// zero or backing-file runs, which are not copied, move nothing.
///
/// The plan is made before the copy, so the percentages depend only on
/// the source; the copy reports them in order as it passes each request's
/// end ([`ConvertPlan::reached`]), whatever order its chunks finish in.
#[derive(Debug, Clone, Default)]
pub struct ConvertPlan {
    /// For each data request, where it ends and the data sectors up to
    /// and including it.
    requests: Vec<(u64, u64)>,
    /// The data sectors of the whole source.
    total: u64,
    /// The first request not yet reported.
    next: usize,
}

impl ConvertPlan {
    /// An empty plan, for [`ConvertPlan::add_run`] to fill from offset 0 up.
    pub fn new() -> Self {
        ConvertPlan::default()
    }

    /// The run of `len` bytes at `start`, copied as data (`data`) or not,
    /// cut into requests of at most `buffer` bytes.
    pub fn add_run(&mut self, start: u64, len: u64, data: bool, buffer: u64) {
        if !data {
            return;
        }
        let end = start + len;
        let mut pos = start;
        while pos < end {
            let n = (end - pos).min(buffer);
            self.total += n.div_ceil(512);
            self.requests.push((pos + n, self.total));
            pos += n;
        }
    }

    /// The percentages of the data requests that end at or before
    /// `offset` and were not reported yet, in order.
    pub fn reached(&mut self, offset: u64) -> Vec<f32> {
        let mut out = Vec::new();
        while let Some(&(end, done)) = self.requests.get(self.next) {
            if end > offset {
                break;
            }
            // Worked out in double and then narrowed, as qemu-img does.
            out.push((100.0 * done as f64 / self.total as f64) as f32);
            self.next += 1;
        }
        out
    }
}
