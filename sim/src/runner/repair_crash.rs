//! Crashes inside `qemu-img check -r all`: the repair the runner makes
//! of a version 2 image cut inside a snapshot operation
//! (`Run::repair_v2_snapshot_crash`), which has no dirty bit for the next
//! open to rebuild from, and of a clean version 3 image whose crash
//! leaked clusters (`Run::repair_v3_leaks`), as a user reclaims them
//! after a power cut. The checker's repair (`oracle::check::repair`)
//! writes its corrections (refcounts, COPIED flags, rebuilt structures)
//! and flushes once at the end, as QEMU's does, so a crash inside it may
//! keep any of its writes, each whole, torn at sector granularity or not
//! at all. What a user is owed then: `check -r all` run again repairs
//! the image, and no guest data is lost (the run goes on from the image
//! it repaired, judged strictly at the reopen and read whole against the
//! model). Counted as `check_repair` crash points (`engine::MetaOp`).

use std::io;

use oracle::check::{ImageSink, ImageSource, RepairMode};

use super::state::*;

/// Chance that a write of the repair lands, whole or torn.
const LANDS: f64 = 0.5;
/// Chance that a write that lands is torn: each of its sectors lands or
/// not.
const TORN: f64 = 0.25;

/// What a repair asked of the image, in order.
enum Change {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

/// The image a repair works on, with every change it made logged.
struct Logged {
    bytes: Vec<u8>,
    log: Vec<Change>,
}

impl ImageSource for Logged {
    fn len(&self) -> u64 {
        ImageSource::len(self.bytes.as_slice())
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.bytes.as_slice().read_at(off, buf)
    }
}

impl ImageSink for Logged {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        ImageSink::write_at(&mut self.bytes, off, buf)?;
        self.log.push(Change::Write(off, buf.to_vec()));
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        ImageSink::set_len(&mut self.bytes, len)?;
        self.log.push(Change::SetLen(len));
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Run<'_> {
    /// `check -r all` of `bytes` (the crash state of crash `n`), cut by a
    /// crash before its flush when the case's step watch still may crash
    /// inside it and draws so; then run again whole on what the crash
    /// kept. Returns the repaired image.
    pub(super) fn repair_maybe_cut(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>, Failure> {
        let cut = self
            .step_watch
            .as_mut()
            .is_some_and(|w| w.draw_inside(engine::MetaOp::CheckRepair));
        if !cut {
            return self.repair_whole(bytes, "");
        }
        let before = bytes.clone();
        let mut logged = Logged {
            bytes,
            log: Vec::new(),
        };
        // Its outcome is the second repair's to judge: the crash came
        // before this one's flush.
        let _ = oracle::check::repair(&mut logged, RepairMode::All);
        let kept = self.crash_state_of(before, &logged.log);
        self.crashes += 1;
        let v2 = self.shared.v2.get();
        {
            let mut stats = self.shared.stats.borrow_mut();
            stats.counts.crashes_at_step += 1;
            stats
                .crash_points
                .bump(v2, engine::MetaOp::CheckRepair, engine::Step::Start);
        }
        let label = format!(" again, after crash {} inside the first", self.crashes);
        self.repair_whole(kept, &label)
    }

    /// What a crash before the repair's flush keeps of `log` over
    /// `before`: each change applied in order or not, a write maybe torn.
    fn crash_state_of(&mut self, mut bytes: Vec<u8>, log: &[Change]) -> Vec<u8> {
        let rng = &mut self.crash_rng;
        for change in log {
            if !rng.gen_bool(LANDS) {
                continue;
            }
            match change {
                Change::SetLen(len) => bytes.resize(*len as usize, 0),
                Change::Write(off, data) => {
                    let torn = rng.gen_bool(TORN);
                    let end = *off as usize + data.len();
                    if end > bytes.len() {
                        bytes.resize(end, 0);
                    }
                    for (i, sector) in data.chunks(SECTOR_SIZE).enumerate() {
                        if torn && rng.gen_bool(0.5) {
                            continue;
                        }
                        let at = *off as usize + i * SECTOR_SIZE;
                        bytes[at..at + sector.len()].copy_from_slice(sector);
                    }
                }
            }
        }
        bytes
    }

    /// `check -r all` of `bytes` run to its end, which must not fail
    /// (`again` says which run; the reopen judges what it left).
    fn repair_whole(&mut self, mut bytes: Vec<u8>, again: &str) -> Result<Vec<u8>, Failure> {
        let report =
            oracle::check::repair(&mut bytes, RepairMode::All).map_err(|e| Failure::Engine {
                what: format!("check -r all{again} after crash {}: {e}", self.crashes),
            })?;
        if let Some(f) = report.failure {
            return Err(Failure::Engine {
                what: format!("check -r all{again} after crash {}: {f}", self.crashes),
            });
        }
        Ok(bytes)
    }
}
