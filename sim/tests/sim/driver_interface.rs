//! The driver interface (`sim::driver`): a driver other than the engine
//! plugs in with an adapter and runs under the same harness. An adapter
//! that only forwards to the engine runs every case bit for bit as the
//! engine does (same trace hash); one whose flush acknowledges without
//! flushing is caught; one that reports nothing of the engine's internals
//! still passes.

use engine::{Backing, Counters, CreateOptions, EngineOptions, Error, Guard, Image};
use sim::case::{Amend, Case, ImageSpec, Op};
use sim::disk::SimDisk;
use sim::driver::{Driver, DriverFuture, DriverKind, EngineDriver};
use sim::runner::{run_case, run_case_on, RunOptions};
use sim::workload::Profile;

/// How the adapter behaves.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Forward everything, the engine's internals included.
    Forward,
    /// Forward the requests only: no counters, no guard counts, no
    /// mappings, as a foreign driver would.
    Opaque,
    /// A guest flush is acknowledged and does nothing.
    FlushDoesNothing,
    /// Applying a snapshot is acknowledged and does nothing.
    ApplyDoesNothing,
    /// Taking a snapshot is acknowledged and does nothing.
    CreateDoesNothing,
}

struct Adapter {
    img: Image<SimDisk>,
    mode: Mode,
}

impl Driver for Adapter {
    fn read<'a>(&'a self, offset: u64, buf: &'a mut [u8]) -> DriverFuture<'a, ()> {
        Box::pin(self.img.read(offset, buf))
    }
    fn write<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(self.img.write(offset, data))
    }
    fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> DriverFuture<'_, ()> {
        Box::pin(self.img.write_zeroes(offset, len, unmap))
    }
    fn discard(&self, offset: u64, len: u64) -> DriverFuture<'_, ()> {
        Box::pin(self.img.discard(offset, len))
    }
    fn write_fua<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(self.img.write_fua(offset, data))
    }
    fn write_zeroes_fua(&self, offset: u64, len: u64, unmap: bool) -> DriverFuture<'_, ()> {
        Box::pin(self.img.write_zeroes_fua(offset, len, unmap))
    }
    fn discard_fua(&self, offset: u64, len: u64) -> DriverFuture<'_, ()> {
        Box::pin(self.img.discard_fua(offset, len))
    }
    fn flush(&self) -> DriverFuture<'_, ()> {
        if self.mode == Mode::FlushDoesNothing {
            return Box::pin(async { Ok(()) });
        }
        Box::pin(self.img.flush())
    }
    fn close(self: Box<Self>) -> DriverFuture<'static, ()> {
        Box::pin(async move { self.img.close().await.map(|_| ()) })
    }
    fn write_compressed<'a>(&'a self, offset: u64, data: &'a [u8]) -> DriverFuture<'a, ()> {
        Box::pin(self.img.write_compressed(offset, data))
    }
    fn snapshot_create<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        if self.mode == Mode::CreateDoesNothing {
            return Box::pin(async { Ok(()) });
        }
        Box::pin(async move { self.img.snapshot_create(name, 0, 0).await.map(|_| ()) })
    }
    fn snapshot_apply<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        if self.mode == Mode::ApplyDoesNothing {
            return Box::pin(async { Ok(()) });
        }
        Box::pin(self.img.snapshot_apply(name))
    }
    fn snapshot_delete<'a>(&'a mut self, name: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(self.img.snapshot_delete(name))
    }
    fn amend(&mut self, change: Amend) -> DriverFuture<'_, ()> {
        sim::driver::amend_engine(&mut self.img, change)
    }
    fn resize(&mut self, bytes: u64) -> DriverFuture<'_, ()> {
        Box::pin(self.img.resize(bytes))
    }
    fn snapshot_names(&self) -> DriverFuture<'_, Vec<String>> {
        Box::pin(async move {
            let table = self.img.snapshots().await?;
            Ok(table.into_iter().map(|s| s.name).collect())
        })
    }
    fn attach_backing(&mut self, backing: Backing<SimDisk>) -> Result<(), Error> {
        self.img.attach_backing(backing);
        Ok(())
    }
    fn counters(&self) -> Counters {
        match self.mode {
            Mode::Forward => self.img.counters(),
            _ => Counters::default(),
        }
    }
    fn guard_count(&self, guard: Guard) -> u64 {
        match self.mode {
            Mode::Forward => self.img.guard_count(guard),
            _ => 0,
        }
    }
    fn step_probe(&self) -> Option<engine::StepProbe> {
        match self.mode {
            Mode::Forward => Some(self.img.step_probe()),
            _ => None,
        }
    }
    fn host_offset(&self, guest: u64) -> DriverFuture<'_, Option<u64>> {
        match self.mode {
            Mode::Forward => Box::pin(self.img.host_offset(guest)),
            _ => Box::pin(async { Ok(None) }),
        }
    }
}

struct AdapterKind(Mode);

impl DriverKind for AdapterKind {
    fn create(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: CreateOptions,
    ) -> DriverFuture<'static, ()> {
        EngineDriver.create(disk, data, options)
    }
    fn open(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: EngineOptions,
    ) -> DriverFuture<'static, Box<dyn Driver>> {
        // A fresh probe is the one `Image::open_with_data` makes.
        self.open_probed(disk, data, options, engine::StepProbe::default())
    }

    // Forwarded too: the runner crashes the repair an open runs only
    // where the driver shows its steps.
    fn open_probed(
        &self,
        disk: SimDisk,
        data: Option<SimDisk>,
        options: EngineOptions,
        probe: engine::StepProbe,
    ) -> DriverFuture<'static, Box<dyn Driver>> {
        let mode = self.0;
        Box::pin(async move {
            let img = Image::open_probed(disk, data, options, probe).await?;
            Ok(Box::new(Adapter { img, mode }) as Box<dyn Driver>)
        })
    }

    // It forwards every operation and the backing file, so it says so:
    // the defaults would skip what `Driver`'s defaults refuse.
    fn does(&self, _op: &Op) -> bool {
        true
    }
    fn refuses(&self, _image: &ImageSpec) -> Option<String> {
        None
    }
}

