//! What a run found: its failures, its counts, and its trace hash.

use engine::dev::IoOp;
use engine::{Counters, CrashPoints, GuardCounts, RarePaths};
use serde::Serialize;

use crate::disk::DiskCounters;
use crate::workload::Profile;

/// One way a run failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    /// The model saw a value it did not allow (during a read, or after a
    /// crash); the text names sectors, values and device writes, and
    /// `sectors` holds the first wrong sectors as data (what came back,
    /// what was allowed, byte for byte), for a report's hex diff.
    Model {
        text: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sectors: Vec<WrongSector>,
    },
    /// The checker found corruption (or a leak where none is allowed).
    /// After a crash, `dump_diff` is a unified diff of the image's
    /// metadata dump (`qcsim dump`) just before the crash against the
    /// crash state the checker judged.
    Check {
        label: String,
        summary: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dump_diff: Option<String>,
    },
    /// The engine failed where no injected fault explains it.
    Engine { what: String },
    /// The executor found no task ready, or ran out of budget.
    Hang { group: usize, message: String },
    /// The engine panicked (caught by the campaign).
    Panic { message: String },
    /// Two write-like requests in flight at once over the same bytes of a
    /// disk (`disk::Overlap`): a crash rule broken where it happened.
    /// `disk` names the disk and the epoch; `overlaps` the first few,
    /// `count` all of them.
    Overlap {
        disk: String,
        count: u64,
        overlaps: Vec<String>,
    },
    /// A driver other than the engine (`--driver qemu|imago`) failed
    /// where nothing excuses it: a request returned an error, the image
    /// did not open, its process exited. `driver` names it (`QEMU`).
    Driver { driver: String, what: String },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Model { text, .. } => write!(f, "model violation:\n{text}"),
            Failure::Check { label, summary, .. } => {
                write!(f, "check of the {label} image:\n{summary}")
            }
            Failure::Engine { what } => write!(f, "engine: {what}"),
            Failure::Hang { group, message } => write!(f, "group {group}: {message}"),
            Failure::Panic { message } => write!(f, "panic: {message}"),
            Failure::Overlap {
                disk,
                count,
                overlaps,
            } => {
                write!(f, "{count} overlapping writes in flight on {disk}:")?;
                for o in overlaps {
                    write!(f, "\n{o}")?;
                }
                Ok(())
            }
            Failure::Driver { driver, what } => write!(f, "{driver}: {what}"),
        }
    }
}

/// A wrong sector of a model failure, as data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WrongSector {
    /// The guest sector.
    pub sector: u64,
    /// When it was seen: `read op N`, `after crash N`.
    pub when: String,
    /// What its bytes decode to (`write 12, sector 40`, `zeroes`, ...).
    pub observed: String,
    /// The 512 bytes that came back, in hex.
    pub got: String,
    /// What the model allowed instead, each with its bytes.
    pub allowed: Vec<AllowedValue>,
    /// Every write id involved: the allowed values' and the one the bytes
    /// claim to be from.
    pub write_ids: Vec<u64>,
    /// Where the sector maps in the image file now (None: unmapped, or
    /// the mapping could not be read).
    pub host_offset: Option<u64>,
    /// The last device writes that touched that host sector, oldest first.
    pub last_device_writes: Vec<String>,
    /// The driver that read it, when not the engine (`QEMU`): where the
    /// sector maps is then the driver's own and not looked up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
}

/// One value the model allowed a sector to hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllowedValue {
    /// As the model names it: `zeroes`, `backing data`, `write 12`.
    pub value: String,
    pub write_id: Option<u64>,
    /// The sector's bytes under that value, in hex (empty for the garbage
    /// an earlier recovery found, which has no one value).
    pub bytes: String,
}

/// Bytes as lower-case hex, two digits a byte.
pub fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

