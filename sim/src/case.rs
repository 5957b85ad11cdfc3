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

use engine::format::header::CompressionType;
use engine::{Compat, CreateOptions, EngineOptions};
use oracle::data::{BackingData, BackingPattern, SECTOR_SIZE};
use serde::{Deserialize, Serialize};

use crate::disk::{DiskOptions, OptionsError};
use crate::exec::{ScheduleError, SchedulePolicy};
use crate::workload::Profile;

/// The case format this build reads and writes.
pub const CASE_VERSION: u32 = 1;
/// Largest virtual disk a case may ask for (1 TiB). The model, the
/// simulated disk's store, its write log and its crash states cost memory
/// in proportion to what is written, not to the virtual size; the reads
/// after every crash and at the end cover a disk larger than
/// [`WHOLE_SWEEP_MAX`] sparsely (what was written, what the image
/// maps, the backing file's data); what grows with the size is the L1
/// table ([`MAX_L1_TABLE_BYTES`]).
pub const MAX_VIRTUAL_SIZE: u64 = 1 << 40;
/// Largest L1 table a case's image may have, in bytes (128 K entries:
/// 1 TiB needs clusters of at least 8 KiB; with 64 KiB clusters its L1
/// table is 16 KiB): the engine holds it in memory, and the sparse reads
/// after a crash look through it.
pub const MAX_L1_TABLE_BYTES: u64 = 1 << 20;
/// Largest backing file a case may describe: the runner builds it whole
/// in memory and writes it in one request.
pub const MAX_BACKING_SIZE: u64 = 64 << 20;
/// Largest virtual disk the runner reads whole after every crash and at
/// the end (`runner::sweep`); a larger one is read where it was written.
pub const WHOLE_SWEEP_MAX: u64 = 64 << 20;
/// Most guest operations in one case (2^20, more than 10^6).
pub const MAX_OPS: usize = 1 << 20;
/// Most operations in one concurrency group.
pub const MAX_GROUP_OPS: usize = 64;
/// Longest guest request, in sectors (2 MiB).
pub const MAX_OP_SECTORS: u64 = 4096;
/// Most tables an engine cache of a case may hold.
pub const MAX_CACHE_TABLES: usize = 1024;
/// Smallest cluster size with extended L2 entries (as qemu-img requires).
pub const MIN_EXTENDED_L2_CLUSTER_SIZE: u64 = 16 << 10;
/// Least `EngineOptions::metadata_memory_limit` a case may give. The
/// engine refuses to open an image whose L1 and refcount tables need more,
/// and to rebuild refcounts over a file of more than `limit / 8` clusters.
/// Within the other bounds of a case these stay far below it: the L1 table
/// of a 64 MiB disk is at most 16 KiB (512-byte clusters), its refcount
/// table at most a few clusters (2 MiB each with 2 MiB clusters), and a
/// rebuild of a 1 GiB file of 512-byte clusters needs 16 MiB.
pub const MIN_METADATA_MEMORY_LIMIT: u64 = 16 << 20;
/// Most `EngineOptions::grow_ahead` a case may give (the whole largest
/// virtual disk): every crash image and the final image are read whole
/// into memory, and growth past the end of the file is part of them.
pub const MAX_GROW_AHEAD: u64 = 64 << 20;
/// More bytes than any one device request the engine issues for a case:
/// guest requests are at most 2 MiB (`MAX_OP_SECTORS`) and with their COW
/// areas at most two clusters (2 MiB each) more; tables are at most a
/// cluster, and the L1 and refcount tables of a case's image are far below
/// that; growing the file ahead covers at most `MAX_GROW_AHEAD` plus one
/// allocation; building a qcow2 backing file writes it (at most
/// `MAX_BACKING_SIZE`) in one request; an L1 table is at most
/// `MAX_L1_TABLE_BYTES`. The executor's time budget charges
/// every request as if it moved this much (`Case::exec_options`, `budget`).
pub const MAX_REQUEST_BYTES: u64 = 128 << 20;
/// Most sectors the writes, write_zeroes and discards of a workload may
/// cover in all (512 MiB of guest data). The reference model keeps a
/// record of every sector written since the last flush (about 50 bytes
/// each), a crash state lists, per sector, every pending write over it,
/// and the image file grows by what crashes leak (allocated, never
/// linked, not reused): writes that allocate again after every crash grew
/// it by 650 MB at four times this bound. At the bound the worst cases
/// measured peak near 410 MB.
pub const MAX_WRITTEN_SECTORS: u64 = 1 << 20;
/// Most work ([`Case::epoch_work`]) in one epoch: the epoch's disk logs
/// every request it serves (about 200 bytes each) and keeps every write
/// not yet flushed. At this bound the worst epoch measured (2 MiB writes
/// allocating 512-byte clusters with every switch off) peaks near 450 MB.
pub const MAX_EPOCH_WORK: u64 = 1 << 20;
/// Most work in a whole case: a run's length, and the executor's budgets
/// that grow with it (`Case::exec_options`, `budget`), stay bounded.
pub const MAX_WORK: u64 = 1 << 26;
/// Most payload bytes a case's write log may keep
/// (`LogOptions::data_bytes_max`, the default): the log keeps them for the
/// disk's whole life, on each of a case's two disks.
pub const MAX_LOG_DATA_BYTES: u64 = 64 << 20;
/// Work ([`Case::epoch_work`]) counted per epoch for opening (or
/// reopening and repairing) the image and closing it.
const EPOCH_OVERHEAD: u64 = 1024;
/// Most sectors a misdirected write may land away from its target
/// (`FaultOptions::misdirect_sectors_max`): the file grows to where it
/// lands, and is read whole into memory after a crash and at the end.
pub const MAX_MISDIRECT_SECTORS: u32 = 4096;

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
    pub disk: DiskOptions,
    /// Concurrency groups, run in order; the operations of one group are
    /// issued together and run concurrently.
    pub workload: Vec<Vec<Op>>,
    /// How the executor picks the next ready task. A case saved before
    /// cases recorded it runs under the uniform choice, as it did; it is
    /// left out of the JSON when uniform.
    #[serde(default, skip_serializing_if = "SchedulePolicy::is_random")]
    pub schedule: SchedulePolicy,
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
    /// An external data file on a disk of its own; `create.data_file` and
    /// `create.data_file_raw` must agree with it ([`DATA_FILE_NAME`]).
    /// Absent in cases saved before data files were drawn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_file: Option<DataFileSpec>,
}

