//! Internal snapshots of an image file, as `qemu-img snapshot` works with
//! them: list, create (dated by the wall clock here, so that the engine
//! never reads one), apply, delete; and the "Snapshot list:" table that
//! `qemu-img snapshot -l` and `qemu-img info` print (QEMU's
//! `bdrv_snapshot_dump` layout: id, tag, VM state size, local date, VM
//! clock, instruction count).

use std::path::Path;

use engine::Snapshot;
use serde::Serialize;

use crate::files::{open_image, Disk, OpenError, OpenOptions};
use crate::size::human_size;

/// Why a snapshot operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The image's format has no internal snapshots (raw).
    #[error("Operation not supported")]
    NotSupported,
    /// No snapshot has that name (delete looks names up, as qemu-img does).
    #[error("snapshot not found")]
    NotFound,
    #[error(transparent)]
    Engine(#[from] engine::Error),
}

/// The time a snapshot is dated with: seconds and nanoseconds since the
/// epoch, at microsecond precision as QEMU takes it.
pub fn now() -> (u32, u32) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_secs() as u32, d.subsec_micros() * 1000)
}

async fn open(path: &Path, opts: &OpenOptions, read_only: bool) -> Result<Disk, SnapshotError> {
    let opts = OpenOptions {
        read_only,
        backing: false,
        ..opts.clone()
    };
    Ok(open_image(path, &opts).await?)
}

/// Run `f` on the qcow2 image opened writable, then close it cleanly.
async fn with_image<T>(
    path: &Path,
    opts: &OpenOptions,
    f: impl AsyncFnOnce(&mut engine::Image<engine::dev::FileDev>) -> engine::Result<T>,
) -> Result<T, SnapshotError> {
    let mut disk = open(path, opts, false).await?;
    let r = match &mut disk {
        Disk::Qcow2(img) => f(&mut **img).await.map_err(SnapshotError::from),
        Disk::Raw(_) => Err(SnapshotError::NotSupported),
    };
    let closed = disk.close().await;
    let v = r?;
    closed?;
    Ok(v)
}

/// The snapshots of the image at `path` (none for a raw image).
pub async fn list_snapshots(
    path: &Path,
    opts: &OpenOptions,
) -> Result<Vec<Snapshot>, SnapshotError> {
    let disk = open(path, opts, true).await?;
    match &disk {
        Disk::Qcow2(img) => Ok(img.snapshots().await?),
        Disk::Raw(_) => Ok(Vec::new()),
    }
}

/// Take a snapshot named `name`, dated `date` (see [`now`]).
pub async fn create_snapshot(
    path: &Path,
    opts: &OpenOptions,
    name: &str,
    date: (u32, u32),
) -> Result<Snapshot, SnapshotError> {
    with_image(path, opts, async |img| {
        img.snapshot_create(name, date.0, date.1).await
    })
    .await
}

/// Revert the disk to the snapshot with id `id_or_name`, or else the
/// first one named so.
pub async fn apply_snapshot(
    path: &Path,
    opts: &OpenOptions,
    id_or_name: &str,
) -> Result<(), SnapshotError> {
    with_image(path, opts, async |img| img.snapshot_apply(id_or_name).await).await
}

/// Delete the first snapshot named `name` (by name only, as `qemu-img
/// snapshot -d` looks it up).
pub async fn delete_snapshot(
    path: &Path,
    opts: &OpenOptions,
    name: &str,
) -> Result<(), SnapshotError> {
    let r = with_image(path, opts, async |img| {
        let found = img.snapshots().await?.into_iter().find(|s| s.name == name);
        match found {
            Some(s) => img.snapshot_delete(&s.id).await.map(|()| true),
            None => Ok(false),
        }
    })
    .await;
    match r {
        Ok(true) => Ok(()),
        Ok(false) | Err(SnapshotError::NotSupported) => Err(SnapshotError::NotFound),
        Err(e) => Err(e),
    }
}

/// The "Snapshot list:" block: the heading, the column titles and one row
/// per snapshot, every line ended.
pub fn snapshot_table(snapshots: &[Snapshot]) -> String {
    let mut s = String::from("Snapshot list:\n");
    s.push_str(&format!(
        "{:<7} {:<16} {:>8} {:>19} {:>15} {:>10}\n",
        "ID", "TAG", "VM_SIZE", "DATE", "VM_CLOCK", "ICOUNT"
    ));
    for sn in snapshots {
        let secs = sn.vm_clock_nsec / 1_000_000_000;
        let clock = format!(
            "{:04}:{:02}:{:02}.{:03}",
            secs / 3600,
            (secs / 60) % 60,
            secs % 60,
            (sn.vm_clock_nsec / 1_000_000) % 1000
        );
        let icount = sn
            .icount
            .filter(|&i| i != u64::MAX)
            .map(|i| (i as i64).to_string())
            .unwrap_or_else(|| "--".into());
        s.push_str(&format!(
            "{:<7} {:<16} {:>8} {:>19} {:>15} {:>10}\n",
            sn.id,
            sn.name,
            human_size(sn.vm_state_size),
            local_date(sn.date_sec),
            clock,
            icount
        ));
    }
    s
}

/// `YYYY-MM-DD HH:MM:SS` in the local time zone, as QEMU prints a
/// snapshot's date.
fn local_date(sec: u32) -> String {
    let t = libc::time_t::from(sec);
    // SAFETY: localtime_r only writes the `tm` it is given; a zeroed `tm`
    // is a valid value of that plain C struct.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return "1970-01-01 00:00:00".into();
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// A snapshot as `qemu-img info --output json` lists it, in its field
/// order; `icount` only when the snapshot has one.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icount: Option<u64>,
    #[serde(rename = "vm-clock-nsec")]
    pub vm_clock_nsec: u64,
    pub name: String,
    #[serde(rename = "date-sec")]
    pub date_sec: u64,
    #[serde(rename = "date-nsec")]
    pub date_nsec: u64,
    #[serde(rename = "vm-clock-sec")]
    pub vm_clock_sec: u64,
    pub id: String,
    #[serde(rename = "vm-state-size")]
    pub vm_state_size: u64,
}

impl From<&Snapshot> for SnapshotJson {
    fn from(sn: &Snapshot) -> Self {
        SnapshotJson {
            icount: sn.icount.filter(|&i| i != u64::MAX),
            vm_clock_nsec: sn.vm_clock_nsec % 1_000_000_000,
            name: sn.name.clone(),
            date_sec: u64::from(sn.date_sec),
            date_nsec: u64::from(sn.date_nsec),
            vm_clock_sec: sn.vm_clock_nsec / 1_000_000_000,
            id: sn.id.clone(),
            vm_state_size: sn.vm_state_size,
        }
    }
}