engine::counter_set! {
    /// Guest operation errors the runner excused, by what explains each: a
    /// fault injected into a device request of that kind while the operation
    /// was in flight (the first such fault names it), or the image's poisoned
    /// state after a failed metadata write earlier in the epoch. An error with
    /// neither explanation is a failure, whatever faults the run injected.
    pub struct ExcusedErrors {
        read,
        write,
        write_zeroes,
        discard,
        flush,
        truncate,
        poisoned,
    }
}

impl ExcusedErrors {
    /// Count one error explained by a fault on a request of kind `op`.
    pub fn by_fault(&mut self, op: IoOp) {
        *match op {
            IoOp::Read => &mut self.read,
            IoOp::Write => &mut self.write,
            IoOp::WriteZeroes => &mut self.write_zeroes,
            IoOp::Discard => &mut self.discard,
            IoOp::Flush => &mut self.flush,
            IoOp::Truncate => &mut self.truncate,
        } += 1;
    }

    pub fn total(&self) -> u64 {
        self.named().iter().map(|(_, n)| n).sum()
    }
}

impl std::fmt::Display for ExcusedErrors {
    /// `read 3, write 10, flush 2, poisoned 1` (kinds with none left out).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts = self.named();
        let shown: Vec<String> = parts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        if shown.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&shown.join(", "))
        }
    }
}

engine::counter_set! {
    /// The plain counts of what a run did and checked, declared once: a
    /// run's [`RunStats`] and the campaign's totals hold them under these
    /// names (flattened into the JSON) and add them with `add`.
    pub struct RunCounts {
        guest_ops,
        guest_writes,
        guest_reads,
        guest_flushes,
        /// Guest writes, write_zeroes and discards flagged FUA.
        guest_fua_requests,
        /// Device writes and write_zeroes flagged FUA that the image's
        /// and data file's disks saw, over every epoch.
        disk_fua_writes,
        /// Guest operations that returned an error.
        failed_ops,
        /// Compressed writes issued (counted in `guest_writes` too).
        compressed_writes,
        /// Of those, refused because their cluster had a host cluster.
        compressed_refused,
        /// Snapshot operations (create, apply, delete) run.
        snapshot_ops,
        /// Of those, applies and deletes with no snapshot that surely
        /// existed to pick, which did nothing.
        snapshot_ops_skipped,
        /// Of those, refused because a refcount would overflow (narrow
        /// refcounts), which changes nothing.
        snapshot_ops_refused,
        /// Amends of the image's format options (version, lazy refcounts,
        /// refcount width) run.
        amends,
        /// Of those, refused as QEMU refuses them (nothing changed).
        amends_refused,
        /// Resizes of the guest disk run.
        resizes,
        /// Of those, refused as QEMU refuses them (a version 2 image with
        /// internal snapshots).
        resizes_refused,
        /// Guest requests not sent because they reach past the disk's
        /// end as a resize left it (or compress a partial cluster that is
        /// no longer the disk's last).
        ops_past_end,
        /// Guest requests and image operations not sent because the
        /// driver under test does not do them (`DriverKind::does`), by
        /// kind: write_zeroes, discards, compressed writes, snapshot
        /// operations, amends, resizes, and any other kind.
        driver_skipped_write_zeroes,
        driver_skipped_discards,
        driver_skipped_compressed,
        driver_skipped_snapshot_ops,
        driver_skipped_amends,
        driver_skipped_resizes,
        driver_skipped_other,
        /// Grows cut short by a crash whose image has the new size in its
        /// header: the grown range must read as zeroes (`Shared::growing`).
        grows_cut_at_new_size,
        /// Sectors of guest reads the model checked.
        read_sectors_checked,
        crashes,
        /// Of those, crashes at the moment a flush reached the disk
        /// (`CrashOptions::at_flush_ppm`) rather than at a random time.
        crashes_at_flush,
        /// Of those, crashes at the flush after an armed guard's condition
        /// arose (`CrashOptions::at_guards`), in a group with no crash of
        /// its own.
        crashes_at_guard,
        /// Of those at a flush, crashes at the flush after a multi-step
        /// metadata operation reached the step drawn for it
        /// (`CrashOptions::at_steps`), in a group with no crash of its own.
        crashes_at_step,
        /// Post-crash images reopened, checked and read whole.
        crash_states_checked,
        /// Crash states of a version 2 image cut inside a snapshot
        /// operation: judged with COPIED flags missing on clusters of
        /// refcount 1 excused, then repaired as `qemu-img check -r all`
        /// repairs, before the reopen (no dirty bit asks the engine to).
        v2_snapshot_repairs,
        /// Clean version 3 crash states with leaked clusters repaired by
        /// `qemu-img check -r all` before the reopen, as a user reclaims
        /// what a crash leaked (while the case may still crash inside a
        /// `check -r`: each is then cut with chance one half).
        leak_repairs,
        /// Device writes of several sectors that a crash state kept in part
        /// (some sectors new, some old).
        torn_writes,
        /// Allocations the engine gave up (a failed allocating write, or a
        /// deferred COW a flush could not complete), summed over epochs.
        allocs_dropped,
        /// Requests that grew the image file ahead of allocation, summed
        /// over epochs.
        grow_requests,
        /// Sectors the model checked after crashes.
        recovered_sectors_checked,
        /// Leaked clusters the checker counted after crashes.
        leaked_clusters,
        faults_injected,
        /// Device requests held far longer than the rest (latency
        /// outliers), on every disk of the run: image, data file and
        /// backing file.
        held_requests,
        /// Task polls the executor made in the whole run: what the step
        /// budget (`Case::exec_options`) bounds.
        polls,
        /// In harsh-mode cases (lost, misdirected or torn writes): model
        /// violations and checker findings seen, which are not failures
        /// there.
        harsh_findings,
    }
}

