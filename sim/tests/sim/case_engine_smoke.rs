//! Generated cases through the engine, as a smoke test of the case, data
//! and model APIs together: every profile's workload runs over the engine
//! on an in-memory device whose requests yield a seeded number of times (so
//! requests interleave), each read is checked by the model, and each crash
//! point is played as a clean flush, close and reopen followed by the
//! model's whole-disk check. Crashes proper, faults and latencies are the
//! simulated disk's and the runner's business; this test only shows that
//! generated cases are runnable and that the model agrees with a correct
//! engine.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use engine::dev::MemDev;
use engine::{Backing, CreateOptions, EngineOptions, Image};
use oracle::data::{fill_write_buffer, WriteId, SECTOR_SIZE};
use oracle::model::{Model, OpId, SectorRange, Status, WriteKind};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::case::{BackingSpec, Case, Op};
use sim::workload::Profile;

/// The in-memory device with each request yielding a seeded number of
/// times, so concurrent requests interleave under `block_on`.
type YieldDev = engine::dev::YieldDev<MemDev>;

/// Polls `f` to completion; the device never waits on anything but polls.
fn block_on<T>(f: impl Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..10_000_000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("a request never completed");
}

enum Done {
    Write(engine::Result<()>),
    Read(engine::Result<()>, Vec<u8>),
    Flush(engine::Result<()>),
}

type Task<'a> = (OpId, Pin<Box<dyn Future<Output = Done> + 'a>>);

fn status(r: &engine::Result<()>) -> Status {
    if r.is_ok() {
        Status::Ok
    } else {
        Status::Failed
    }
}

fn backing(case: &Case) -> Option<Backing<YieldDev>> {
    let spec = case.image.backing?;
    let data = spec.data();
    let mut bytes = vec![0u8; data.sectors as usize * SECTOR_SIZE];
    data.fill(&mut bytes, 0);
    Some(match spec {
        BackingSpec::Raw { .. } => Backing::Raw(YieldDev::new(MemDev::from_bytes(bytes), 1)),
        BackingSpec::Qcow2 { cluster_size, .. } => {
            let dev = YieldDev::new(MemDev::new(), 2);
            let co = CreateOptions {
                size: bytes.len() as u64,
                cluster_size,
                ..CreateOptions::default()
            };
            block_on(Image::create(&dev, &co)).expect("create backing");
            let img = block_on(Image::open(dev, EngineOptions::default())).expect("open");
            block_on(img.write(0, &bytes)).expect("fill backing");
            let dev = block_on(img.close()).expect("close backing");
            let img = block_on(Image::open(dev, EngineOptions::default())).expect("reopen");
            Backing::Qcow2(Box::new(img))
        }
    })
}

fn open(case: &Case, dev: YieldDev) -> Image<YieldDev> {
    let mut img = block_on(Image::open(dev, case.engine.clone()))
        .unwrap_or_else(|e| panic!("seed {}: open: {e}", case.seed));
    if let Some(b) = backing(case) {
        img.attach_backing(b);
    }
    img
}

