//! The disks a run of a case uses besides its own: the backing file's, a
//! quiet disk (no faults, no crash tracking) at the case's backing
//! outlier rates. Below the runner, which builds them, and the case's
//! budgets, which count their worst request.

use crate::case::Case;
use crate::disk::DiskOptions;

/// A disk without faults or crash tracking: for backing files, which the
/// engine only reads.
pub(crate) fn quiet_disk() -> DiskOptions {
    let mut o = DiskOptions::default();
    o.crash.track = false;
    o.log.enabled = false;
    // Timed as in every version, so that saved cases replay bit for bit.
    o.latency.extend = 0;
    o
}

/// The backing file's disk options in a run of `case`: the quiet disk,
/// holding requests at the case's backing outlier rates (none in a case
/// saved before outliers existed, which so replays as it ran).
pub(crate) fn backing_disk(case: &Case) -> DiskOptions {
    let mut o = quiet_disk();
    o.latency.outliers = case.disk.latency.outliers.clone();
    o
}