/// The name an image's header gives its external data file.
pub const DATA_FILE_NAME: &str = "disk.data";

/// An external data file: guest data clusters on a second simulated disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataFileSpec {
    /// The data file is kept a raw image of the guest disk
    /// (`data_file_raw`); impossible with a backing file.
    pub raw: bool,
}

impl ImageSpec {
    /// An image spec whose header names the backing file exactly as
    /// `backing` describes it (the agreement `create` must keep).
    pub fn new(
        size: u64,
        cluster_size: u64,
        refcount_bits: u32,
        compat: Compat,
        lazy_refcounts: bool,
        backing: Option<BackingSpec>,
    ) -> ImageSpec {
        ImageSpec {
            create: CreateOptions {
                size,
                cluster_size,
                refcount_bits,
                compat,
                lazy_refcounts,
                extended_l2: false,
                backing_file: backing.map(|b| b.file_name().to_string()),
                backing_format: backing.map(|b| b.format_name().to_string()),
                ..CreateOptions::default()
            },
            backing,
            data_file: None,
        }
    }

    /// This spec with the guest data in the image file itself.
    pub fn without_data_file(mut self) -> ImageSpec {
        self.create.data_file = None;
        self.create.data_file_raw = false;
        self.data_file = None;
        self
    }

    /// This spec with an external data file, the header naming it as
    /// [`ImageSpec::data_file`] requires.
    pub fn with_data_file(mut self, spec: DataFileSpec) -> ImageSpec {
        self.create.data_file = Some(DATA_FILE_NAME.to_string());
        self.create.data_file_raw = spec.raw;
        self.data_file = Some(spec);
        self
    }
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

/// One guest operation. Offsets and lengths are in 512-byte guest sectors.
///
/// A data write's content is generated by [`oracle::data`] from its write
/// id, which is its number in [`Case::numbered_ops`].
///
/// A `crash` in a group with other operations cuts them short: they are
/// issued, and the machine crashes at a point the run draws from its crash
/// stream, possibly before any of them completes. The image is then
/// reopened and checked whole before the next group.
///
/// A `background_read` is a read its group does not wait for: the next
/// groups start while it is in flight, and it completes when the disk
/// completes it (held long, a latency outlier, it outlives a free of its
/// cluster, the flush that applies the free and the reuse of its host
/// cluster). A crash cuts it short like any request in flight; the end of
/// the workload waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    /// A data write; `fua` flags it force unit access (NBD_CMD_FLAG_FUA,
    /// Linux REQ_FUA): once it completes its bytes survive a crash, as
    /// if a flush had followed it alone. Written to case files only when
    /// set, so cases from before the flag read and write as they did.
    Write {
        sector: u64,
        sectors: u64,
        #[serde(default, skip_serializing_if = "is_false")]
        fua: bool,
    },
    Read {
        sector: u64,
        sectors: u64,
    },
    BackgroundRead {
        sector: u64,
        sectors: u64,
        /// The disks hold the read's requests this many times their
        /// latency (0 or 1: as any request; at most
        /// `disk::MAX_OUTLIER_FACTOR`).
        #[serde(default, skip_serializing_if = "is_zero")]
        hold: u32,
    },
    /// `fua` as for [`Op::Write`]: a completed FUA write_zeroes reads
    /// zeroes after a crash.
    WriteZeroes {
        sector: u64,
        sectors: u64,
        unmap: bool,
        #[serde(default, skip_serializing_if = "is_false")]
        fua: bool,
    },
    /// Advisory, FUA or not: a completed FUA discard promises only that
    /// whatever it did is durable.
    Discard {
        sector: u64,
        sectors: u64,
        #[serde(default, skip_serializing_if = "is_false")]
        fua: bool,
    },
    /// A compressed write (`qemu-io write -c`) of one whole cluster, or of
    /// the disk's partial last one: `sector` is cluster aligned. Its data
    /// is [`oracle::data::fill_compressible_buffer`]'s, generated sectors
    /// among zeroes, so that a cluster of more than one sector compresses.
    /// The engine refuses a cluster that has a host cluster already, as
    /// QEMU's driver does; the model then allows either content.
    WriteCompressed {
        sector: u64,
        sectors: u64,
    },
    /// An internal snapshot of the guest disk (`qemu-img snapshot -c`),
    /// named after the operation's number. It runs alone: the runner lets
    /// every request in flight end first, as QEMU drains the disk.
    SnapshotCreate,
    /// Revert the guest disk to a snapshot: the `pick`-th (modulo their
    /// number) of the snapshots the run knows exist; nothing when none
    /// does. Runs alone.
    SnapshotApply {
        pick: u32,
    },
    /// Delete a snapshot, chosen as [`Op::SnapshotApply`] chooses. Runs
    /// alone.
    SnapshotDelete {
        pick: u32,
    },
    /// Amend the image's format options in place (`qemu-img amend`): the
    /// version, lazy refcounts or the refcount width. Runs alone, as a
    /// snapshot operation does; the guest disk reads the same before and
    /// after. A change the image cannot take (a downgrade with refcounts
    /// that are not 16 bits wide, lazy refcounts on version 2, a width
    /// too narrow for a refcount) is refused before anything changes, as
    /// QEMU refuses it, and counted, not failed.
    Amend {
        change: Amend,
    },
    /// Change the guest disk's size to `sectors` sectors (`qemu-img
    /// resize`), with nothing else in flight. A size the case did not
    /// create the image with is a whole number of clusters, so that a
    /// shrink leaves no part of a cluster past the end. Growing past
    /// what the L1 table maps takes a new table; shrinking drops every
    /// cluster past the new end. Guest requests past the current end are
    /// not sent (counted). On a version 2 image with internal snapshots
    /// it is refused (no field records each snapshot's size), as QEMU
    /// refuses it.
    Resize {
        sectors: u64,
    },
    Flush,
    Crash,
}

