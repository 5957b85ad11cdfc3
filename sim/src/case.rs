//! A case: everything one simulated run depends on, as versioned JSON.
//!
//! A run is a pure function of its case: the engine and image options, the
//! device and its faults, the guest workload and the seed from which every
//! random stream of the run (scheduling, latency, faults, crash states)
//! derives. Saved cases are replayed bit for bit, so the format is strict:
//! unknown fields are refused, and the `version` field says which rules a
//! case was written under.
//!
//! Cases come from three places: [`Case::generate`] (a workload profile and
//! a seed), [`Case::from_arbitrary`] (fuzzer bytes) and JSON files.

use std::path::Path;

use engine::{Compat, CreateOptions, EngineOptions};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};
use serde::{Deserialize, Serialize};

use crate::workload::Profile;

/// The case format this build reads and writes.
pub const CASE_VERSION: u32 = 1;
/// Largest virtual disk a case may ask for: the model's and the simulated
/// disk's memory grow with it.
pub const MAX_VIRTUAL_SIZE: u64 = 64 << 20;
/// Most guest operations in one case.
pub const MAX_OPS: usize = 4096;
/// Most operations in one concurrency group.
pub const MAX_GROUP_OPS: usize = 64;
/// Longest guest request, in sectors (2 MiB).
pub const MAX_OP_SECTORS: u64 = 4096;

/// One simulated run, whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Always [`CASE_VERSION`].
    pub version: u32,
    /// The seed every random stream of the run derives from.
    pub seed: u64,
    /// The profile that generated the workload; None for cases decoded from
    /// fuzzer bytes or written by hand. Informative only.
    pub profile: Option<Profile>,
    pub engine: EngineOptions,
    pub image: ImageSpec,
    /// The simulated disk and its faults.
    pub device: DeviceSpec,
    /// Concurrency groups, run in order; the operations of one group are
    /// issued together and run concurrently.
    pub workload: Vec<Vec<Op>>,
}

/// The image the run creates before the workload starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// As `qemu-img create -o`; `backing_file` and `backing_format` must
    /// agree with `backing` ([`BackingSpec::file_name`] and
    /// [`BackingSpec::format_name`]).
    pub create: CreateOptions,
    pub backing: Option<BackingSpec>,
}

/// A backing file, described rather than stored: its content is generated
/// by [`oracle::data`] from `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "format", rename_all = "snake_case", deny_unknown_fields)]
pub enum BackingSpec {
    Raw {
        data: BackingData,
    },
    /// A qcow2 image (without a backing file of its own) holding `data`.
    Qcow2 {
        cluster_size: u64,
        data: BackingData,
    },
}

impl BackingSpec {
    pub fn data(&self) -> BackingData {
        match *self {
            BackingSpec::Raw { data } | BackingSpec::Qcow2 { data, .. } => data,
        }
    }

    /// The name the overlay's header gives the backing file.
    pub fn file_name(&self) -> &'static str {
        match self {
            BackingSpec::Raw { .. } => "backing.raw",
            BackingSpec::Qcow2 { .. } => "backing.qcow2",
        }
    }

    /// The backing format the overlay's header records.
    pub fn format_name(&self) -> &'static str {
        match self {
            BackingSpec::Raw { .. } => "raw",
            BackingSpec::Qcow2 { .. } => "qcow2",
        }
    }
}

/// The simulated disk's settings and faults.
///
/// This is qcsim's own description of a device until the simulated disk's
/// options type lands; the two are to be unified (see `sim::disk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// The device's atomic unit in bytes: 512 or 4096.
    pub sector_size: u32,
    pub latency: LatencySpec,
    /// Whether write_zeroes is done efficiently; when false the device
    /// refuses it with "not supported".
    pub write_zeroes_supported: bool,
    /// Whether discard does anything; when false it is a no-op.
    pub discard_supported: bool,
    pub faults: FaultSpec,
}

/// Request latencies in simulated microseconds, each drawn uniformly from
/// `min..=max` (so `min <= max`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    pub read_min: u32,
    pub read_max: u32,
    pub write_min: u32,
    pub write_max: u32,
    pub flush_min: u32,
    pub flush_max: u32,
}

/// Injected faults. Rates are per mille of requests of the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub read_eio_permille: u16,
    pub write_eio_permille: u16,
    pub flush_eio_permille: u16,
    /// Writes past this many bytes of device fail with ENOSPC.
    pub capacity: Option<u64>,
    /// Harsher than qcow2 can survive without checksums: a crash may tear
    /// a write inside a device sector. Only "no panic, no hang" holds.
    pub torn_writes: bool,
    /// Harsh: writes that report success but never reach the medium.
    pub lost_writes_permille: u16,
    /// Harsh: writes that land at the wrong offset.
    pub misdirected_writes_permille: u16,
}

impl FaultSpec {
    /// No faults at all.
    pub const NONE: FaultSpec = FaultSpec {
        read_eio_permille: 0,
        write_eio_permille: 0,
        flush_eio_permille: 0,
        capacity: None,
        torn_writes: false,
        lost_writes_permille: 0,
        misdirected_writes_permille: 0,
    };

