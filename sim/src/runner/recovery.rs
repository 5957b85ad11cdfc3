//! A crash and what follows it: the crash states built and judged, the
//! image reopened on the state the run goes on from and read whole
//! against the model; and the end of a run without one.

use super::explain::*;
use super::judge::*;
use super::state::*;

impl Run<'_> {
    /// The power goes: take a crash image, reopen it, check it.
    pub(super) fn crash(&mut self) -> Result<Rc<Img>, Failure> {
        self.crashes += 1;
        // Named before a crash inside the repair that follows (`check -r`
        // of a version 2 image) counts one more.
        let label = format!("crash-{}", self.crashes);
        self.judge_overlaps(&format!("before crash {}", self.crashes));
        let cut = matches!(self.crashed_in.take(), Some((op, _)) if op.is_snapshot());
        let in_snapshot_v2 = self.v2_snapshot_cut(cut);
        let mut image =
            self.disk
                .crash_image(&mut self.crash_rng)
                .map_err(|e| Failure::Engine {
                    what: format!("crash image: {e}"),
                })?;
        // A crash inside an amend of the version leaves the old one or
        // the new: the header says which the run goes on with.
        if let Some(h) = CrashHeader::read(&image.content) {
            self.shared.v2.set(h.version == 2);
            // So does one inside a resize, or an apply of a snapshot of
            // another size, with the size.
            let sectors = h.size / SECTOR_SIZE as u64;
            if sectors > self.case.max_sectors() {
                return Err(Failure::Engine {
                    what: format!(
                        "crash {}: the header's size is {sectors} sectors, more than any size \
                         the run gave the disk",
                        self.crashes
                    ),
                });
            }
            self.shared.sectors.set(sectors);
            // A grow cut short whose size is in the header zeroed its
            // range first: to the model it completed.
            if let Some((n, to)) = self.shared.growing.take() {
                if sectors == to {
                    let mut m = self.shared.model.borrow_mut();
                    m.write_completed(OpId(n), Status::Ok);
                    m.flush_completed(OpId(n), Status::Ok);
                    self.shared.stats.borrow_mut().counts.grows_cut_at_new_size += 1;
                }
            }
        }
        // The data file's disk loses power at the same moment.
        let data_image = match &self.data {
            Some(d) => {
                Some(
                    d.crash_image(&mut self.data_crash_rng)
                        .map_err(|e| Failure::Engine {
                            what: format!("crash image of the data file: {e}"),
                        })?,
                )
            }
            None => None,
        };
        self.copied_excused = in_snapshot_v2;
        if std::mem::take(&mut self.at_flush) {
            self.judge_more_states()?;
        }
        if in_snapshot_v2 {
            image.content = self.repair_v2_snapshot_crash(&image.content)?;
        }
        self.copied_excused = false;
        let torn = image.summary().torn_writes
            + data_image.as_ref().map_or(0, |i| i.summary().torn_writes);
        self.shared.stats.borrow_mut().counts.torn_writes += torn;
        self.shared.model.borrow_mut().crash();
        self.gone.add(&self.crashing_disks());
        let next = self.disk.reopen(image.content);
        self.before_crash = Some(std::mem::replace(&mut self.disk, next));
        if let (Some(d), Some(i)) = (&self.data, data_image) {
            let next = d.reopen(i.content);
            self.data_before_crash = self.data.replace(next);
        }
        self.recover(&label)
    }

    /// Reopen the image on `self.disk` after a crash (or a failed close),
    /// check it, read it whole against the model.
    /// At a crash at a flush, the moment with the most pending metadata:
    /// [`EXTRA_STATES_AT_FLUSH`] more of its crash states of the image's
    /// disk, each judged by the checker alone (no reopen, no read-back),
    /// so that an ordering bug inside a writeback, whose window is a
    /// single flush, is not left to one draw. Images left dirty are
    /// skipped: their refcounts are stale by design until the engine's
    /// repair on open. Drawn after the state the run goes on from, so
    /// that state is the one it would be without these.
    pub(super) fn judge_more_states(&mut self) -> Result<(), Failure> {
        let point = self.disk.crash_point().map_err(|e| Failure::Engine {
            what: format!("crash image: {e}"),
        })?;
        // Few pending writes (a writeback's last steps, a table growth's
        // header switch): every whole-write state, instead of a draw that
        // misses the one a missing flush between two of them spoils.
        let extras: Vec<_> = if point.pending().len() <= EXHAUSTIVE_PENDING_AT_FLUSH {
            point
                .states_by_write(1 << EXHAUSTIVE_PENDING_AT_FLUSH)
                .collect()
        } else {
            (0..EXTRA_STATES_AT_FLUSH)
                .map(|_| point.sample(&mut self.crash_rng))
                .collect()
        };
        for (k, extra) in (1..).zip(extras) {
            if !dirty_bit(&extra.content) {
                let label = format!("crash-{} (extra state {k})", self.crashes);
                // A failure's dump diff is against the disk as the power
                // went, which is still `self.disk` here.
                let before = self.before_crash.replace(self.disk.clone());
                self.judge(&label, &extra.content, None);
                self.before_crash = before;
                self.shared.stats.borrow_mut().counts.crash_states_checked += 1;
            }
        }
        Ok(())
    }

    /// Whether the crash cut a snapshot operation on a version 2 image:
    /// `cut` (the crash came inside one), or a failed one left its flags
    /// in doubt (taken).
    pub(super) fn v2_snapshot_cut(&self, cut: bool) -> bool {
        self.shared.v2.get() && (cut | self.shared.flags_in_doubt.take())
    }

    /// A version 2 image cut inside a snapshot operation has no dirty bit
    /// for the next open to act on: judged as the crash left it (missing
    /// COPIED flags excused, `copied_excused`), then repaired as a user
    /// would, with `qemu-img check -r all`, and the repaired image is the
    /// one the run goes on from (and judges strictly at the reopen).
    pub(super) fn repair_v2_snapshot_crash(
        &mut self,
        content: &SparseStore,
    ) -> Result<SparseStore, Failure> {
        let label = format!("crash-{} (before check -r all)", self.crashes);
        self.copied_excused = true;
        self.judge(&label, content, None);
        self.copied_excused = false;
        let bytes = self.repair_maybe_cut(content.to_bytes())?;
        self.shared.stats.borrow_mut().counts.v2_snapshot_repairs += 1;
        Ok(SparseStore::from_bytes(&bytes))
    }

    /// A clean version 3 image that a crash left with leaked clusters
    /// (`crash`): while the case may still crash inside a `check -r`, a
    /// user's `qemu-img check -r all` reclaims them before the reopen
    /// (cut with chance one half: `repair_maybe_cut`), and the run goes
    /// on from the repaired image, put on the image's disk. `None` when
    /// no repair is run (a version 2 image, or the kind is spent).
    fn repair_v3_leaks(&mut self, crash: &SparseStore) -> Result<Option<SparseStore>, Failure> {
        let armed = !self.shared.v2.get()
            && self
                .step_watch
                .as_ref()
                .is_some_and(|w| w.armed_for(engine::MetaOp::CheckRepair));
        if !armed {
            return Ok(None);
        }
        let bytes = self.repair_maybe_cut(crash.to_bytes())?;
        let repaired = SparseStore::from_bytes(&bytes);
        self.shared.stats.borrow_mut().counts.leak_repairs += 1;
        self.disk = self.disk.reopen(repaired.clone());
        // The new disk's faults are on, as every new disk's are: off
        // until the image is read back, as on the one it replaces.
        self.set_faults_enabled(false);
        Ok(Some(repaired))
    }

    pub(super) fn recover(&mut self, label: &str) -> Result<Rc<Img>, Failure> {
        self.set_faults_enabled(false);
        // A snapshot (chunks are shared and copied on write): the engine's
        // repair on open does not change it.
        let mut raw = self.disk.volatile();
        let dirty = dirty_bit(&raw);
        // A clean image is judged as the crash left it, before the
        // reopen (which does not change it); its leaks may be reclaimed
        // with `check -r` first, and the repaired image is judged again.
        let mut leaks = if dirty {
            None
        } else {
            Some(self.judge(label, &raw, None))
        };
        let mut repaired_leaks = None;
        if leaks.is_some_and(|n| n > 0) {
            if let Some(repaired) = self.repair_v3_leaks(&raw)? {
                raw = repaired;
                repaired_leaks = leaks.take();
            }
        }
        let img = self
            .reopen_watched(label, dirty)?
            .map_err(|e| Failure::Engine {
                what: format!("reopen after {label} failed: {e}"),
            })?;
        // A dirty image's refcounts are stale by design: judge it after the
        // engine's repair; a clean one exactly as the crash left it.
        let judged = if dirty { self.disk.volatile() } else { raw };
        // A crash may leak clusters (allocated, never linked).
        let leaks = match (leaks, repaired_leaks) {
            (Some(n), _) => n,
            (None, None) => self.judge(label, &judged, None),
            (None, Some(before)) => {
                let left = self.judge(&format!("{label} (after check -r all)"), &judged, None);
                // A repair that reclaims leaks leaves none.
                if left > 0 {
                    self.fail(Failure::Engine {
                        what: format!(
                            "check -r all after {label} left {left} of its {before} leaked \
                             clusters leaked"
                        ),
                    });
                }
                before
            }
        };
        // The run reads through the case's backing file whatever the
        // header says: a header that lost its name (a torn write of a
        // header that moved it) would lose the backing data for QEMU and
        // every other reader.
        let expected = self.case.image.backing.as_ref().map(|b| b.file_name());
        let named = CrashHeader::read(&judged).and_then(|h| h.backing_name(&judged));
        if named.as_deref() != expected {
            self.fail(Failure::Engine {
                what: format!(
                    "after {label} the header names the backing file {named:?}, the image's is \
                     {expected:?}"
                ),
            });
        }
        // Judged: a later check (the final one) is not of this crash. The
        // disk as the power went stays for describing wrong reads: its log
        // has the writes before the crash.
        let image_before = self.before_crash.take();
        let data_before = self.data_before_crash.take();
        let disk_before = if self.data.is_some() {
            data_before
        } else {
            image_before
        };
        self.shared.stats.borrow_mut().counts.leaked_clusters += leaks;
        self.last_crash_image = Some(judged);
        self.shared.stats.borrow_mut().counts.crash_states_checked += 1;
        let img = Rc::new(img);
        let sectors = self.shared.sectors.get();
        let reads = super::sweep::plan(self.case, sectors, &self.shared.model.borrow(), &self.disk);
        let mut violations = Vec::new();
        let mut next = 0;
        for (first, n) in reads {
            if first > next {
                let mut model = self.shared.model.borrow_mut();
                model.skip_recovered(next, first - next);
            }
            let buf = self.read_all(&img, first, n)?;
            violations.extend(self.shared.model.borrow_mut().check_recovered(first, &buf));
            self.give_back(buf);
            next = first + n;
        }
        if next < sectors {
            let mut model = self.shared.model.borrow_mut();
            model.skip_recovered(next, sectors - next);
        }
        // Past the end a resize left: nothing to read, nothing kept.
        let max = self.case.max_sectors();
        if sectors < max {
            let mut model = self.shared.model.borrow_mut();
            model.forget_recovered(sectors, max - sectors);
        }
        self.shared.model.borrow_mut().finish_recovery();
        if !violations.is_empty() {
            let (text, sectors) = self.block(
                &format!("describing the violations after {label}"),
                describe_owned(img.clone(), self.data_disk(), disk_before, violations),
            )?;
            self.fail(Failure::Model { text, sectors });
        }
        self.settle_snapshots(&img, &format!("after {label}"), true)?;
        self.set_faults_enabled(true);
        Ok(img)
    }

    /// The end of a run without a crash: read everything, close cleanly,
    /// and find neither corruption nor leak.
    pub(super) fn finish(&mut self, img: Rc<Img>) {
        self.set_faults_enabled(false);
        let reads = super::sweep::plan(
            self.case,
            self.shared.sectors.get(),
            &self.shared.model.borrow(),
            &self.disk,
        );
        // Op ids the workload never uses, which violations name as the
        // read-back (`oracle::model::READ_BACK_OPS`).
        for (op, (first, n)) in (oracle::model::READ_BACK_OPS..).zip(reads) {
            self.shared
                .model
                .borrow_mut()
                .read_issued(OpId(op), SectorRange::new(first, n));
            match self.read_all(&img, first, n) {
                Ok(buf) => {
                    if let Err(vs) = self
                        .shared
                        .model
                        .borrow_mut()
                        .read_completed(OpId(op), &buf)
                    {
                        match self.block(
                            "describing the violations of the final read",
                            describe_owned(img.clone(), self.data_disk(), None, vs),
                        ) {
                            Ok((text, sectors)) => self.fail(Failure::Model { text, sectors }),
                            Err(f) => return self.fail(f),
                        }
                    }
                    self.give_back(buf);
                }
                Err(f) => {
                    self.shared.model.borrow_mut().read_failed(OpId(op));
                    return self.fail(f);
                }
            }
        }
        if let Err(f) = self.settle_snapshots(&img, "at the end", false) {
            return self.fail(f);
        }
        let img = match Rc::try_unwrap(img) {
            Ok(i) => i,
            Err(_) => {
                return self.fail(Failure::Engine {
                    what: "image still shared at the end".into(),
                })
            }
        };
        self.shared.stats.borrow_mut().engine = img.counters();
        self.shared.stats.borrow_mut().epoch_disk = self.disk_counters().since(&self.epoch_start);
        // Drops during the close itself are not counted: close consumes
        // the image.
        self.shared.stats.borrow_mut().add_epoch(&img.counters());
        let closed = match self.block("close", async move { img.close().await }) {
            Ok(closed) => closed,
            Err(f) => return self.fail(f),
        };
        self.shared.stats.borrow_mut().disk = self.disk_counters();
        match closed {
            Ok(_) => {
                let image = self.disk.volatile();
                // No new leak since the last crash, unless an injected
                // fault explains it.
                let allowed = (self.faults_so_far() == 0).then_some(self.last_crash_image.as_ref());
                self.judge("final", &image, allowed);
            }
            Err(_) if self.faults_so_far() > 0 => {
                // An injected fault poisoned the image: treat the close as
                // a crash; what is on disk must still be sound.
                if let Err(f) = self.crash() {
                    self.fail(f);
                }
            }
            Err(e) => self.fail(Failure::Engine {
                what: format!("close failed with no fault injected: {e}"),
            }),
        }
    }
}