/// One change of an image's format options ([`Op::Amend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Amend {
    /// To version 2 (`compat=0.10`) or 3 (`compat=1.1`).
    Version(u32),
    /// Lazy refcounts on or off.
    LazyRefcounts(bool),
    /// Refcounts this many bits wide (a power of two, 1 to 64).
    RefcountBits(u32),
}

impl std::fmt::Display for Amend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Amend::Version(v) => write!(f, "version {v}"),
            Amend::LazyRefcounts(on) => {
                write!(f, "lazy refcounts {}", if on { "on" } else { "off" })
            }
            Amend::RefcountBits(b) => write!(f, "{b}-bit refcounts"),
        }
    }
}

impl Amend {
    /// What is wrong with it, if anything.
    pub fn problem(&self) -> Option<String> {
        match *self {
            Amend::Version(2 | 3) | Amend::LazyRefcounts(_) => None,
            Amend::RefcountBits(b) if b.is_power_of_two() && b <= 64 => None,
            Amend::Version(v) => Some(format!("amend to version {v}: only 2 and 3 exist")),
            Amend::RefcountBits(b) => Some(format!(
                "amend to {b}-bit refcounts: a power of two from 1 to 64"
            )),
        }
    }
}

impl std::fmt::Display for Op {
    /// The operation as a person names it: `write of 8 sectors at sector
    /// 40`, `flush`; never Rust's debug text.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |f: &mut std::fmt::Formatter<'_>, what: &str, sector: u64, n: u64| {
            write!(f, "{what} of {n} sectors at sector {sector}")
        };
        match *self {
            Op::Write {
                sector, sectors, ..
            } => at(f, "write", sector, sectors)?,
            Op::Read { sector, sectors } => return at(f, "read", sector, sectors),
            Op::BackgroundRead {
                sector, sectors, ..
            } => return at(f, "background read", sector, sectors),
            Op::WriteZeroes {
                sector,
                sectors,
                unmap,
                ..
            } => at(
                f,
                if unmap {
                    "write_zeroes (unmap)"
                } else {
                    "write_zeroes"
                },
                sector,
                sectors,
            )?,
            Op::Discard {
                sector, sectors, ..
            } => at(f, "discard", sector, sectors)?,
            Op::WriteCompressed { sector, sectors } => {
                return at(f, "compressed write", sector, sectors)
            }
            Op::SnapshotCreate => return write!(f, "snapshot create"),
            Op::SnapshotApply { pick } => return write!(f, "snapshot apply (pick {pick})"),
            Op::SnapshotDelete { pick } => return write!(f, "snapshot delete (pick {pick})"),
            Op::Amend { change } => return write!(f, "amend to {change}"),
            Op::Resize { sectors } => return write!(f, "resize to {sectors} sectors"),
            Op::Flush => return write!(f, "flush"),
            Op::Crash => return write!(f, "crash"),
        }
        if self.is_fua() {
            f.write_str(", FUA")?;
        }
        Ok(())
    }
}

