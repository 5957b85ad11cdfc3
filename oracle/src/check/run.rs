//! A whole check or repair run, step by step as `qemu-img check [-r]`
//! runs it: open, read the snapshot table, check (and fix) the refcounts,
//! check (and fix) the COPIED flags, mark the image clean, and after a
//! repair check the repaired image again.

use super::header::{
    AUTOCLEAR_BITMAPS, AUTOCLEAR_RAW_DATA, INCOMPAT_CORRUPT, INCOMPAT_DIRTY, OFF_AUTOCLEAR,
    OFF_INCOMPATIBLE,
};
use super::image::{Io, OpenImage};
use super::pass::{Abort, Counts, Fix, Pass};
use super::refcounts::{Imrt, MAX_CLUSTERS};
use super::report::{CheckReport, Finding, FindingKind, OPEN_FAILED};
use super::snapshot;
use super::source::{ImageSink, ImageSource};

/// What `-r` repairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairMode {
    /// `-r leaks`: free leaked clusters only.
    Leaks,
    /// `-r all`: fix leaks and errors, rebuilding the refcount structure
    /// when it is broken.
    All,
}

/// Why a repair could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("could not open the image: {0}")]
    Open(String),
}

/// Checks the image in `src` as `qemu-img check` does. Never panics:
/// unreadable or malformed structures become corruptions, check errors or
/// a failed check in the report.
pub fn check(src: &dyn ImageSource) -> CheckReport {
    run(Io::Ro(src), Fix::default())
}

/// Repairs the image as `qemu-img check -r` does, and returns the report
/// `qemu-img` prints afterwards: the check of the repaired image, with the
/// numbers of fixed leaks and corruptions.
pub fn repair(img: &mut dyn ImageSink, mode: RepairMode) -> Result<CheckReport, RepairError> {
    let fix = match mode {
        RepairMode::Leaks => Fix {
            leaks: true,
            errors: false,
        },
        RepairMode::All => Fix {
            leaks: true,
            errors: true,
        },
    };
    let mut first = run(Io::Rw(&mut *img), fix);
    if let Err(e) = img.flush() {
        first.failure.get_or_insert(format!("flush failed: {e}"));
    }
    if first.failure.is_some() {
        if let Some(reason) = first.open_failure() {
            return Err(RepairError::Open(reason.to_owned()));
        }
        // A failed repair reports the failure only, as qemu-img does.
        return Ok(first);
    }
    if first.corruptions_fixed == 0 && first.leaks_fixed == 0 {
        return Ok(first);
    }
    let mut again = check(&*img);
    again.corruptions_fixed = first.corruptions_fixed;
    again.leaks_fixed = first.leaks_fixed;
    let mut findings = first.findings;
    findings.append(&mut again.findings);
    again.findings = findings;
    Ok(again)
}

/// A read-write open (a repair) clears the autoclear bits of features
/// QEMU does not maintain, all but bitmaps and raw external data, as
/// QEMU's own read-write open does before `qemu-img check -r` checks:
/// whatever they vouched for, the writes that follow may break.
fn clear_unkept_autoclear(img: &mut OpenImage<'_>) -> std::io::Result<()> {
    let keep = img.h.autoclear & (AUTOCLEAR_BITMAPS | AUTOCLEAR_RAW_DATA);
    if img.h.version < 3 || keep == img.h.autoclear {
        return Ok(());
    }
    let Ok(sink) = img.io.sink() else {
        return Ok(());
    };
    sink.write_at(OFF_AUTOCLEAR, &keep.to_be_bytes())?;
    img.h.autoclear = keep;
    Ok(())
}

fn to_u64(v: i64) -> u64 {
    v.max(0) as u64
}