fn on(case: &Case, mode: Mode) -> sim::runner::RunReport {
    run_case_on(
        case,
        &RunOptions::default(),
        &AdapterKind(mode),
        &mut |_, _| {},
    )
    .0
}

#[test]
fn a_forwarding_adapter_runs_every_case_as_the_engine_does() {
    for seed in 0..40 {
        let profile = Profile::ALL[seed as usize % Profile::ALL.len()];
        let case = Case::generate(seed, profile);
        let engine = run_case(&case, &RunOptions::default());
        let adapter = on(&case, Mode::Forward);
        assert!(adapter.passed(), "seed {seed}: {:#?}", adapter.failures);
        assert_eq!(
            adapter.trace_hash, engine.trace_hash,
            "seed {seed} ({profile:?}): the adapter changed the run"
        );
        assert_eq!(adapter.stats.engine, engine.stats.engine, "seed {seed}");
    }
}

#[test]
fn an_opaque_adapter_passes_and_reports_no_engine_internals() {
    let mut ran = 0;
    for seed in 0..40 {
        let case = Case::generate(seed, Profile::Random);
        let r = on(&case, Mode::Opaque);
        assert!(r.passed(), "seed {seed}: {:#?}", r.failures);
        assert_eq!(r.stats.engine, Counters::default(), "seed {seed}");
        ran += u64::from(r.stats.counts.guest_ops > 0);
    }
    assert_eq!(ran, 40);
}

#[test]
fn a_driver_whose_flush_does_nothing_is_caught() {
    let caught = (0..40)
        .filter(|&seed| {
            let case = Case::generate(seed, Profile::Random);
            !on(&case, Mode::FlushDoesNothing).passed()
        })
        .count();
    assert!(
        caught >= 5,
        "only {caught} of 40 cases caught a flush that does nothing"
    );
}

/// The first generated cases (default profile) whose workload applies a
/// snapshot after taking one, with no faults (so nothing excuses a wrong
/// result) and no crash armed inside the operations (so they run to their
/// end, for the adapter's to be judged), as many as `n`.
fn cases_applying_snapshots(n: usize) -> Vec<Case> {
    (0..2000)
        .map(|seed| {
            let mut c = Case::generate(seed, Profile::Mixed);
            c.disk.faults = sim::disk::FaultOptions::default();
            c.disk.crash.at_steps = false;
            c
        })
        .filter(|c| {
            let ops: Vec<&Op> = c.workload.iter().flatten().collect();
            let create = ops.iter().position(|op| matches!(op, Op::SnapshotCreate));
            create.is_some_and(|i| {
                ops[i..]
                    .iter()
                    .any(|op| matches!(op, Op::SnapshotApply { .. }))
            })
        })
        .take(n)
        .collect()
}

#[test]
fn the_engine_passes_with_snapshots_and_an_adapter_that_ignores_them_is_caught() {
    let cases = cases_applying_snapshots(12);
    assert_eq!(cases.len(), 12, "generation draws snapshot applies");
    let mut applied = 0;
    for c in &cases {
        let r = on(c, Mode::Forward);
        assert!(r.passed(), "seed {}: {:#?}", c.seed, r.failures);
        applied += r.stats.counts.snapshot_ops - r.stats.counts.snapshot_ops_skipped;
    }
    assert!(applied >= 24, "only {applied} snapshot operations ran");
    let caught = |mode: Mode| cases.iter().filter(|c| !on(c, mode).passed()).count();
    // An apply that changes nothing leaves the later writes' data where
    // the snapshot's was; a create that takes nothing leaves no snapshot
    // for the run to find.
    let apply = caught(Mode::ApplyDoesNothing);
    assert!(
        apply >= 6,
        "only {apply} of 12 cases caught an apply doing nothing"
    );
    let create = caught(Mode::CreateDoesNothing);
    assert!(
        create >= 10,
        "only {create} of 12 cases caught a create doing nothing"
    );
}

/// A driver from outside runs whole campaigns through
/// `run_campaign_on` (docs/driver-guide.md): the forwarding adapter's
/// campaign is the engine's, hash for hash; the one whose flush does
/// nothing fails cases, each replayed deterministically.
#[test]
fn a_campaign_runs_on_an_adapter_as_on_the_engine() {
    use sim::campaign::{run_campaign, run_campaign_on, CampaignPlan};
    let plan = CampaignPlan {
        jobs: 2,
        ..CampaignPlan::new(0..24)
    };
    let engine = run_campaign(&plan, &|| false, &|_, _| {});
    let adapter = run_campaign_on(&plan, &AdapterKind(Mode::Forward), &|| false, &|_, _| {});
    assert_eq!(engine.failed, 0);
    assert_eq!(adapter.cases, engine.cases);
    assert_eq!(adapter.trace_hash, engine.trace_hash);
    let broken = run_campaign_on(
        &plan,
        &AdapterKind(Mode::FlushDoesNothing),
        &|| false,
        &|_, _| {},
    );
    assert!(
        broken.failed > 0,
        "a flush that does nothing passed 24 cases"
    );
    assert!(broken.failures.iter().all(|f| f.deterministic));
}
