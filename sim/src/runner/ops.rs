//! Spawning the guest operations of a group, snapshot operations among
//! them, and what a snapshot operation leaves the model to expect.

use super::explain::*;
use super::faults::*;
use super::state::*;

impl Run<'_> {
    /// Spawn guest operation number `n` as a task.
    pub(super) fn spawn_op(&self, img: &Rc<Img>, n: u64, op: Op) -> JoinHandle<()> {
        self.spawn_op_marked(img, n, op, None)
    }

    /// `spawn_op`, setting `started` at the task's first poll (a group
    /// waits for its background reads to start, not to end).
    pub(super) fn spawn_op_marked(
        &self,
        img: &Rc<Img>,
        n: u64,
        op: Op,
        started: Option<Rc<Cell<bool>>>,
    ) -> JoinHandle<()> {
        let img = img.clone();
        let shared = self.shared.clone();
        let disk = self.data_disk();
        let mut ledger = self.fault_ledger();
        let name = format!("op {n} {op:?}");
        self.sim.spawn_named(name, async move {
            if let Some(s) = started {
                s.set(true);
            }
            let id = OpId(n);
            let ss = SECTOR_SIZE as u64;
            // This epoch's faults so far: one injected from here until the
            // operation ends is what may explain its error.
            ledger.issued();
            let result = match op {
                Op::Write {
                    sector,
                    sectors,
                    fua,
                } => {
                    let buf = write_buffer(WriteId(n), sector, sectors);
                    let range = SectorRange::new(sector, sectors);
                    let kind = WriteKind::Data(WriteId(n));
                    shared
                        .model
                        .borrow_mut()
                        .write_issued_flagged(id, range, kind, fua);
                    let r = if fua {
                        img.write_fua(sector * ss, &buf).await
                    } else {
                        img.write(sector * ss, &buf).await
                    };
                    shared.model.borrow_mut().write_completed(id, status(&r));
                    shared.stats.borrow_mut().counts.guest_writes += 1;
                    r
                }
                Op::WriteZeroes {
                    sector,
                    sectors,
                    unmap,
                    fua,
                } => {
                    let range = SectorRange::new(sector, sectors);
                    shared
                        .model
                        .borrow_mut()
                        .write_issued_flagged(id, range, WriteKind::Zero, fua);
                    let (at, len) = (sector * ss, sectors * ss);
                    let r = if fua {
                        img.write_zeroes_fua(at, len, unmap).await
                    } else {
                        img.write_zeroes(at, len, unmap).await
                    };
                    shared.model.borrow_mut().write_completed(id, status(&r));
                    shared.stats.borrow_mut().counts.guest_writes += 1;
                    r
                }
                Op::Discard {
                    sector,
                    sectors,
                    fua,
                } => {
                    let range = SectorRange::new(sector, sectors);
                    shared.model.borrow_mut().write_issued_flagged(
                        id,
                        range,
                        WriteKind::Discard,
                        fua,
                    );
                    let (at, len) = (sector * ss, sectors * ss);
                    let r = if fua {
                        img.discard_fua(at, len).await
                    } else {
                        img.discard(at, len).await
                    };
                    shared.model.borrow_mut().write_completed(id, status(&r));
                    r
                }
                Op::Flush => {
                    shared.model.borrow_mut().flush_issued(id);
                    let r = img.flush().await;
                    shared.model.borrow_mut().flush_completed(id, status(&r));
                    shared.stats.borrow_mut().counts.guest_flushes += 1;
                    r
                }
                Op::Read { sector, sectors }
                | Op::BackgroundRead {
                    sector, sectors, ..
                } => {
                    let mut buf = vec![0u8; (sectors * ss) as usize];
                    shared
                        .model
                        .borrow_mut()
                        .read_issued(id, SectorRange::new(sector, sectors));
                    let r = img.read(sector * ss, &mut buf).await;
                    shared.stats.borrow_mut().counts.guest_reads += 1;
                    match &r {
                        Ok(()) => {
                            let v = shared.model.borrow_mut().read_completed(id, &buf);
                            if let Err(vs) = v {
                                let (text, sectors) =
                                    describe_violations(&img, &disk, None, &vs).await;
                                shared
                                    .failures
                                    .borrow_mut()
                                    .push(Failure::Model { text, sectors });
                            }
                        }
                        Err(_) => shared.model.borrow_mut().read_failed(id),
                    }
                    r
                }
                Op::WriteCompressed { sector, sectors } => {
                    let mut buf = vec![0u8; (sectors * ss) as usize];
                    fill_compressible_buffer(&mut buf, WriteId(n), sector);
                    let values = Model::compressible_values(WriteId(n), sector, sectors);
                    shared
                        .model
                        .borrow_mut()
                        .write_issued_values(id, Some(WriteId(n)), &values);
                    let r = img.write_compressed(sector * ss, &buf).await;
                    // A cluster with a host cluster already is refused, as
                    // QEMU's driver refuses it: no failure, but the model
                    // is promised nothing of its content.
                    let refused = matches!(
                        r,
                        Err(engine::Error::Compressed(
                            engine::CompressedWriteError::Allocated { .. }
                        ))
                    );
                    let st = if refused { Status::Failed } else { status(&r) };
                    shared.model.borrow_mut().write_completed(id, st);
                    let mut stats = shared.stats.borrow_mut();
                    stats.counts.guest_writes += 1;
                    stats.counts.compressed_writes += 1;
                    stats.counts.compressed_refused += u64::from(refused);
                    if refused {
                        Ok(())
                    } else {
                        r
                    }
                }
                Op::SnapshotCreate
                | Op::SnapshotApply { .. }
                | Op::SnapshotDelete { .. }
                | Op::Amend { .. }
                | Op::Resize { .. } => {
                    unreachable!(
                        "snapshot operations, amends and resizes run alone (run_alone_group)"
                    )
                }
                Op::Crash => unreachable!("crashes are not spawned"),
            };
            shared.stats.borrow_mut().counts.guest_fua_requests += u64::from(op.is_fua());
            ledger.account(&shared, n, &op, result);
        })
    }

    /// Run snapshot operation `op` (number `n`) of group `g`, alone: every
    /// request in flight (background reads too) ends first, as QEMU drains
    /// the disk before one. A create first reads the guest disk back,
    /// checked by the model, to know what the snapshot holds. `until`
    /// says when the group stops: at its end, or when the power goes
    /// (perhaps in the middle of the operation). Returns the image (None
    /// if the power went before the operation ended and it went with it),
    /// or None outright if the run cannot go on (a failure is recorded).
    pub(super) fn run_alone_group(
        &mut self,
        live: Rc<Img>,
        g: usize,
        n: u64,
        op: Op,
        until: AloneUntil,
    ) -> Option<(Option<Img>, bool)> {
        self.group = g;
        // Counted from before the drain, as `go` counts a group's flushes.
        let flush_target = match until {
            AloneUntil::DeviceFlush(k) => self.disk.flushes().saturating_add(k),
            _ => u64::MAX,
        };
        if let Err(e) = self.sim.run() {
            self.sim.abort_all();
            self.fail(Failure::Hang {
                group: g,
                message: e.to_string(),
            });
            return None;
        }
        self.background.clear();
        let plan = match op {
            Op::SnapshotCreate => match self.capture(&live, n) {
                Ok(values) => AlonePlan::Create(self.shared.snapshots.borrow_mut().taking(
                    Snapshots::name_of(n),
                    values,
                    self.shared.sectors.get(),
                )),
                Err(f) => {
                    self.fail(f);
                    return None;
                }
            },
            Op::SnapshotApply { pick } => {
                let known = self.shared.snapshots.borrow();
                match known.pick(pick) {
                    Some(i) => AlonePlan::Apply {
                        snapshot: i,
                        values: super::values::values_after_apply(
                            &self.shared.model.borrow(),
                            &known.get(i).values,
                        ),
                    },
                    None => AlonePlan::Skip,
                }
            }
            Op::SnapshotDelete { pick } => {
                let mut known = self.shared.snapshots.borrow_mut();
                match known.pick(pick) {
                    Some(i) => {
                        // Cut short, it may have happened or not.
                        known.set(i, Presence::Maybe);
                        AlonePlan::Delete(i)
                    }
                    None => AlonePlan::Skip,
                }
            }
            Op::Amend { change } => AlonePlan::Amend(change),
            Op::Resize { sectors } => {
                let from = self.shared.sectors.get();
                AlonePlan::Resize {
                    to: sectors,
                    values: super::values::resize_values(
                        &self.shared.model.borrow(),
                        self.case,
                        from,
                        sectors,
                    ),
                }
            }
            _ => unreachable!("run_alone_group runs snapshot operations and amends"),
        };
        let Ok(owned) = Rc::try_unwrap(live) else {
            self.fail(Failure::Engine {
                what: "the image is still shared after every request ended".into(),
            });
            return None;
        };
        let slot: Rc<RefCell<Option<Img>>> = Rc::new(RefCell::new(None));
        let probe = owned.step_probe();
        // Set by this operation's task if it returns, and only then.
        self.shared.amend_done.set(false);
        self.spawn_alone_op(owned, n, op, plan, slot.clone());
        let mut went = false;
        let ran = match until {
            AloneUntil::End => self.sim.run().map(|_| ()),
            AloneUntil::Armed => self.run_alone_armed(probe).map(|w| went = w),
            AloneUntil::PowerFails => self.run_until_power_fails(),
            AloneUntil::DeviceFlush(_) => {
                let disk = self.disk.clone();
                self.sim
                    .run_until(|| disk.flushes() >= flush_target)
                    .map(|_| ())
            }
        };
        if let Err(e) = ran {
            self.sim.abort_all();
            self.fail(Failure::Hang {
                group: g,
                message: e.to_string(),
            });
            return None;
        }
        let mut back = slot.borrow_mut().take();
        if went {
            self.armed_crash(super::armed::ArmedStop::Step);
        }
        // An amend that failed (an injected fault) leaves the image as a
        // failed request does: the run goes on with it, as with any.
        if matches!(op, Op::Amend { .. }) && !went && self.shared.amend_done.take() {
            if let Some(img) = back.take() {
                back = Some(self.reopen_after_amend(img, n)?);
            }
        }
        Some((back, went))
    }

    /// `qemu-img amend` works on a closed image, and the guest's driver
    /// opens it afresh afterwards: so does the run, faults off (an open
    /// image keeps the geometry it was opened with). The close makes
    /// everything written before durable, as a flush does. None, with a
    /// failure recorded, if either fails.
    fn reopen_after_amend(&mut self, img: Img, n: u64) -> Option<Img> {
        self.shared.stats.borrow_mut().add_epoch(&img.counters());
        self.set_faults_enabled(false);
        let id = OpId(n);
        self.shared.model.borrow_mut().flush_issued(id);
        let closed = match self.block("closing the image after an amend", img.close()) {
            Ok(r) => r,
            Err(f) => {
                self.fail(f);
                return None;
            }
        };
        if let Err(e) = closed {
            self.fail(Failure::Engine {
                what: format!("closing the image after op {n} (an amend), faults off: {e}"),
            });
            return None;
        }
        self.shared
            .model
            .borrow_mut()
            .flush_completed(id, Status::Ok);
        let opened = match self.open_image("reopening the image after an amend") {
            Ok(Ok(img)) => img,
            Ok(Err(e)) => {
                self.fail(Failure::Engine {
                    what: format!("reopening the image after op {n} (an amend) failed: {e}"),
                });
                return None;
            }
            Err(f) => {
                self.fail(f);
                return None;
            }
        };
        self.set_faults_enabled(true);
        Some(opened)
    }

    /// The guest disk read back (faults off) and checked by the model as
    /// a read, as the values of the sectors that differ from unwritten
    /// ones, in order: what a snapshot taken now holds.
    pub(super) fn capture(&mut self, img: &Rc<Img>, n: u64) -> Result<Vec<(u64, Value)>, Failure> {
        self.set_faults_enabled(false);
        let reads = super::sweep::plan(
            self.case,
            self.shared.sectors.get(),
            &self.shared.model.borrow(),
            &self.disk,
        );
        let mut values = Vec::new();
        for (first, count) in reads {
            let buf = self.read_all(img, first, count)?;
            let checked = self
                .shared
                .model
                .borrow_mut()
                .check_read(OpId(n), first, &buf);
            if let Err(vs) = checked {
                let (text, sectors) = self.block(
                    "describing the violations of a snapshot's read",
                    describe_owned(img.clone(), self.data_disk(), None, vs),
                )?;
                self.fail(Failure::Model { text, sectors });
            }
            let model = self.shared.model.borrow();
            for (s, chunk) in (first..).zip(buf.chunks_exact(SECTOR_SIZE)) {
                let v = Value::of_content(decode(chunk), s).unwrap_or(Value::Garbage);
                if v != model.unwritten(s) {
                    values.push((s, v));
                }
            }
            drop(model);
            self.give_back(buf);
        }
        self.set_faults_enabled(true);
        Ok(values)
    }

    /// Spawn the task that runs snapshot operation `op` (number `n`) as
    /// `plan` says, on the image it owns meanwhile, and puts the image in
    /// `slot` when done.
    pub(super) fn spawn_alone_op(
        &self,
        owned: Img,
        n: u64,
        op: Op,
        plan: AlonePlan,
        slot: Rc<RefCell<Option<Img>>>,
    ) {
        let shared = self.shared.clone();
        let mut ledger = self.fault_ledger();
        let v2 = self.shared.v2.get();
        let name = format!("op {n} {op:?}");
        self.sim.spawn_named(name, async move {
            let mut held = HeldImage {
                img: Some(owned),
                shared: shared.clone(),
            };
            let img = held
                .img
                .as_mut()
                .expect("the image until the operation ends");
            let id = OpId(n);
            ledger.issued();
            let name_of = |i: usize| shared.snapshots.borrow().get(i).name.clone();
            let skipped = matches!(plan, AlonePlan::Skip);
            // Each operation first makes everything written before it
            // durable, as a flush does, and is durable once it returns.
            let result = match plan {
                AlonePlan::Create(i) => {
                    let name = name_of(i);
                    shared.model.borrow_mut().flush_issued(id);
                    let r = img.snapshot_create(&name).await;
                    shared.model.borrow_mut().flush_completed(id, status(&r));
                    if r.is_ok() {
                        shared.snapshots.borrow_mut().set(i, Presence::Exists);
                    }
                    r
                }
                AlonePlan::Apply { snapshot, values } => {
                    let name = name_of(snapshot);
                    flushed_write_issued(&shared.model, id, &values);
                    let r = img.snapshot_apply(&name).await;
                    if flushed_write_completed(&shared.model, id, &r) {
                        // The disk has the snapshot's size back.
                        shared
                            .sectors
                            .set(shared.snapshots.borrow().get(snapshot).sectors);
                    }
                    r
                }
                AlonePlan::Delete(i) => {
                    let name = name_of(i);
                    shared.model.borrow_mut().flush_issued(id);
                    let r = img.snapshot_delete(&name).await;
                    shared.model.borrow_mut().flush_completed(id, status(&r));
                    if r.is_ok() {
                        shared.snapshots.borrow_mut().set(i, Presence::Deleted);
                    }
                    r
                }
                AlonePlan::Skip => Ok(()),
                AlonePlan::Resize { to, values } => {
                    flushed_write_issued(&shared.model, id, &values);
                    if to > shared.sectors.get() {
                        shared.growing.set(Some((n, to)));
                    }
                    let r = img.resize(to * SECTOR_SIZE as u64).await;
                    shared.growing.set(None);
                    if flushed_write_completed(&shared.model, id, &r) {
                        shared.sectors.set(to);
                    }
                    r
                }
                AlonePlan::Amend(change) => {
                    // The guest disk reads the same after it. Not a flush
                    // to the model when it returns: a change the image has
                    // already (or refuses) returns without one, and the
                    // close after it (`reopen_after_amend`) is the flush.
                    let r = img.amend(change).await;
                    // One that fails on an I/O error failed in its own
                    // flush, or after it: to the model a failed flush,
                    // after which writes not yet durable may be lost (the
                    // engine gives up what it could not write).
                    if matches!(&r, Err(e) if !matches!(e, engine::Error::Amend(_))) {
                        let mut m = shared.model.borrow_mut();
                        m.flush_issued(id);
                        m.flush_completed(id, Status::Failed);
                    }
                    if let (Ok(()), crate::case::Amend::Version(v)) = (&r, change) {
                        shared.v2.set(v == 2);
                    }
                    r
                }
            };
            *slot.borrow_mut() = held.img.take();
            // Narrow refcounts cannot count a cluster shared once more:
            // the engine refuses before changing anything, as QEMU does.
            // The model took the refusal for a failure, which promises
            // nothing.
            // So can an amend the image cannot take.
            let refused = matches!(
                result,
                Err(
                    engine::Error::Snapshot(engine::SnapshotError::RefcountOverflow { .. })
                        | engine::Error::Amend(_)
                        | engine::Error::ResizeV2WithSnapshots
                )
            );
            let result = if refused { Ok(()) } else { result };
            shared
                .amend_done
                .set(matches!(op, Op::Amend { .. }) && result.is_ok());
            if v2
                && op.is_snapshot()
                && matches!(&result, Err(e) if !matches!(e, engine::Error::Snapshot(_)))
            {
                shared.flags_in_doubt.set(true);
            }
            {
                let mut stats = shared.stats.borrow_mut();
                if op.is_snapshot() {
                    stats.counts.snapshot_ops += 1;
                    stats.counts.snapshot_ops_skipped += u64::from(skipped);
                    stats.counts.snapshot_ops_refused += u64::from(refused);
                } else if let Op::Resize { .. } = op {
                    stats.counts.resizes += 1;
                    stats.counts.resizes_refused += u64::from(refused);
                } else {
                    stats.counts.amends += 1;
                    stats.counts.amends_refused += u64::from(refused);
                }
            }
            ledger.account(&shared, n, &op, result);
        });
    }

    /// Hold the run's snapshots against those the image lists (after a
    /// crash's recovery, and at the end); a run that took none asks
    /// nothing.
    pub(super) fn settle_snapshots(
        &self,
        img: &Rc<Img>,
        label: &str,
        reopened: bool,
    ) -> Result<(), Failure> {
        if self.shared.snapshots.borrow().is_empty() {
            return Ok(());
        }
        let i = img.clone();
        let names = self.block(&format!("listing the snapshots {label}"), async move {
            i.snapshot_names().await
        })?;
        let names = names.map_err(|e| Failure::Engine {
            what: format!("listing the snapshots {label} failed with faults off: {e}"),
        })?;
        if let Err(wrong) = self.shared.snapshots.borrow_mut().settle(&names, reopened) {
            self.fail(Failure::Engine {
                what: format!("snapshots {label}: {wrong}"),
            });
        }
        Ok(())
    }
}