    /// Whether any fault beyond what the oracle's rules cover is on; the
    /// model's verdicts do not apply then.
    pub fn harsh(&self) -> bool {
        self.torn_writes || self.lost_writes_permille > 0 || self.misdirected_writes_permille > 0
    }
}

/// One guest operation. Offsets and lengths are in 512-byte guest sectors.
///
/// A data write's content is generated by [`oracle::data`] from its write
/// id, which is its number in [`Case::numbered_ops`].
///
/// A `crash` in a group with other operations cuts them short: they are
/// issued, and the machine crashes at a point the run draws from its crash
/// stream, possibly before any of them completes. The image is then
/// reopened and checked whole before the next group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    Write {
        sector: u64,
        sectors: u64,
    },
    Read {
        sector: u64,
        sectors: u64,
    },
    WriteZeroes {
        sector: u64,
        sectors: u64,
        unmap: bool,
    },
    Discard {
        sector: u64,
        sectors: u64,
    },
    Flush,
    Crash,
}

impl Op {
    /// The sectors the operation covers, as (first sector, count).
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            Op::Write { sector, sectors }
            | Op::Read { sector, sectors }
            | Op::WriteZeroes {
                sector, sectors, ..
            }
            | Op::Discard { sector, sectors } => Some((sector, sectors)),
            Op::Flush | Op::Crash => None,
        }
    }
}

/// Why a case is refused.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("reading case file {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("case JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("case version {found} is not supported (this build reads version {CASE_VERSION})")]
    Version { found: u32 },
    #[error(
        "virtual size {0} bytes: must be a non-zero multiple of 512 and at most {MAX_VIRTUAL_SIZE}"
    )]
    VirtualSize(u64),
    #[error("cluster size {0}: must be a power of two from 512 to 2 MiB")]
    ClusterSize(u64),
    #[error("refcount bits {bits}: must be a power of two from 1 to 64 (16 for compat 0.10)")]
    RefcountBits { bits: u32 },
    #[error("lazy refcounts need compat 1.1")]
    LazyRefcountsOnV2,
    #[error("backing: {0}")]
    Backing(String),
    #[error("device: {0}")]
    Device(String),
    #[error("workload holds {0} operations, more than {MAX_OPS}")]
    TooManyOps(usize),
    #[error("group {group}: {problem}")]
    Group { group: usize, problem: String },
    #[error(
        "group {group}, op {index}: sectors {sector}+{sectors} must be 1 to {MAX_OP_SECTORS} \
         sectors inside the {disk}-sector disk"
    )]
    OpRange {
        group: usize,
        index: usize,
        sector: u64,
        sectors: u64,
        disk: u64,
    },
}

#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

impl Case {
    /// Parses and validates a case.
    pub fn from_json(text: &str) -> Result<Case, CaseError> {
        // The version first, so that a case from another format version is
        // refused for its version and not for a field this build lacks.
        let VersionOnly { version } = serde_json::from_str(text)?;
        if version != CASE_VERSION {
            return Err(CaseError::Version { found: version });
        }
        let case: Case = serde_json::from_str(text)?;
        case.validate()?;
        Ok(case)
    }