/// What a run did and checked: the plain counts, and the sets and
/// snapshots beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunStats {
    #[serde(flatten)]
    pub counts: RunCounts,
    /// The guest errors, by the injected fault (or poisoned image) that
    /// explains each.
    pub excused: ExcusedErrors,
    /// How often each of the engine's rare paths ran, summed over epochs.
    pub rare_paths: RarePaths,
    /// How often each of the engine's guards had its condition arise,
    /// summed over epochs.
    pub guards: GuardCounts,
    /// The crashes that cut a multi-step metadata operation, by operation
    /// and step, on a version 2 image and on a version 3 one.
    pub crash_points: CrashPointsByVersion,
    /// The injected faults, by kind.
    pub fault_kinds: crate::disk::FaultCounts,
    /// The engine's counters at the end of the last epoch.
    pub engine: Counters,
    /// The last disk's request counts.
    pub disk: DiskCounters,
    /// The last disk's request counts while the last epoch's guest requests
    /// ran (from the image's open, and the recovery check after a crash,
    /// to before its close): what the engine's optimisations are judged by.
    pub epoch_disk: DiskCounters,
}

/// Crash points by operation and step ([`CrashPoints`]), apart by the
/// image's version: the step order of an operation is all that protects
/// a version 2 image (no dirty bit for the next open to act on), so a
/// boundary crashed only on version 3 images is not tested where it
/// matters most.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashPointsByVersion {
    pub v2: CrashPoints,
    pub v3: CrashPoints,
}

/// Each version with only the steps an image of it can be in
/// (`MetaOp::steps_on`): a step the version does not have is left out,
/// not shown as a boundary never crashed.
impl Serialize for CrashPointsByVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        m.serialize_entry("v2", &self.v2.on(true))?;
        m.serialize_entry("v3", &self.v3.on(false))?;
        m.end()
    }
}

impl CrashPointsByVersion {
    /// The counts of version 2 images if `v2`, else version 3's.
    pub fn on(&self, v2: bool) -> &CrashPoints {
        if v2 {
            &self.v2
        } else {
            &self.v3
        }
    }

    /// Count one crash point, on a version 2 image if `v2`.
    pub fn bump(&mut self, v2: bool, op: engine::MetaOp, step: engine::Step) {
        if v2 { &mut self.v2 } else { &mut self.v3 }.bump(op, step);
    }

