//! The checker's verdict on an image (no corruption; leaks only where a
//! crash explains them) and what a failed check shows: the dump diff
//! against the image as the power went, and the exported files.

use super::explain::VIOLATIONS_SHOWN;
use super::state::*;

impl Run<'_> {
    /// No two write-like requests were in flight over the same bytes at
    /// once on the image's disk or the data file's (`disk::Overlap`):
    /// checked before the power takes them and at the end of the run.
    /// `when` says which epoch they served (`before crash 2`). Only for a
    /// driver that promises it (`DriverKind::orders_overlapping_writes`).
    pub(super) fn judge_overlaps(&self, when: &str) {
        if !self.driver.orders_overlapping_writes() {
            return;
        }
        let disks = [
            ("the image's disk", Some(&self.disk)),
            ("the data file's disk", self.data.as_ref()),
        ];
        for (name, disk) in disks {
            let Some((kept, count)) = disk.map(SimDisk::overlaps) else {
                continue;
            };
            if count > 0 {
                self.fail(Failure::Overlap {
                    disk: format!("{name} {when}"),
                    count,
                    overlaps: kept.iter().map(ToString::to_string).collect(),
                });
            }
        }
    }

    /// The checker's verdict on `bytes`: no corruption, and no leak but
    /// those `leaks_allowed` says: any with `None`; with `Some(image)`,
    /// those `image` leaked, and none with `Some(None)`. Returns the leaks
    /// found.
    pub(super) fn judge(
        &self,
        label: &str,
        image: &SparseStore,
        leaks_allowed: Option<Option<&SparseStore>>,
    ) -> u64 {
        let report = oracle::check::check(&Padded::exact(image));
        if let Some(dir) = self.export_dir() {
            let data = self.data.as_ref().map(|d| d.volatile().to_bytes());
            export(&dir, label, &image.to_bytes(), data.as_deref(), &report);
        }
        // A crash inside a snapshot operation on a version 2 image may
        // leave COPIED cleared on a cluster the operation had yet to share
        // or had just unshared (its order never leaves the flag on a shared
        // one): a needless COW, not corruption; any other kind still
        // fails. Counted by the checker (`copied_missing`), not from its
        // findings: the list is bounded, and a large image cut inside a
        // snapshot create can have more clusters waiting for their flag
        // than the list keeps.
        let excused = if self.copied_excused {
            report.copied_missing.min(report.corruptions)
        } else {
            0
        };
        let corruptions = report.corruptions.saturating_sub(excused);
        let leaks = leak_offsets(&report);
        let new_leaks: Vec<u64> = match leaks_allowed {
            None => Vec::new(),
            Some(_) if leaks.is_empty() => Vec::new(),
            Some(None) => leaks.into_iter().collect(),
            Some(Some(before)) => leaks.difference(&leaked_by(before)).copied().collect(),
        };
        // A checker that could not even open the image judged nothing.
        if corruptions > 0
            || report.check_errors > 0
            || report.failure.is_some()
            || !new_leaks.is_empty()
        {
            let mut summary = report.human();
            if let Some(f) = &report.failure {
                summary.push_str(&format!("the checker could not check the image: {f}\n"));
            }
            for f in report
                .findings
                .iter()
                .filter(|f| f.kind != FindingKind::Leak)
                .take(VIOLATIONS_SHOWN)
            {
                summary.push_str(&format!("{}\n", f.message));
            }
            if !new_leaks.is_empty() {
                summary.push_str(&format!("leaked since the last crash: {new_leaks:x?}\n"));
            }
            let dump_diff = self
                .before_crash
                .as_ref()
                .map(|d| dump_diff(&d.volatile(), image));
            self.fail(Failure::Check {
                label: label.to_string(),
                summary,
                dump_diff,
            });
        }
        report.leaks
    }

    pub(super) fn export_dir(&self) -> Option<PathBuf> {
        self.opts
            .export
            .as_ref()
            .map(|d| d.join(format!("seed-{}", self.case.seed)))
    }
}

