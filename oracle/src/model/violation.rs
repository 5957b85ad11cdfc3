//! A violation: a sector that held a value the model did not allow.

use super::types::{OpId, Value};
use crate::data::{Content, SECTOR_SIZE};

/// When the model saw the wrong value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum When {
    /// A guest read during a run.
    Read { op: OpId },
    /// The whole-disk read after the crash that ended epoch `epoch`
    /// (epochs count crashes from 0).
    Recovery { epoch: u32 },
}

/// The first op id of the reads a driver sends at the end of a run to
/// read the whole disk back: ids from here on are not the workload's
/// operations, and are named for what they are.
pub const READ_BACK_OPS: u64 = 1 << 63;

impl std::fmt::Display for When {
    /// `read op 12`, `the read-back at the end`, `after crash 1`: crashes
    /// are numbered from 1 here, as the runner's labels (`crash-1`) and a
    /// QEMU run's epochs (crash K ends `epoch-(K-1)`) number them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            When::Read { op } if op.0 >= READ_BACK_OPS => {
                write!(f, "the read-back at the end")
            }
            When::Read { op } => write!(f, "read {op}"),
            When::Recovery { epoch } => write!(f, "after crash {}", u64::from(epoch) + 1),
        }
    }
}

/// A guest sector that held something the model did not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub sector: u64,
    pub when: When,
    /// What the sector held, decoded.
    pub observed: Content,
    /// What the model allowed, sorted.
    pub allowed: Vec<Value>,
    /// The sector's bytes as they came back, for a report's hex diff
    /// against what the model allowed (copied only when a sector is wrong).
    pub got: Vec<u8>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let byte = self.sector * SECTOR_SIZE as u64;
        write!(f, "{}: ", self.when)?;
        write!(
            f,
            "guest sector {} (byte {byte:#x}) held {}, but the model allowed only ",
            self.sector, self.observed
        )?;
        for (i, v) in self.allowed.iter().enumerate() {
            if i > 0 {
                write!(f, " or ")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Violation {}

/// Violations grouped into runs of consecutive sectors that went wrong the
/// same way (same moment, same allowed values, and the same content shifted
/// by one sector per sector), one line per run, at most `max_lines` lines
/// (the last saying how many runs were left out). A lost cluster is one
/// line instead of a hundred.
pub fn summarize(violations: &[Violation], max_lines: usize) -> Vec<String> {
    let mut runs: Vec<(&Violation, u64)> = Vec::new();
    for v in violations {
        match runs.last_mut() {
            Some((first, n)) if continues(first, *n, v) => *n += 1,
            _ => runs.push((v, 1)),
        }
    }
    let mut lines: Vec<String> = runs
        .iter()
        .take(max_lines)
        .map(|(v, n)| {
            if *n == 1 {
                v.to_string()
            } else {
                format!("{v} (and the same for the next {} sectors)", n - 1)
            }
        })
        .collect();
    if runs.len() > max_lines {
        lines.push(format!(
            "... and {} more runs of wrong sectors",
            runs.len() - max_lines
        ));
    }
    lines
}

/// Whether `v` extends the run of `n` violations starting at `first`.
fn continues(first: &Violation, n: u64, v: &Violation) -> bool {
    let delta = n;
    v.sector == first.sector + delta
        && v.when == first.when
        && v.allowed == first.allowed
        && match (first.observed, v.observed) {
            (Content::Zero, Content::Zero) => true,
            (Content::Garbage(_), Content::Garbage(_)) => true,
            (Content::Written { id: a, sector: s }, Content::Written { id: b, sector: t }) => {
                a == b && s.checked_add(delta) == Some(t)
            }
            (Content::Backing { sector: s }, Content::Backing { sector: t }) => {
                s.checked_add(delta) == Some(t)
            }
            _ => false,
        }
}
