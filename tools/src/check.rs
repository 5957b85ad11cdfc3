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

    /// The report as `qemu-img check --output json` prints it, byte for
    /// byte, without the final newline: its field names, its layout (four
    /// spaces, see [`crate::info`]) and its field order, zero counters
    /// left out as QEMU leaves them out.
    pub fn json(&self) -> String {
        crate::info::pretty_json(&QemuCheckJson::of(&self.report))
    }
}

/// QEMU's `ImageCheck` as qemu-img prints it. qemu-img builds the JSON as
/// a QDict, whose entries come out in the order of its hash table: by
/// bucket (`tdb_hash(key) % 512`, qobject/qdict.c), the latest insertion
/// first within a bucket. These twelve keys fall in twelve different
/// buckets, so the order is fixed: the fields below are in it (the test
/// `check_json_fields_are_in_qdict_order` recomputes it). The counters QEMU
/// marks as present only when non-zero (all but `check-errors`) are left out
/// when zero.
#[derive(serde::Serialize)]
struct QemuCheckJson<'a> {
    #[serde(rename = "image-end-offset", skip_serializing_if = "is_zero")]
    image_end_offset: u64,
    #[serde(rename = "compressed-clusters", skip_serializing_if = "is_zero")]
    compressed_clusters: u64,
    #[serde(rename = "total-clusters", skip_serializing_if = "is_zero")]
    total_clusters: u64,
    #[serde(skip_serializing_if = "is_zero")]
    corruptions: u64,
    #[serde(rename = "corruptions-fixed", skip_serializing_if = "is_zero")]
    corruptions_fixed: u64,
    #[serde(rename = "check-errors")]
    check_errors: u64,
    #[serde(skip_serializing_if = "is_zero")]
    leaks: u64,
    #[serde(rename = "leaks-fixed", skip_serializing_if = "is_zero")]
    leaks_fixed: u64,
    #[serde(rename = "allocated-clusters", skip_serializing_if = "is_zero")]
    allocated_clusters: u64,
    filename: &'a str,
    format: &'a str,
    #[serde(rename = "fragmented-clusters", skip_serializing_if = "is_zero")]
    fragmented_clusters: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl<'a> QemuCheckJson<'a> {
    fn of(r: &'a CheckReport) -> QemuCheckJson<'a> {
        QemuCheckJson {
            image_end_offset: r.image_end_offset,
            compressed_clusters: r.compressed_clusters,
            total_clusters: r.total_clusters,
            corruptions: r.corruptions,
            corruptions_fixed: r.corruptions_fixed,
            check_errors: r.check_errors,
            leaks: r.leaks,
            leaks_fixed: r.leaks_fixed,
            allocated_clusters: r.allocated_clusters,
            filename: &r.filename,
            format: &r.format,
            fragmented_clusters: r.fragmented_clusters,
        }
    }
}

/// Check (or repair) the qcow2 image at `path`. The locks are QEMU's, as
/// qemu-img check takes them: a check reads (and keeps writers out, unless
/// `force_share`), a repair writes, so nobody else may have the image open
/// for writing or reading while it runs: an image QEMU is writing is
/// refused, not repaired under it. An external data file is locked as
/// QEMU locks an image's data file ([`LockRequest::data_file`], read-only
/// for a check): a check is refused while another process may resize it
/// (an image open for writing on it), a repair while any other process
/// has it open as a data file; a plain writer of the raw file keeps
/// neither out, as it keeps neither of qemu-img's out.
pub fn check_file(path: &Path, opts: &CheckOptions) -> Result<CheckOutcome, CheckError> {
    let repair = opts.repair.is_some();
    if repair && opts.force_share {
        return Err(CheckError::ForceShareRepair {
            path: path.to_owned(),
        });
    }
    let req = LockRequest::qcow2_file(!repair, opts.force_share);
    let open_error = |error| CheckError::Open {
        path: path.to_owned(),
        error: Box::new(error),
    };
    let mut locked = open_locked(path, repair, req).map_err(open_error)?;
    // qemu-img opens the data file too, and holds its locks, though the
    // check never reads it.
    locked
        .lock_data_file(path, !repair, opts.force_share)
        .map_err(open_error)?;
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
