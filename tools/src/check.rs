//! `qemu-img check [-r leaks|all]` on an image file: [`check_file`] takes
//! the image's locks as qemu-img does, runs the checker (or its repair,
//! `oracle::check`) on the file and returns a [`CheckOutcome`], which
//! carries the report and qemu-img check's exit code semantics (0 clean,
//! 1 check errors or a failed check, 2 corruptions, 3 leaks only).

use std::path::{Path, PathBuf};

use engine::dev::LockRequest;
use oracle::check::{self, CheckReport, RepairError};

use crate::files::{open_locked, OpenError};

pub use oracle::check::RepairMode;

/// How to check.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Repair (qemu-img check's `-r`), or only check.
    pub repair: Option<RepairMode>,
    /// qemu-img's `-U`: check an image other processes have open, even for
    /// writing, without keeping them from writing it (the result may then
    /// be inconsistent). Not with a repair.
    pub force_share: bool,
}

/// Why no check ran. Every message starts as qemu-img's: "Could not open
/// 'FILE'".
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// `-U` asked of a repair, which writes the image.
    #[error("Could not open '{path}': force-share (-U) is only for read-only opens, and repair (-r) writes the image")]
    ForceShareRepair { path: PathBuf },
    /// The file could not be opened or locked (another process uses it).
    #[error("Could not open '{path}': {error}")]
    Open {
        path: PathBuf,
        error: Box<OpenError>,
    },
    /// The repair could not open the image (its header is unusable).
    #[error("Could not open '{path}': {error}")]
    Repair { path: PathBuf, error: RepairError },
}

/// What a check found, as qemu-img check reports it.
#[derive(Debug, Clone)]
pub struct CheckOutcome {
    /// The report, its `filename` the path checked.
    pub report: CheckReport,
}

impl CheckOutcome {
    /// The messages qemu-img check prints on standard error before its
    /// report, one per finding ("Leaked cluster 4 refcount=1 reference=0").
    pub fn finding_messages(&self) -> impl Iterator<Item = &str> {
        self.report.findings.iter().map(|f| f.message.as_str())
    }

    /// Why the check itself failed, when it did: qemu-img then prints this
    /// and "Check failed", and no report.
    pub fn failure(&self) -> Option<&str> {
        self.report.failure.as_deref()
    }

    /// Whether qemu-img would say "Check failed": the check failed, or it
    /// met check errors.
    pub fn check_failed(&self) -> bool {
        self.report.failure.is_some() || self.report.check_errors != 0
    }

    /// qemu-img check's exit code: 0 clean, 1 check errors or a failed
    /// check, 2 corruptions, 3 leaks only.
    pub fn exit_code(&self) -> i32 {
        self.report.exit_code()
    }

    /// The human report qemu-img check prints on standard output.
    pub fn human(&self) -> String {
        self.report.human()
    }

    /// The report as JSON (qemu-img's field names, serde_json's two-space
    /// pretty layout), without a final newline.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(&self.report).expect("a check report serialises")
    }
}

/// Check (or repair) the qcow2 image at `path`. The locks are QEMU's, as
/// qemu-img check takes them: a check reads (and keeps writers out, unless
/// `force_share`), a repair writes, so nobody else may have the image open
/// for writing or reading while it runs: an image QEMU is writing is
/// refused, not repaired under it.
pub fn check_file(path: &Path, opts: &CheckOptions) -> Result<CheckOutcome, CheckError> {
    let repair = opts.repair.is_some();
    if repair && opts.force_share {
        return Err(CheckError::ForceShareRepair {
            path: path.to_owned(),
        });
    }
    let req = LockRequest::qcow2_file(!repair, opts.force_share);
    let mut locked = open_locked(path, repair, req).map_err(|error| CheckError::Open {
        path: path.to_owned(),
        error: Box::new(error),
    })?;
    let file = &mut locked.file;
    let mut report = match opts.repair {
        None => check::check(&*file),
        Some(mode) => check::repair(file, mode).map_err(|error| CheckError::Repair {
            path: path.to_owned(),
            error,
        })?,
    };
    report.filename = path.display().to_string();
    Ok(CheckOutcome { report })
}