/// An image as the checker reads it: the disk's store itself, not a flat
/// copy (an image grown by the leaks of many crashes is held once, not
/// two or three times), possibly seen as longer than it is, reading zeroes
/// past its end: a crash may leave refcounts for clusters past the end of
/// the file (their data never landed), leaks `qemu-img check` cannot see
/// until the file grows over them.
pub(super) struct Padded<'a> {
    pub(super) store: &'a SparseStore,
    pub(super) len: u64,
}

impl<'a> Padded<'a> {
    /// The image exactly as long as it is.
    pub(super) fn exact(store: &'a SparseStore) -> Self {
        Padded {
            store,
            len: store.len(),
        }
    }
}

impl oracle::check::ImageSource for Padded<'_> {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        // Past the store's length it reads zeroes, as a byte slice does.
        self.store.read(off, buf);
        Ok(())
    }
}

/// Whether the image in `store` has its dirty bit set (a version 3
/// header's incompatible feature bit 0; `header::dirty_in`).
pub(super) fn dirty_bit(store: &SparseStore) -> bool {
    let mut h = [0u8; 80];
    let n = (store.len() as usize).min(h.len());
    store.read(0, &mut h[..n]);
    engine::format::header::dirty_in(&h[..n])
}

/// How far past a crash image's end leaks are looked for.
pub(super) const HIDDEN_LEAK_SPAN: u64 = 64 << 20;

/// Most lines of a failed check's dump diff kept in the failure: the
/// tables that changed, not a whole image's L2 tables.
pub(super) const DUMP_DIFF_LINES: usize = 120;

/// A failed check's dump diff when the crash lost no metadata write: what
/// the checker misses was never written (still in the engine's caches).
pub const SAME_DUMP: &str = "(none: the crash kept every metadata write issued; what the checker \
     misses had not been written when the power went)\n";

/// A unified diff of the metadata dump of `before` (the image as the
/// power went) against `after` (the crash state judged).
pub(super) fn dump_diff(before: &SparseStore, after: &SparseStore) -> String {
    let a = oracle::dump::dump(&Padded::exact(before));
    let b = oracle::dump::dump(&Padded::exact(after));
    if a == b {
        return SAME_DUMP.to_string();
    }
    let diff = similar::TextDiff::from_lines(&a, &b);
    let text = diff
        .unified_diff()
        .context_radius(2)
        .header("qcsim dump, before the crash", "qcsim dump, crash state")
        .to_string();
    let total = text.lines().count();
    if total <= DUMP_DIFF_LINES {
        return text;
    }
    let mut kept: String = text
        .lines()
        .take(DUMP_DIFF_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    kept.push_str(&format!(
        "... and {} more lines of the diff\n",
        total - DUMP_DIFF_LINES
    ));
    kept
}

/// The clusters `image` leaks (by host offset), counting those up to
/// [`HIDDEN_LEAK_SPAN`] past its end that a refcount still claims.
pub(super) fn leaked_by(image: &SparseStore) -> BTreeSet<u64> {
    let padded = Padded {
        store: image,
        len: image.len() + HIDDEN_LEAK_SPAN,
    };
    leak_offsets(&oracle::check::check(&padded))
}

pub(super) fn leak_offsets(report: &oracle::check::CheckReport) -> BTreeSet<u64> {
    report
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Leak)
        .filter_map(|f| f.offset)
        .collect()
}

/// Write `LABEL.qcow2` and its verdict (and the data file as it was then,
/// as `LABEL.data`) under `dir`.
pub(super) fn export(
    dir: &Path,
    label: &str,
    bytes: &[u8],
    data: Option<&[u8]>,
    report: &oracle::check::CheckReport,
) {
    // Export is a diagnostic: a failure to write it must not change the
    // verdict, but it must not pass silently either.
    let r = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(dir.join(format!("{label}.qcow2")), bytes))
        .and_then(|_| match data {
            Some(d) => std::fs::write(dir.join(format!("{label}.data")), d),
            None => Ok(()),
        })
        .and_then(|_| {
            let j = serde_json::json!({ "label": label, "check": report.to_qemu_json() });
            std::fs::write(
                dir.join(format!("{label}.json")),
                serde_json::to_string_pretty(&j).unwrap_or_default(),
            )
        });
    if let Err(e) = r {
        eprintln!("qcsim: export to {}: {e}", dir.display());
    }
}