    /// Add `o`'s counts to these.
    pub fn add(&mut self, o: &CrashPointsByVersion) {
        self.v2.add(&o.v2);
        self.v3.add(&o.v3);
    }

    /// Every crash point counted, on either version.
    pub fn total(&self) -> u64 {
        self.v2.total() + self.v3.total()
    }
}

/// The outcome of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub seed: u64,
    pub profile: Option<Profile>,
    /// The schedule policy the run went under (the case's).
    pub schedule: crate::exec::SchedulePolicy,
    pub failures: Vec<Failure>,
    /// Why the case was not run: the driver under test cannot run a case
    /// with its image at all (`DriverKind::refuses`). None for a case
    /// that ran; left out of the JSON then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// A hash of every scheduling choice and device request: equal hashes
    /// mean the run went the same way.
    pub trace_hash: u64,
    pub stats: RunStats,
    /// The requests the disks held (latency outliers), by rank: what
    /// `OutlierOptions::held` names to hold the same ones again.
    pub held: Vec<crate::disk::HeldRequest>,
    /// The requests that failed with EIO, by rank on their disk: what
    /// `FaultOptions::error_at` names to fail the same ones again.
    pub failed: Vec<crate::disk::NthRequest>,
}

impl RunStats {
    /// Add what the engine counted in one epoch (open to crash or close)
    /// to the sums kept over epochs.
    pub(crate) fn add_epoch(&mut self, e: &engine::Counters) {
        self.counts.allocs_dropped += e.allocs_dropped;
        self.counts.grow_requests += e.grow_requests;
        self.rare_paths.add(&e.rare_paths());
        self.guards.add(&e.guards);
    }
}

impl RunReport {
    /// No failure (a skipped case has none: see [`RunReport::skipped`]).
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// The operations the driver under test did not do, skipped
    /// (`DriverKind::does`), by kind, the kinds with none left out:
    /// `write_zeroes 3, discard 2`.
    pub fn driver_skips(&self) -> Vec<(&'static str, u64)> {
        self.stats.counts.driver_skips()
    }
}

impl RunCounts {
    /// Count guest operation `op`, skipped because the driver under test
    /// does not do it, under its kind.
    pub fn driver_skipped(&mut self, op: &crate::case::Op) {
        use crate::case::Op;
        *match op {
            Op::WriteZeroes { .. } => &mut self.driver_skipped_write_zeroes,
            Op::Discard { .. } => &mut self.driver_skipped_discards,
            Op::WriteCompressed { .. } => &mut self.driver_skipped_compressed,
            Op::SnapshotCreate | Op::SnapshotApply { .. } | Op::SnapshotDelete { .. } => {
                &mut self.driver_skipped_snapshot_ops
            }
            Op::Amend { .. } => &mut self.driver_skipped_amends,
            Op::Resize { .. } => &mut self.driver_skipped_resizes,
            _ => &mut self.driver_skipped_other,
        } += 1;
    }

    /// The operations skipped because the driver does not do them, by
    /// kind (those with none left out).
    pub fn driver_skips(&self) -> Vec<(&'static str, u64)> {
        [
            ("write_zeroes", self.driver_skipped_write_zeroes),
            ("discard", self.driver_skipped_discards),
            ("compressed write", self.driver_skipped_compressed),
            ("snapshot operation", self.driver_skipped_snapshot_ops),
            ("amend", self.driver_skipped_amends),
            ("resize", self.driver_skipped_resizes),
            ("other", self.driver_skipped_other),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
    }
}

/// What delayed, zeroed and joined COW did, in words, as `qcsim run` and
/// `qcsim bench FILE` print it.
pub fn cow_summary(e: &engine::Counters) -> String {
    format!(
        "COW areas created {}, cancelled whole {}, cancelled in part {}, performed {} ({} of them already zero); zeroing requests {}; file grown ahead by {} requests; joins {}",
        e.cow_created,
        e.cow_cancelled_whole,
        e.cow_cancelled_partial,
        e.cow_performed,
        e.cow_already_zero,
        e.zeroing_requests,
        e.grow_requests,
        e.alloc_joins,
    )
}