    /// Pretty JSON, ending with a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a case always serialises");
        s.push('\n');
        s
    }

    pub fn load(path: &Path) -> Result<Case, CaseError> {
        let text = std::fs::read_to_string(path).map_err(|source| CaseError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Case::from_json(&text)
    }

    pub fn save(&self, path: &Path) -> Result<(), CaseError> {
        std::fs::write(path, self.to_json()).map_err(|source| CaseError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// The virtual disk size in guest sectors.
    pub fn sectors(&self) -> u64 {
        self.image.create.size / SECTOR_SIZE as u64
    }

    /// Every operation with its group index and its number, counting from
    /// 1 in workload order. A data write's number is its write id, and the
    /// runner may use numbers as op ids: both are unique within the case.
    pub fn numbered_ops(&self) -> impl Iterator<Item = (usize, u64, &Op)> {
        self.workload
            .iter()
            .enumerate()
            .flat_map(|(g, ops)| ops.iter().map(move |op| (g, op)))
            .enumerate()
            .map(|(i, (g, op))| (g, i as u64 + 1, op))
    }

    /// The backing file's content, as the model and the runner see it.
    pub fn backing_data(&self) -> Option<BackingData> {
        self.image.backing.map(|b| b.data())
    }

    /// A fresh reference model of this case's guest disk.
    pub fn model(&self) -> oracle::model::Model {
        oracle::model::Model::new(self.sectors(), self.backing_data())
    }

    /// Number of crash-and-reopen points.
    pub fn crashes(&self) -> usize {
        self.numbered_ops()
            .filter(|(_, _, op)| matches!(op, Op::Crash))
            .count()
    }

    /// Checks every constraint the run relies on.
    pub fn validate(&self) -> Result<(), CaseError> {
        if self.version != CASE_VERSION {
            return Err(CaseError::Version {
                found: self.version,
            });
        }
        self.validate_image()?;
        self.validate_device()?;
        self.validate_workload()
    }

    fn validate_image(&self) -> Result<(), CaseError> {
        let c = &self.image.create;
        if c.size == 0 || !c.size.is_multiple_of(SECTOR_SIZE as u64) || c.size > MAX_VIRTUAL_SIZE {
            return Err(CaseError::VirtualSize(c.size));
        }
        if !valid_cluster_size(c.cluster_size) {
            return Err(CaseError::ClusterSize(c.cluster_size));
        }
        let bits_ok = match c.compat {
            Compat::V2 => c.refcount_bits == 16,
            Compat::V3 => c.refcount_bits.is_power_of_two() && c.refcount_bits <= 64,
        };
        if !bits_ok {
            return Err(CaseError::RefcountBits {
                bits: c.refcount_bits,
            });
        }
        if c.lazy_refcounts && c.compat == Compat::V2 {
            return Err(CaseError::LazyRefcountsOnV2);
        }
        match &self.image.backing {
            None => {
                if c.backing_file.is_some() || c.backing_format.is_some() {
                    return Err(CaseError::Backing(
                        "the image names a backing file but the case describes none".into(),
                    ));
                }
            }
            Some(b) => {
                if c.backing_file.as_deref() != Some(b.file_name())
                    || c.backing_format.as_deref() != Some(b.format_name())
                {
                    return Err(CaseError::Backing(format!(
                        "the image must name backing file {:?} of format {:?}",
                        b.file_name(),
                        b.format_name()
                    )));
                }
                let data = b.data();
                if data.sectors == 0 || data.sectors * SECTOR_SIZE as u64 > MAX_VIRTUAL_SIZE {
                    return Err(CaseError::Backing(format!(
                        "{} sectors: must be 1 to {}",
                        data.sectors,
                        MAX_VIRTUAL_SIZE / SECTOR_SIZE as u64
                    )));
                }
                if let BackingPattern::Scattered { percent, .. } = data.pattern {
                    if percent > 100 {
                        return Err(CaseError::Backing(format!("{percent} percent")));
                    }
                }
                if let BackingSpec::Qcow2 { cluster_size, .. } = b {
                    if !valid_cluster_size(*cluster_size) {
                        return Err(CaseError::Backing(format!(
                            "cluster size {cluster_size}: must be a power of two from 512 to 2 MiB"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    fn validate_device(&self) -> Result<(), CaseError> {
        let d = &self.device;
        if d.sector_size != 512 && d.sector_size != 4096 {
            return Err(CaseError::Device(format!(
                "sector size {}: must be 512 or 4096",
                d.sector_size
            )));
        }
        let l = &d.latency;
        for (name, min, max) in [
            ("read", l.read_min, l.read_max),
            ("write", l.write_min, l.write_max),
            ("flush", l.flush_min, l.flush_max),
        ] {
            if min > max {
                return Err(CaseError::Device(format!(
                    "{name} latency {min}..={max} is empty"
                )));
            }
        }
        let f = &d.faults;
        for (name, rate) in [
            ("read_eio_permille", f.read_eio_permille),
            ("write_eio_permille", f.write_eio_permille),
            ("flush_eio_permille", f.flush_eio_permille),
            ("lost_writes_permille", f.lost_writes_permille),
            ("misdirected_writes_permille", f.misdirected_writes_permille),
        ] {
            if rate > 1000 {
                return Err(CaseError::Device(format!("{name} {rate}: at most 1000")));
            }
        }
        Ok(())
    }

    fn validate_workload(&self) -> Result<(), CaseError> {
        let disk = self.sectors();
        let total: usize = self.workload.iter().map(Vec::len).sum();
        if total > MAX_OPS {
            return Err(CaseError::TooManyOps(total));
        }
        for (group, ops) in self.workload.iter().enumerate() {
            let problem = if ops.is_empty() {
                Some("empty".to_string())
            } else if ops.len() > MAX_GROUP_OPS {
                Some(format!(
                    "{} operations, more than {MAX_GROUP_OPS}",
                    ops.len()
                ))
            } else if ops.iter().filter(|op| matches!(op, Op::Crash)).count() > 1 {
                Some("more than one crash".to_string())
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(CaseError::Group { group, problem });
            }
            for (index, op) in ops.iter().enumerate() {
                let Some((sector, sectors)) = op.range() else {
                    continue;
                };
                let inside = sector.checked_add(sectors).is_some_and(|end| end <= disk);
                if sectors == 0 || sectors > MAX_OP_SECTORS || !inside {
                    return Err(CaseError::OpRange {
                        group,
                        index,
                        sector,
                        sectors,
                        disk,
                    });
                }
            }
        }
        Ok(())
    }
}

fn valid_cluster_size(size: u64) -> bool {
    size.is_power_of_two() && (512..=2 << 20).contains(&size)
}
