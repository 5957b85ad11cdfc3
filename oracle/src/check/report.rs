//! What a check found: the counters `qemu-img check` reports (with its JSON
//! field names and omission rules, its human wording and exit codes), and
//! the list of findings behind them.

use serde::Serialize;

/// One thing the checker found, with the offsets involved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    /// The host offset the finding is about, when there is one.
    pub offset: Option<u64>,
    /// QEMU-style one-line message.
    pub message: String,
}

/// How a finding counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    Corruption,
    Leak,
    CheckError,
    Repaired,
}

/// The result of a check, as `qemu-img check` reports it.
///
/// `failure` is set when `qemu-img` would produce no report at all: the
/// image cannot be opened, or the check itself failed. Such a report has
/// exit code 1 and prints only the failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub filename: String,
    pub format: String,
    pub check_errors: u64,
    pub corruptions: u64,
    pub leaks: u64,
    pub corruptions_fixed: u64,
    pub leaks_fixed: u64,
    pub allocated_clusters: u64,
    pub total_clusters: u64,
    pub fragmented_clusters: u64,
    pub compressed_clusters: u64,
    pub image_end_offset: u64,
    pub failure: Option<String>,
    pub findings: Vec<Finding>,
    /// Of `corruptions`: clusters of refcount 1 whose L1 or L2 entry
    /// lacks COPIED (a needless copy on the next write, not a danger to
    /// data), counted whole where `findings` stops at its bound. Not
    /// part of `qemu-img check`'s output.
    pub copied_missing: u64,
}

/// How [`CheckReport::failure`] begins when the image could not be
/// opened at all.
pub(crate) const OPEN_FAILED: &str = "Could not open image: ";

impl CheckReport {
    /// Why the image could not be opened, when that is why the check
    /// failed (qemu-img reports it as any open failure, without "Check
    /// failed").
    pub fn open_failure(&self) -> Option<&str> {
        self.failure.as_deref()?.strip_prefix(OPEN_FAILED)
    }

    /// `qemu-img check`'s exit code: 0 clean, 1 check errors or a failed
    /// check, 2 corruptions, 3 leaks only.
    pub fn exit_code(&self) -> i32 {
        if self.failure.is_some() || self.check_errors != 0 {
            1
        } else if self.corruptions != 0 {
            2
        } else if self.leaks != 0 {
            3
        } else {
            0
        }
    }

    /// Whether the image has neither corruptions nor check errors (leaks
    /// are allowed).
    pub fn is_consistent(&self) -> bool {
        self.failure.is_none() && self.check_errors == 0 && self.corruptions == 0
    }

    /// The JSON object `qemu-img check --output json` prints: zero-valued
    /// optional counters are omitted, as QEMU omits them.
    pub fn to_qemu_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        let mut opt = |k: &str, v: u64| {
            if v != 0 {
                m.insert(k.to_string(), v.into());
            }
        };
        opt("image-end-offset", self.image_end_offset);
        opt("total-clusters", self.total_clusters);
        opt("corruptions", self.corruptions);
        opt("leaks", self.leaks);
        opt("corruptions-fixed", self.corruptions_fixed);
        opt("leaks-fixed", self.leaks_fixed);
        opt("allocated-clusters", self.allocated_clusters);
        opt("fragmented-clusters", self.fragmented_clusters);
        opt("compressed-clusters", self.compressed_clusters);
        m.insert("check-errors".into(), self.check_errors.into());
        m.insert("filename".into(), self.filename.clone().into());
        m.insert("format".into(), self.format.clone().into());
        serde_json::Value::Object(m)
    }

    /// The human report `qemu-img check` prints on stdout.
    pub fn human(&self) -> String {
        let mut out = String::new();
        if self.corruptions_fixed != 0 || self.leaks_fixed != 0 {
            out += &format!(
                "The following inconsistencies were found and repaired:\n\n    {} leaked clusters\n    {} corruptions\n\nDouble checking the fixed image now...\n",
                self.leaks_fixed, self.corruptions_fixed
            );
        }
        if self.corruptions == 0 && self.leaks == 0 && self.check_errors == 0 {
            out += "No errors were found on the image.\n";
        } else {
            if self.corruptions != 0 {
                out += &format!(
                    "\n{} errors were found on the image.\nData may be corrupted, or further writes to the image may corrupt it.\n",
                    self.corruptions
                );
            }
            if self.leaks != 0 {
                out += &format!(
                    "\n{} leaked clusters were found on the image.\nThis means waste of disk space, but no harm to data.\n",
                    self.leaks
                );
            }
            if self.check_errors != 0 {
                out += &format!(
                    "\n{} internal errors have occurred during the check.\n",
                    self.check_errors
                );
            }
        }
        if self.total_clusters != 0 && self.allocated_clusters != 0 {
            let a = self.allocated_clusters as f64;
            out += &format!(
                "{}/{} = {:.2}% allocated, {:.2}% fragmented, {:.2}% compressed clusters\n",
                self.allocated_clusters,
                self.total_clusters,
                a * 100.0 / self.total_clusters as f64,
                self.fragmented_clusters as f64 * 100.0 / a,
                self.compressed_clusters as f64 * 100.0 / a
            );
        }
        if self.image_end_offset != 0 {
            out += &format!("Image end offset: {}\n", self.image_end_offset);
        }
        out
    }
}

impl Serialize for CheckReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_qemu_json().serialize(s)
    }
}