impl Op {
    /// The sectors the operation covers, as (first sector, count).
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            Op::Write {
                sector, sectors, ..
            }
            | Op::Read { sector, sectors }
            | Op::BackgroundRead {
                sector, sectors, ..
            }
            | Op::WriteZeroes {
                sector, sectors, ..
            }
            | Op::Discard {
                sector, sectors, ..
            }
            | Op::WriteCompressed { sector, sectors } => Some((sector, sectors)),
            Op::Flush
            | Op::Crash
            | Op::SnapshotCreate
            | Op::SnapshotApply { .. }
            | Op::SnapshotDelete { .. }
            | Op::Amend { .. }
            | Op::Resize { .. } => None,
        }
    }

    /// Whether it is a snapshot operation.
    pub fn is_snapshot(&self) -> bool {
        matches!(
            self,
            Op::SnapshotCreate | Op::SnapshotApply { .. } | Op::SnapshotDelete { .. }
        )
    }

    /// Whether it runs with nothing else in flight (a snapshot operation,
    /// an amend or a resize, which QEMU runs on a drained disk): its group
    /// holds it and at most a crash.
    pub fn runs_alone(&self) -> bool {
        self.is_snapshot() || matches!(self, Op::Amend { .. } | Op::Resize { .. })
    }

    /// The same operation over `sectors` sectors from `sector`, every
    /// other field kept; operations without a range come back unchanged.
    pub fn with_range(mut self, sector: u64, sectors: u64) -> Op {
        if let Op::Write {
            sector: s,
            sectors: n,
            ..
        }
        | Op::Read {
            sector: s,
            sectors: n,
        }
        | Op::BackgroundRead {
            sector: s,
            sectors: n,
            ..
        }
        | Op::WriteZeroes {
            sector: s,
            sectors: n,
            ..
        }
        | Op::Discard {
            sector: s,
            sectors: n,
            ..
        }
        | Op::WriteCompressed {
            sector: s,
            sectors: n,
        } = &mut self
        {
            (*s, *n) = (sector, sectors);
        }
        self
    }

    /// Whether it is a write, write_zeroes or discard flagged FUA.
    pub fn is_fua(&self) -> bool {
        matches!(
            self,
            Op::Write { fua: true, .. }
                | Op::WriteZeroes { fua: true, .. }
                | Op::Discard { fua: true, .. }
        )
    }

    /// The same operation with its FUA flag set to `on`; operations that
    /// cannot carry one (reads, flushes, compressed writes, snapshots,
    /// crashes) come back unchanged.
    pub fn with_fua(mut self, on: bool) -> Op {
        if let Op::Write { fua, .. } | Op::WriteZeroes { fua, .. } | Op::Discard { fua, .. } =
            &mut self
        {
            *fua = on;
        }
        self
    }

    /// Whether it is a read (in the foreground or not): it changes nothing.
    pub fn is_read(&self) -> bool {
        matches!(self, Op::Read { .. } | Op::BackgroundRead { .. })
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Why a case is refused.
///
/// Each message carries its cause's text itself, and no variant reports a
/// `source()`: a chain printer (anyhow's `{:#}`, as the CLI prints errors)
/// would otherwise print the cause twice, once in the message and once as
/// the next link. thiserror treats a field named `source` as the source,
/// hence `error` below, and `#[from]` implies `#[source]`, hence the
/// hand-written `From` impl.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("reading case file {path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("case JSON: {0}")]
    Json(serde_json::Error),
    #[error("case version {found} is not supported (this build reads version {CASE_VERSION})")]
    Version { found: u32 },
    #[error(
        "virtual size {0} bytes: must be a non-zero multiple of 512 and at most {MAX_VIRTUAL_SIZE} \
         (case::MAX_VIRTUAL_SIZE)"
    )]
    VirtualSize(u64),
    #[error("cluster size {0}: must be a power of two from 512 to 2 MiB")]
    ClusterSize(u64),
    #[error("refcount bits {bits}: must be a power of two from 1 to 64 (16 for compat 0.10)")]
    RefcountBits { bits: u32 },
    #[error("lazy refcounts need compat 1.1")]
    LazyRefcountsOnV2,
    #[error("extended L2 entries need compat 1.1 and clusters of at least 16 KiB")]
    ExtendedL2,
    #[error(
        "an L1 table of {0} bytes for this virtual size and cluster size, more than \
         {MAX_L1_TABLE_BYTES} (case::MAX_L1_TABLE_BYTES): larger clusters or a smaller disk"
    )]
    L1Table(u64),
    #[error("compression_type {0:?}: compat 0.10 supports only zlib compression")]
    CompressionTypeOnV2(CompressionType),
    #[error("data file: {0}")]
    DataFile(String),
    #[error("backing: {0}")]
    Backing(String),
    #[error("engine: {0}")]
    Engine(String),
    #[error(transparent)]
    Disk(#[from] OptionsError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("workload holds {0} operations, more than {MAX_OPS} (case::MAX_OPS)")]
    TooManyOps(usize),
    /// The workload is valid operation by operation but too large in all.
    #[error("workload too large: {0}")]
    TooLarge(String),
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

impl From<serde_json::Error> for CaseError {
    fn from(e: serde_json::Error) -> Self {
        CaseError::Json(e)
    }
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
        let text = std::fs::read_to_string(path).map_err(|error| CaseError::Io {
            path: path.display().to_string(),
            error,
        })?;
        Case::from_json(&text)
    }

    pub fn save(&self, path: &Path) -> Result<(), CaseError> {
        std::fs::write(path, self.to_json()).map_err(|error| CaseError::Io {
            path: path.display().to_string(),
            error,
        })
    }

    /// The virtual disk size in guest sectors, as the image is created.
    pub fn sectors(&self) -> u64 {
        self.image.create.size / SECTOR_SIZE as u64
    }

    /// The largest size the guest disk has in the run, in sectors: the
    /// created size or a resize's (the model covers this many).
    pub fn max_sectors(&self) -> u64 {
        self.workload
            .iter()
            .flatten()
            .filter_map(|op| match *op {
                Op::Resize { sectors } => Some(sectors),
                _ => None,
            })
            .fold(self.sectors(), u64::max)
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

    /// The operations group by group, each with its number.
    pub fn numbered_groups(&self) -> Vec<Vec<(u64, Op)>> {
        let mut groups = vec![Vec::new(); self.workload.len()];
        for (g, n, op) in self.numbered_ops() {
            groups[g].push((n, *op));
        }
        groups
    }

    /// The backing file's content, as the model and the runner see it.
    pub fn backing_data(&self) -> Option<BackingData> {
        self.image.backing.map(|b| b.data())
    }

    /// A fresh reference model of this case's guest disk.
    pub fn model(&self) -> oracle::model::Model {
        oracle::model::Model::new(self.max_sectors(), self.backing_data())
    }

    /// One line naming what the case exercises, for progress output and
    /// reports.
    pub fn summary(&self) -> String {
        let c = &self.image.create;
        let compat = match c.compat {
            Compat::V2 => "v2",
            Compat::V3 => "v3",
        };
        let backing = match &self.image.backing {
            None => String::new(),
            Some(b) => format!(" backing={}", b.format_name()),
        };
        let data_file = match self.image.data_file {
            None => "",
            Some(DataFileSpec { raw: false }) => " data_file",
            Some(DataFileSpec { raw: true }) => " data_file_raw",
        };
        let f = &self.disk.faults;
        let faults = if !f.enabled {
            "none".to_string()
        } else {
            format!(
                "eio-ppm(r/w/f)={}/{}/{}{}{}",
                f.read_error_ppm,
                f.write_error_ppm,
                f.flush_error_ppm,
                if f.capacity.is_some() { " enospc" } else { "" },
                if self.harsh() { " harsh" } else { "" },
            )
        };
        format!(
            "seed {} {} {}KiB cluster={} {compat} refcount_bits={}{}{backing}{data_file} \
             switches={:05b} sector={} ops={} crashes={} faults={faults}",
            self.seed,
            self.profile.map_or("arbitrary", |p| p.name()),
            c.size >> 10,
            c.cluster_size,
            c.refcount_bits,
            if c.lazy_refcounts { " lazy" } else { "" },
            self.engine.switches.mask(),
            self.disk.sector_size,
            self.workload.iter().map(Vec::len).sum::<usize>(),
            self.crashes(),
        )
    }

    /// Whether any fault beyond what the oracle's rules cover is on (lost
    /// or misdirected writes, torn sectors); the model's verdicts do not
    /// apply then, only "no panic, no hang".
    pub fn harsh(&self) -> bool {
        let f = &self.disk.faults;
        (f.enabled && (f.lost_write_ppm > 0 || f.misdirected_write_ppm > 0))
            || self.disk.crash.tear_ppm > 0
    }

    /// Number of crash-and-reopen points.
    pub fn crashes(&self) -> usize {
        self.numbered_ops()
            .filter(|(_, _, op)| matches!(op, Op::Crash))
            .count()
    }

    /// A generous count of the device requests a correct engine issues in
    /// each epoch of the run (the groups up to and including a crash, and
    /// those after the last one), for the memory and step budgets:
    /// - a write, write_zeroes or discard: 4 per cluster it spans (without
    ///   multi_cluster one data request per cluster, with its COW and the
    ///   metadata writeback and flushes an allocation brings);
    /// - a read: 1 per cluster it spans;
    /// - every operation: 1 more (a flush writes back tables that earlier
    ///   writes dirtied, and those are counted with them);
    /// - every epoch: two whole-disk reads of 1 per cluster of the disk
    ///   (the check after the crash that opens it, and the one before the
    ///   crash that ends it or the final one; a disk read sparsely counts
    ///   the clusters those reads can cover), and `EPOCH_OVERHEAD`.
    pub fn epoch_work(&self) -> Vec<u64> {
        let cs = self.image.create.cluster_size / SECTOR_SIZE as u64;
        let disk_clusters = self.max_sectors().div_ceil(cs);
        // The reads after a crash and at the end: the whole disk, or for a
        // disk read sparsely ([`WHOLE_SWEEP_MAX`]), at most what a
        // disk of that size costs (the first and last reads, the backing
        // file's data) and the reads over every range written so far (up
        // to three of 1 MiB each per operation, counted once each).
        let whole = (WHOLE_SWEEP_MAX / SECTOR_SIZE as u64).div_ceil(cs);
        let sweep_read = (1u64 << 20) / SECTOR_SIZE as u64;
        let per_read = sweep_read.div_ceil(cs) + 1;
        let mut swept = whole;
        let sweep = |swept: u64| disk_clusters.min(swept);
        let mut epochs = Vec::new();
        let mut work = sweep(swept) + EPOCH_OVERHEAD;
        for ops in &self.workload {
            for op in ops {
                work += 1;
                if op.is_snapshot() {
                    // The reads that capture the disk's content (a sweep),
                    // and the tables and refcount blocks it rewrites, far
                    // fewer than the clusters they hold.
                    work += sweep(swept) + EPOCH_OVERHEAD;
                } else if let Op::Resize { sectors } = *op {
                    // The clusters a grow zeroes or a shrink drops, from
                    // any size the disk may have had.
                    work += disk_clusters.max(sectors.div_ceil(cs)) + EPOCH_OVERHEAD;
                } else if op.runs_alone() {
                    // An amend: a downgrade writes each zero cluster it
                    // converts, a new width rewrites every refcount block.
                    work += 2 * disk_clusters + EPOCH_OVERHEAD;
                }
                if let Some((sector, sectors)) = op.range() {
                    let spanned = (sector + sectors).div_ceil(cs) - sector / cs;
                    work += match op {
                        Op::Read { .. } | Op::BackgroundRead { .. } => spanned,
                        _ => 4 * spanned,
                    };
                    if !op.is_read() && swept < disk_clusters {
                        let reads = (sector + sectors).div_ceil(sweep_read) - sector / sweep_read;
                        swept = swept.saturating_add(reads * per_read);
                    }
                }
            }
            if ops.iter().any(|op| matches!(op, Op::Crash)) {
                epochs.push(work + sweep(swept));
                work = sweep(swept) + EPOCH_OVERHEAD;
            }
        }
        work += sweep(swept);
        epochs.push(work);
        epochs
    }

    /// The work of the whole run: [`Case::epoch_work`], summed.
    pub fn work(&self) -> u64 {
        self.epoch_work().iter().sum()
    }

    /// The case without its snapshot operations, amends and compressed
    /// writes (groups left empty dropped): for runners of their own that drive
    /// only the guest's requests (the engine's smoke tests).
    pub fn without_snapshots_and_compression(mut self) -> Case {
        for g in &mut self.workload {
            g.retain(|op| !op.runs_alone() && !matches!(op, Op::WriteCompressed { .. }));
        }
        self.workload.retain(|g| !g.is_empty());
        self
    }

    /// Sectors the writes, write_zeroes and discards cover, summed.
    pub fn written_sectors(&self) -> u64 {
        self.numbered_ops()
            .filter(|(_, _, op)| !op.is_read())
            .filter_map(|(_, _, op)| op.range())
            .map(|(_, n)| n)
            .sum()
    }

    /// Checks every constraint the run relies on.
    pub fn validate(&self) -> Result<(), CaseError> {
        if self.version != CASE_VERSION {
            return Err(CaseError::Version {
                found: self.version,
            });
        }
        self.validate_engine()?;
        self.validate_image()?;
        self.validate_device()?;
        self.schedule.validate()?;
        self.validate_workload()?;
        self.validate_size()
    }

    fn validate_engine(&self) -> Result<(), CaseError> {
        let e = &self.engine;
        for (name, n) in [
            ("l2_cache_tables", e.l2_cache_tables),
            ("refcount_cache_tables", e.refcount_cache_tables),
        ] {
            if !(2..=MAX_CACHE_TABLES).contains(&n) {
                return Err(CaseError::Engine(format!(
                    "{name} {n}: must be 2 to {MAX_CACHE_TABLES}"
                )));
            }
        }
        // Values the engine accepts but a run cannot use: the open after
        // create would fail (a limit too small for the tables), every
        // write would fail (read-only), or growth would overflow or
        // grow the image past what a run can hold in memory.
        if e.metadata_memory_limit < MIN_METADATA_MEMORY_LIMIT {
            return Err(CaseError::Engine(format!(
                "metadata_memory_limit {}: must be at least {MIN_METADATA_MEMORY_LIMIT} bytes, \
                 enough for the tables of any image a case can create",
                e.metadata_memory_limit
            )));
        }
        if e.read_only {
            return Err(CaseError::Engine(
                "read_only: must be false, a case writes to its image".into(),
            ));
        }
        if e.grow_ahead > MAX_GROW_AHEAD {
            return Err(CaseError::Engine(format!(
                "grow_ahead {}: must be at most {MAX_GROW_AHEAD} bytes",
                e.grow_ahead
            )));
        }
        Ok(())
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
        if c.extended_l2
            && (c.compat == Compat::V2 || c.cluster_size < MIN_EXTENDED_L2_CLUSTER_SIZE)
        {
            return Err(CaseError::ExtendedL2);
        }
        let l1 = l1_table_bytes(c.size, c.cluster_size, c.extended_l2);
        if l1 > MAX_L1_TABLE_BYTES {
            return Err(CaseError::L1Table(l1));
        }
        if c.compat == Compat::V2 && c.compression_type != CompressionType::Zlib {
            return Err(CaseError::CompressionTypeOnV2(c.compression_type));
        }
        self.validate_data_file()?;
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
                if data.sectors == 0 || data.sectors * SECTOR_SIZE as u64 > MAX_BACKING_SIZE {
                    return Err(CaseError::Backing(format!(
                        "{} sectors: must be 1 to {} (case::MAX_BACKING_SIZE)",
                        data.sectors,
                        MAX_BACKING_SIZE / SECTOR_SIZE as u64
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

    /// Mirrors what the engine's create refuses, and the agreement between
    /// the header's options and the case's data file.
    fn validate_data_file(&self) -> Result<(), CaseError> {
        let c = &self.image.create;
        let bad = |m: &str| Err(CaseError::DataFile(m.to_string()));
        match self.image.data_file {
            None => {
                if c.data_file.is_some() || c.data_file_raw {
                    return bad("the image names a data file but the case describes none");
                }
            }
            Some(spec) => {
                if c.data_file.as_deref() != Some(DATA_FILE_NAME) || c.data_file_raw != spec.raw {
                    return Err(CaseError::DataFile(format!(
                        "the image must name data file {DATA_FILE_NAME:?} with data_file_raw={}",
                        spec.raw
                    )));
                }
                if c.compat == Compat::V2 {
                    return bad("external data files need compat 1.1");
                }
                if spec.raw && self.image.backing.is_some() {
                    return bad("a raw data file (data_file_raw) cannot go with a backing file");
                }
            }
        }
        Ok(())
    }

    fn validate_device(&self) -> Result<(), CaseError> {
        self.disk.validate()?;
        // What any disk may do but a case's disk may not: the runner may
        // take a crash image of any case (a close that fails after an
        // injected fault is treated as a crash), and reads every image
        // whole into memory.
        let refuse = |field: &'static str, reason: String| {
            Err(CaseError::Disk(OptionsError { field, reason }))
        };
        let d = &self.disk;
        if !d.crash.track {
            return refuse(
                "crash.track",
                "must be true: the run takes crash images of the disk".into(),
            );
        }
        if d.log.data_bytes_max > MAX_LOG_DATA_BYTES {
            return refuse(
                "log.data_bytes_max",
                format!(
                    "{} is more than {MAX_LOG_DATA_BYTES} bytes: the log keeps its payloads for \
                     the disk's whole life",
                    d.log.data_bytes_max
                ),
            );
        }
        if d.faults.misdirect_sectors_max > MAX_MISDIRECT_SECTORS {
            return refuse(
                "faults.misdirect_sectors_max",
                format!(
                    "{} is more than {MAX_MISDIRECT_SECTORS} sectors: a misdirected write \
                     grows the file to where it lands",
                    d.faults.misdirect_sectors_max
                ),
            );
        }
        Ok(())
    }

    /// What is wrong with a resize to `sectors` sectors, if anything.
    fn resize_problem(&self, sectors: u64) -> Option<String> {
        let c = &self.image.create;
        let bytes = sectors.saturating_mul(SECTOR_SIZE as u64);
        if sectors == 0 || bytes > MAX_VIRTUAL_SIZE {
            return Some(format!(
                "resize to {sectors} sectors: from 1 sector to {MAX_VIRTUAL_SIZE} bytes"
            ));
        }
        if bytes != c.size && !bytes.is_multiple_of(c.cluster_size) {
            return Some(format!(
                "resize to {sectors} sectors: not a whole number of {}-byte clusters (only \
                 the created size may end inside a cluster)",
                c.cluster_size
            ));
        }
        let l1 = l1_table_bytes(bytes, c.cluster_size, c.extended_l2);
        if l1 > MAX_L1_TABLE_BYTES {
            return Some(format!(
                "resize to {sectors} sectors: an L1 table of {l1} bytes, more than \
                 {MAX_L1_TABLE_BYTES}"
            ));
        }
        if self.image.data_file.is_some() {
            return Some("resize needs an image without an external data file".into());
        }
        None
    }

    fn validate_workload(&self) -> Result<(), CaseError> {
        let disk = self.max_sectors();
        // Every size the disk has in the run: the created one, and each
        // resize's.
        let sizes: std::collections::BTreeSet<u64> = self
            .workload
            .iter()
            .flatten()
            .filter_map(|op| match *op {
                Op::Resize { sectors } => Some(sectors),
                _ => None,
            })
            .chain([self.sectors()])
            .collect();
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
            } else if ops.iter().any(Op::runs_alone)
                && ops.iter().filter(|op| !matches!(op, Op::Crash)).count() > 1
            {
                Some(
                    "a snapshot operation or amend shares its group (it runs alone, or with a \
                     crash)"
                        .into(),
                )
            } else if let Some(p) = ops.iter().find_map(|op| match *op {
                Op::Amend { change } => change.problem(),
                Op::Resize { sectors } => self.resize_problem(sectors),
                _ => None,
            }) {
                Some(p)
            } else if self.image.data_file.is_some()
                && ops
                    .iter()
                    .any(|op| op.is_snapshot() || matches!(op, Op::WriteCompressed { .. }))
            {
                Some(
                    "snapshots and compressed writes need an image without an external data file"
                        .into(),
                )
            } else {
                None
            };
            if let Some(problem) = problem {
                return Err(CaseError::Group { group, problem });
            }
            for (index, op) in ops.iter().enumerate() {
                if let Op::BackgroundRead { hold, .. } = op {
                    if *hold > crate::disk::MAX_OUTLIER_FACTOR {
                        return Err(CaseError::Group {
                            group,
                            problem: format!(
                                "operation {index}: hold {hold}, more than {}",
                                crate::disk::MAX_OUTLIER_FACTOR
                            ),
                        });
                    }
                }
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
                if let Op::WriteCompressed { .. } = op {
                    let cs = self.image.create.cluster_size / SECTOR_SIZE as u64;
                    // A partial one ends where the disk does, at a size
                    // the case gives it.
                    let at_an_end = sizes.contains(&(sector + sectors));
                    let whole = sectors == cs || (sectors < cs && at_an_end);
                    if !sector.is_multiple_of(cs) || !whole {
                        return Err(CaseError::Group {
                            group,
                            problem: format!(
                                "operation {index}: a compressed write of sectors \
                                 {sector}+{sectors} is not one whole cluster of {cs} sectors"
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

impl Case {
    /// What the workload needs in all, once each operation is valid: the
    /// memory a run holds, and the executor's budgets, grow with it.
    fn validate_size(&self) -> Result<(), CaseError> {
        let too_large = |m: String| Err(CaseError::TooLarge(m));
        let written = self.written_sectors();
        if written > MAX_WRITTEN_SECTORS {
            return too_large(format!(
                "its writes, write_zeroes and discards cover {written} sectors, more than \
                 {MAX_WRITTEN_SECTORS} (case::MAX_WRITTEN_SECTORS): the reference model and the crash states keep a record \
                 per sector written since the last flush"
            ));
        }
        for (epoch, &work) in self.epoch_work().iter().enumerate() {
            if work > MAX_EPOCH_WORK {
                return too_large(format!(
                    "epoch {epoch} (counting from 0; each crash ends one) needs about {work} \
                     device requests, more than {MAX_EPOCH_WORK} (case::MAX_EPOCH_WORK): the disk logs every request \
                     of an epoch; fewer or smaller operations between crashes, or larger \
                     clusters"
                ));
            }
        }
        let work = self.work();
        if work > MAX_WORK {
            return too_large(format!(
                "the run needs about {work} device requests, more than {MAX_WORK} (case::MAX_WORK; every crash \
                 reads the disk back: fewer crashes, a smaller disk or larger clusters)"
            ));
        }
        if self.time_budget().is_none() {
            let worst = self.worst_request();
            return Err(CaseError::Disk(OptionsError {
                field: "latency",
                reason: format!(
                    "a request may take up to {worst} ns, too slow for a run of about {work} \
                     device requests: the executor's time budget would not fit in u64 ns"
                ),
            }));
        }
        Ok(())
    }
}

/// The bytes of the L1 table of an image of `size` bytes (clusters of
/// `cluster_size`, a power of two from 512): one 8-byte entry per L2
/// table, which maps a cluster of entries of 8 bytes (16 with extended
/// L2).
pub fn l1_table_bytes(size: u64, cluster_size: u64, extended_l2: bool) -> u64 {
    let entry = if extended_l2 { 16 } else { 8 };
    let per_l2 = (cluster_size / entry) * cluster_size;
    size.div_ceil(per_l2) * 8
}

fn valid_cluster_size(size: u64) -> bool {
    size.is_power_of_two() && (512..=2 << 20).contains(&size)
}
