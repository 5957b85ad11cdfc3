//! Crashes inside the repair an open runs: the rebuild of refcounts and
//! COPIED flags when a crash left a version 3 image dirty
//! (`engine::MetaOp::DirtyRebuild`). The reopen after a crash is itself a
//! multi-step metadata operation whose step order alone protects the
//! image: the dirty bit may be cleared only once the rebuilt refcounts
//! and flags are durable. With step crashes armed, the reopen of a dirty
//! image runs under the case's step watch like any operation, and when
//! the power goes inside the rebuild the disk is crashed again, its state
//! judged, and the open tried once more (no second crash inside it: the
//! kind is spent). No guest request runs in between, so the model has
//! nothing to learn from the second crash.

use super::armed::ArmedStop;
use super::judge::dirty_bit;
use super::state::*;

impl Run<'_> {
    /// Open the image after `label` as `open_image` does; if the image is
    /// dirty (`dirty`) and a crash may still land inside the rebuild, with
    /// the rebuild's steps watched and the power cut at its drawn step.
    pub(super) fn reopen_watched(
        &mut self,
        label: &str,
        dirty: bool,
    ) -> Result<Result<Img, engine::Error>, Failure> {
        let what = format!("reopen after {label}");
        let armed = dirty
            && self
                .step_watch
                .as_ref()
                .is_some_and(|w| w.armed_for(engine::MetaOp::DirtyRebuild));
        if !armed {
            return self.open_image(&what);
        }
        let probe = engine::StepProbe::default();
        let opened = self.driver.open_probed(
            self.disk.clone(),
            self.data.clone(),
            self.case.engine.clone(),
            probe.clone(),
        );
        let slot: Rc<RefCell<Option<Result<Img, engine::Error>>>> = Rc::default();
        let into = slot.clone();
        self.sim.spawn_named(what.clone(), async move {
            *into.borrow_mut() = Some(opened.await);
        });
        let went = self.run_alone_armed(Some(probe.clone())).map_err(|e| {
            self.sim.abort_all();
            Failure::Hang {
                group: self.group,
                message: format!("{what}: {e}"),
            }
        })?;
        if !went {
            let opened = slot.borrow_mut().take().ok_or_else(|| Failure::Hang {
                group: self.group,
                message: format!("{what}: the open never ended"),
            })?;
            return match opened {
                Ok(img) => self.attach_backing(img, &what),
                Err(e) => Ok(Err(e)),
            };
        }
        // Read before the abort drops the open and its scope.
        self.armed_crash(ArmedStop::Step);
        let now = probe.get();
        let (op, step) = match self.step_crash.take() {
            Some(c) => c.counted(now),
            None => now.unwrap_or((engine::MetaOp::DirtyRebuild, engine::Step::Start)),
        };
        self.sim.abort_all();
        self.shared
            .stats
            .borrow_mut()
            .crash_points
            .bump(self.shared.v2.get(), op, step);
        self.crash_inside_open(label)?;
        let label = format!("crash-{} (inside the rebuild after {label})", self.crashes);
        // The kind is spent: this open runs to its end.
        let raw = self.disk.volatile();
        self.reopen_watched(&label, dirty_bit(&raw))
    }

    /// The power goes inside the open's repair: the image's disk is
    /// crashed and reopened on the state it left (the data file's disk
    /// took no write since the last crash). At a flush, more of its
    /// states are judged first, as at any crash at a flush.
    fn crash_inside_open(&mut self, label: &str) -> Result<(), Failure> {
        self.crashes += 1;
        if std::mem::take(&mut self.at_flush) {
            self.judge_more_states()?;
        }
        let image = self
            .disk
            .crash_image(&mut self.crash_rng)
            .map_err(|e| Failure::Engine {
                what: format!("crash image inside the rebuild after {label}: {e}"),
            })?;
        self.shared.stats.borrow_mut().counts.torn_writes += image.summary().torn_writes;
        self.gone.add(std::slice::from_ref(&self.disk));
        self.disk = self.disk.reopen(image.content);
        // A new disk starts with the case's faults on; the repair runs
        // without them, as the first try did.
        self.set_faults_enabled(false);
        Ok(())
    }
}