fn run(io: Io<'_>, fix: Fix) -> CheckReport {
    let mut report = CheckReport {
        format: "qcow2".into(),
        ..CheckReport::default()
    };
    let mut img = match OpenImage::open(io) {
        Ok(i) => i,
        Err(e) => {
            report.failure = Some(format!("{OPEN_FAILED}{e}"));
            return report;
        }
    };
    if let Err(e) = clear_unkept_autoclear(&mut img) {
        report.failure = Some(format!("Could not update the header: {e}"));
        return report;
    }
    let snapshots = match snapshot::read(img.io.src(), &img.h) {
        Ok(t) => t,
        Err(e) => {
            report.check_errors = 1;
            report.failure = Some(format!("ERROR failed to read the snapshot table: {e}"));
            return report;
        }
    };
    let mut sn_findings = Vec::new();
    for &i in &snapshots.incomplete {
        sn_findings.push(Finding {
            kind: FindingKind::Corruption,
            offset: Some(img.h.snapshots_offset),
            message: format!("ERROR snapshot table entry {i} is incomplete"),
        });
    }
    let mut sn_corruptions = snapshots.incomplete.len() as u64;
    let mut sn_fixed = 0;
    let mut pass = Pass::new(&mut img, &snapshots, fix);
    let mut outcome = check_refcounts(&mut pass);
    if outcome.is_ok() && sn_corruptions != 0 && fix.errors {
        match pass.rewrite_snapshot_table() {
            Ok(()) => {
                sn_fixed = std::mem::take(&mut sn_corruptions);
            }
            Err(e) => {
                pass.res.check_errors += 1;
                outcome = Err(e);
            }
        }
    }
    let res = pass.res;
    let mut findings = pass.findings;
    findings.append(&mut sn_findings);
    report.findings = findings;
    report.check_errors = to_u64(res.check_errors);
    report.corruptions = to_u64(res.corruptions) + sn_corruptions;
    report.copied_missing = res.copied_missing;
    report.leaks = to_u64(res.leaks);
    report.corruptions_fixed = to_u64(res.corruptions_fixed) + sn_fixed;
    report.leaks_fixed = to_u64(res.leaks_fixed);
    report.allocated_clusters = res.allocated;
    report.fragmented_clusters = res.fragmented;
    report.compressed_clusters = res.compressed;
    report.total_clusters = img.h.size_to_clusters(img.h.size / 512 * 512);
    match outcome {
        Ok(highest) => report.image_end_offset = (highest + 1) << img.h.cluster_bits,
        Err(Abort(msg)) => {
            report.failure = Some(msg);
            return report;
        }
    }
    if fix.any() && report.check_errors == 0 && report.corruptions == 0 && img.h.version >= 3 {
        let flags = img.h.incompatible;
        let clean = flags & !(INCOMPAT_DIRTY | INCOMPAT_CORRUPT);
        if clean != flags {
            let written = img
                .io
                .sink()
                .and_then(|s| s.write_at(OFF_INCOMPATIBLE, &clean.to_be_bytes()));
            if let Err(e) = written {
                report.failure = Some(format!("Could not mark the image clean: {e}"));
            }
        }
    }
    report
}

/// Checks, and with `fix` repairs, the refcounts and COPIED flags (QEMU's
/// `qcow2_check_refcounts`). Returns the highest cluster in use.
fn check_refcounts(pass: &mut Pass<'_, '_>) -> Result<u64, Abort> {
    let h = &pass.img.h;
    let size = pass.img.io.len();
    let nb_clusters = h.size_to_clusters(size);
    if nb_clusters > MAX_CLUSTERS {
        pass.res.check_errors += 1;
        return Err(Abort("Check failed: File too large".into()));
    }
    let mut imrt = Imrt::new(nb_clusters, h.refcount_bits());
    let mut rebuild = false;
    let fix = pass.fix;
    pass.calculate(&mut imrt, &mut rebuild)?;
    let pre_compare = pass.res;
    let mut highest = pass.compare(&imrt, Fix::default(), &mut rebuild);

    if rebuild && fix.errors {
        let old = pass.res;
        pass.findings.push(Finding {
            kind: FindingKind::Repaired,
            offset: None,
            message: "Rebuilding refcount structure".into(),
        });
        pass.rebuild_refcounts(&mut imrt)?;
        pass.res.corruptions = 0;
        pass.res.copied_missing = 0;
        pass.res.leaks = 0;
        rebuild = false;
        imrt.clear();
        let saved_fix = pass.fix;
        pass.fix = Fix::default();
        let recalculated = pass.calculate(&mut imrt, &mut rebuild);
        pass.fix = saved_fix;
        recalculated?;
        let mut fresh_leaks = 0;
        if fix.leaks {
            let saved = pass.res;
            pass.res = Counts::default();
            highest = pass.compare(
                &imrt,
                Fix {
                    leaks: true,
                    errors: false,
                },
                &mut rebuild,
            );
            // What this pass fixed is the old structure QEMU's rebuild just
            // leaked; only leaks it could not fix are kept.
            fresh_leaks = pass.res.leaks;
            pass.res = saved;
        }
        if pass.res.corruptions < old.corruptions {
            pass.res.corruptions_fixed += old.corruptions - pass.res.corruptions;
        }
        if pass.res.leaks < old.leaks {
            pass.res.leaks_fixed += old.leaks - pass.res.leaks;
        }
        pass.res.leaks += fresh_leaks;
    } else if fix.any() {
        if rebuild {
            pass.res.check_errors += 1;
            return Err(Abort("ERROR need to rebuild refcount structures".into()));
        }
        if pass.res.leaks != 0 || pass.res.corruptions != 0 {
            // Compared again, fixing: the counts start over, but what the
            // first comparison found stays reported, as QEMU prints it
            // ("Leaked cluster 4 ..." before "Repairing cluster 4 ...").
            pass.res = pre_compare;
            highest = pass.compare(&imrt, fix, &mut rebuild);
        }
    }

    pass.check_copied()?;
    Ok(highest)
}