fn run(case: &Case) -> u64 {
    let ctx = format!("{:?} seed {}", case.profile, case.seed);
    let mut sched = ChaCha8Rng::seed_from_u64(case.seed);
    let dev = YieldDev::new(MemDev::new(), case.seed);
    block_on(Image::create(&dev, &case.image.create)).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    let mut img = open(case, dev);
    let mut model: Model = case.model();
    let sectors = case.sectors();
    let mut numbered = case.numbered_ops();
    let mut checked = 0;
    let mut flush_ids = 1 << 40;
    for group in &case.workload {
        let mut tasks: Vec<Task<'_>> = Vec::new();
        let mut crash = false;
        for _ in group {
            let (_, n, op) = numbered.next().unwrap();
            let id = OpId(n);
            let img = &img;
            let byte = |s: u64| s * SECTOR_SIZE as u64;
            match *op {
                Op::Write {
                    sector, sectors, ..
                } => {
                    let mut buf = vec![0u8; sectors as usize * SECTOR_SIZE];
                    fill_write_buffer(&mut buf, WriteId(n), sector);
                    let range = SectorRange::new(sector, sectors);
                    model.write_issued(id, range, WriteKind::Data(WriteId(n)));
                    tasks.push((
                        id,
                        Box::pin(async move { Done::Write(img.write(byte(sector), &buf).await) }),
                    ));
                }
                Op::WriteZeroes {
                    sector,
                    sectors,
                    unmap,
                    ..
                } => {
                    model.write_issued(id, SectorRange::new(sector, sectors), WriteKind::Zero);
                    tasks.push((
                        id,
                        Box::pin(async move {
                            Done::Write(img.write_zeroes(byte(sector), byte(sectors), unmap).await)
                        }),
                    ));
                }
                Op::Discard {
                    sector, sectors, ..
                } => {
                    model.write_issued(id, SectorRange::new(sector, sectors), WriteKind::Discard);
                    tasks.push((
                        id,
                        Box::pin(async move {
                            Done::Write(img.discard(byte(sector), byte(sectors)).await)
                        }),
                    ));
                }
                Op::Read { sector, sectors }
                | Op::BackgroundRead {
                    sector, sectors, ..
                } => {
                    model.read_issued(id, SectorRange::new(sector, sectors));
                    tasks.push((
                        id,
                        Box::pin(async move {
                            let mut buf = vec![0u8; sectors as usize * SECTOR_SIZE];
                            let r = img.read(byte(sector), &mut buf).await;
                            Done::Read(r, buf)
                        }),
                    ));
                }
                Op::Flush => {
                    model.flush_issued(id);
                    tasks.push((id, Box::pin(async move { Done::Flush(img.flush().await) })));
                }
                Op::Crash => crash = true,
                Op::WriteCompressed { .. }
                | Op::SnapshotCreate
                | Op::SnapshotApply { .. }
                | Op::SnapshotDelete { .. }
                | Op::Amend { .. }
                | Op::Resize { .. } => {
                    unreachable!("left out of the case above")
                }
            }
        }
        let mut cx = Context::from_waker(Waker::noop());
        let mut polls = 0u64;
        while !tasks.is_empty() {
            polls += 1;
            assert!(polls < 10_000_000, "{ctx}: requests never completed");
            let i = sched.gen_range(0..tasks.len());
            let Poll::Ready(done) = tasks[i].1.as_mut().poll(&mut cx) else {
                continue;
            };
            let (id, _) = tasks.swap_remove(i);
            match done {
                Done::Write(r) => {
                    r.as_ref().unwrap_or_else(|e| panic!("{ctx}: {id}: {e}"));
                    model.write_completed(id, status(&r));
                }
                Done::Flush(r) => {
                    r.as_ref().unwrap_or_else(|e| panic!("{ctx}: {id}: {e}"));
                    model.flush_completed(id, status(&r));
                }
                Done::Read(r, buf) => {
                    r.unwrap_or_else(|e| panic!("{ctx}: {id}: {e}"));
                    if let Err(v) = model.read_completed(id, &buf) {
                        panic!("{ctx}: {} violations, first: {}", v.len(), v[0]);
                    }
                    checked += buf.len() as u64 / SECTOR_SIZE as u64;
                }
            }
        }
        drop(tasks);
        if crash {
            flush_ids += 1;
            model.flush_issued(OpId(flush_ids));
            block_on(img.flush()).unwrap_or_else(|e| panic!("{ctx}: flush: {e}"));
            model.flush_completed(OpId(flush_ids), Status::Ok);
            model.crash();
            let dev = block_on(img.close()).unwrap_or_else(|e| panic!("{ctx}: close: {e}"));
            img = open(case, dev);
            let mut disk = vec![0u8; sectors as usize * SECTOR_SIZE];
            block_on(img.read(0, &mut disk)).unwrap_or_else(|e| panic!("{ctx}: read: {e}"));
            if let Err(v) = model.after_crash_check(&disk) {
                panic!(
                    "{ctx}: {} violations after reopen, first: {}",
                    v.len(),
                    v[0]
                );
            }
            checked += sectors;
        }
    }
    checked
}

#[test]
fn generated_cases_run_on_the_engine_and_satisfy_the_model() {
    let mut checked = 0;
    for profile in Profile::CONCRETE {
        for seed in 0..3 {
            let mut case = Case::generate(seed, profile);
            // The in-memory device cannot inject faults; none are expected.
            case.disk.faults = sim::disk::FaultOptions::default();
            // This harness runs one device; data-file cases are the
            // runner's (tests/case_data_file.rs).
            case.image = case.image.without_data_file();
            // Snapshot operations and compressed writes are the runner's
            // (tests/driver_interface.rs).
            let case = case.without_snapshots_and_compression();
            checked += run(&case);
        }
    }
    assert!(checked > 10_000, "only {checked} sectors checked");
}