/// The fixed header fields of a crash image that the run follows (the
/// image may be anything a crash left: read raw, never trusted further).
struct CrashHeader {
    version: u32,
    /// The virtual size, in bytes.
    size: u64,
    backing_offset: u64,
    backing_len: u32,
}

impl CrashHeader {
    /// The header of `image`, if it starts with the qcow2 magic.
    fn read(image: &SparseStore) -> Option<CrashHeader> {
        let mut h = [0u8; 32];
        image.read(0, &mut h);
        let be32 = |o: usize| u32::from_be_bytes(h[o..o + 4].try_into().expect("4 bytes"));
        let be64 = |o: usize| u64::from_be_bytes(h[o..o + 8].try_into().expect("8 bytes"));
        (h[..4] == *b"QFI\xfb").then(|| CrashHeader {
            version: be32(4),
            backing_offset: be64(8),
            backing_len: be32(16),
            size: be64(24),
        })
    }

    /// The backing file name it names, if it names one (lossily as
    /// UTF-8: a name that is not UTF-8 differs from any expected).
    fn backing_name(&self, image: &SparseStore) -> Option<String> {
        // The format's limit on the name (1023 bytes) bounds the read.
        if self.backing_offset == 0 || self.backing_len == 0 || self.backing_len > 1023 {
            return None;
        }
        let mut name = vec![0u8; self.backing_len as usize];
        image.read(self.backing_offset, &mut name);
        Some(String::from_utf8_lossy(&name).into_owned())
    }
}
