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

/// A guest sector that held something the model did not allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub sector: u64,
    pub when: When,
    /// What the sector held, decoded.
    pub observed: Content,
    /// What the model allowed, sorted.
    pub allowed: Vec<Value>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let byte = self.sector * SECTOR_SIZE as u64;
        match self.when {
            When::Read { op } => write!(f, "read {op}: ")?,
            When::Recovery { epoch } => write!(f, "after crash {epoch}: ")?,
        }
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