/// An operation that first makes everything written before it durable,
/// as a flush does, writes `values`, and is durable once it returns (a
/// snapshot apply, a resize): issued, to the model.
fn flushed_write_issued(model: &RefCell<Model>, id: OpId, values: &[(u64, Value)]) {
    let mut m = model.borrow_mut();
    m.flush_issued(id);
    m.write_issued_values(id, None, values);
}

/// [`flushed_write_issued`]'s operation returned `r`: on success what it
/// wrote is durable too. Returns whether it succeeded.
fn flushed_write_completed(
    model: &RefCell<Model>,
    id: OpId,
    r: &Result<(), engine::Error>,
) -> bool {
    let st = status(r);
    let mut m = model.borrow_mut();
    m.write_completed(id, st);
    m.flush_completed(id, st);
    if st == Status::Ok {
        m.flush_issued(id);
        m.flush_completed(id, Status::Ok);
    }
    st == Status::Ok
}

/// The image a snapshot operation's task owns. A crash that cuts the
/// operation short drops the task, and the image with it: its epoch's
/// counters (guards whose condition arose, rare paths) are added to the
/// run's then, as `Run::go` adds those of an image it gets back.
struct HeldImage {
    img: Option<Img>,
    shared: Rc<Shared>,
}

impl Drop for HeldImage {
    fn drop(&mut self) {
        if let Some(img) = self.img.take() {
            self.shared.stats.borrow_mut().add_epoch(&img.counters());
        }
    }
}
