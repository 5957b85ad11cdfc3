//! Generated cases over the engine on the simulated disk, with real crash
//! states, checked by the model: the smallest runner that puts the case,
//! the disk, the executor and the model together. It shows that the
//! model's crash rules accept what a correct engine leaves on a disk that
//! crashes as ARCHITECTURE.md's fault model says, and it is where a rule too strict for real
//! disks would show up as a false alarm.

use std::cell::RefCell;
use std::rc::Rc;

use engine::dev::BlockDev;
use engine::{Backing, CreateOptions, EngineOptions, Image};
use oracle::data::{fill_write_buffer, WriteId, SECTOR_SIZE};
use oracle::model::{summarize, OpId, SectorRange, Status, Violation, WriteKind};
use rand::Rng;
use sim::case::{BackingSpec, Case, Op};
use sim::disk::{DiskOptions, SimDisk};
use sim::exec::Sim;
use sim::rng::{substream, Stream};
use sim::workload::Profile;

fn status<T, E>(r: &Result<T, E>) -> Status {
    if r.is_ok() {
        Status::Ok
    } else {
        Status::Failed
    }
}

fn backing(sim: &Sim, case: &Case) -> Option<Backing<SimDisk>> {
    let spec = case.image.backing?;
    let data = spec.data();
    let mut bytes = vec![0u8; data.sectors as usize * SECTOR_SIZE];
    data.fill(&mut bytes, 0);
    let opts = DiskOptions::default();
    Some(match spec {
        BackingSpec::Raw { .. } => Backing::Raw(SimDisk::from_bytes(sim, opts, &bytes).unwrap()),
        BackingSpec::Qcow2 { cluster_size, .. } => {
            let dev = SimDisk::new(sim, opts).unwrap();
            let co = CreateOptions {
                size: bytes.len() as u64,
                cluster_size,
                ..CreateOptions::default()
            };
            let img = sim
                .block_on(async move {
                    Image::create(&dev, &co).await?;
                    let img = Image::open(dev, EngineOptions::default()).await?;
                    img.write(0, &bytes).await?;
                    let dev = img.close().await?;
                    Image::open(dev, EngineOptions::default()).await
                })
                .unwrap()
                .expect("backing image");
            Backing::Qcow2(Box::new(img))
        }
    })
}

fn open(sim: &Sim, case: &Case, disk: SimDisk) -> Result<Rc<Image<SimDisk>>, String> {
    let opts = case.engine.clone();
    let mut img = sim
        .block_on(async move { Image::open(disk, opts).await })
        .map_err(|e| format!("executor: {e}"))?
        .map_err(|e| format!("open: {e}"))?;
    if let Some(b) = backing(sim, case) {
        img.attach_backing(b);
    }
    Ok(Rc::new(img))
}

struct Outcome {
    violations: Vec<Violation>,
    crashes: u64,
}

fn run(case: &Case) -> Result<Outcome, String> {
    let sim = Sim::new(case.seed);
    let mut disk = sim.disk(case.disk.clone()).map_err(|e| e.to_string())?;
    let faults = case.disk.faults.enabled;
    disk.set_faults_enabled(false);
    let (d, co) = (disk.clone(), case.image.create.clone());
    sim.block_on(async move {
        Image::create(&d, &co).await?;
        d.flush().await.map_err(engine::Error::from)
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("create: {e}"))?;
    let mut img = open(&sim, case, disk.clone())?;
    disk.set_faults_enabled(faults);
    let model = Rc::new(RefCell::new(case.model()));
    let violations: Rc<RefCell<Vec<Violation>>> = Rc::default();
    let mut numbered = case.numbered_ops();
    let mut crashes = 0;
    for group in &case.workload {
        let mut crash = false;
        for _ in group {
            let (_, n, op) = numbered.next().unwrap();
            let id = OpId(n);
            let (img, model, violations) = (img.clone(), model.clone(), violations.clone());
            let byte = |s: u64| s * SECTOR_SIZE as u64;
            match *op {
                Op::Write {
                    sector, sectors, ..
                } => {
                    let mut buf = vec![0u8; sectors as usize * SECTOR_SIZE];
                    fill_write_buffer(&mut buf, WriteId(n), sector);
                    let range = SectorRange::new(sector, sectors);
                    model
                        .borrow_mut()
                        .write_issued(id, range, WriteKind::Data(WriteId(n)));
                    sim.spawn_named(format!("{op:?} #{n}"), async move {
                        let r = img.write(byte(sector), &buf).await;
                        model.borrow_mut().write_completed(id, status(&r));
                    });
                }
                Op::WriteZeroes {
                    sector,
                    sectors,
                    unmap,
                    ..
                } => {
                    let range = SectorRange::new(sector, sectors);
                    model.borrow_mut().write_issued(id, range, WriteKind::Zero);
                    sim.spawn_named(format!("{op:?} #{n}"), async move {
                        let r = img.write_zeroes(byte(sector), byte(sectors), unmap).await;
                        model.borrow_mut().write_completed(id, status(&r));
                    });
                }
                Op::Discard {
                    sector, sectors, ..
                } => {
                    let range = SectorRange::new(sector, sectors);
                    model
                        .borrow_mut()
                        .write_issued(id, range, WriteKind::Discard);
                    sim.spawn_named(format!("{op:?} #{n}"), async move {
                        let r = img.discard(byte(sector), byte(sectors)).await;
                        model.borrow_mut().write_completed(id, status(&r));
                    });
                }
                Op::Read { sector, sectors }
                | Op::BackgroundRead {
                    sector, sectors, ..
                } => {
                    model
                        .borrow_mut()
                        .read_issued(id, SectorRange::new(sector, sectors));
                    sim.spawn_named(format!("{op:?} #{n}"), async move {
                        let mut buf = vec![0u8; sectors as usize * SECTOR_SIZE];
                        let r = img.read(byte(sector), &mut buf).await;
                        let mut m = model.borrow_mut();
                        match r {
                            Ok(()) => {
                                if let Err(v) = m.read_completed(id, &buf) {
                                    violations.borrow_mut().extend(v);
                                }
                            }
                            Err(_) => m.read_failed(id),
                        }
                    });
                }
                Op::Flush => {
                    model.borrow_mut().flush_issued(id);
                    sim.spawn_named(format!("{op:?} #{n}"), async move {
                        let r = img.flush().await;
                        model.borrow_mut().flush_completed(id, status(&r));
                    });
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
        if !crash {
            sim.run().map_err(|e| format!("executor: {e}"))?;
            continue;
        }
        let mut rng = substream(case.seed, Stream::Crash, crashes as u32);
        let polls = rng.gen_range(0..=400u32);
        let mut n = 0;
        sim.run_until(|| {
            n += 1;
            n > polls
        })
        .map_err(|e| format!("executor: {e}"))?;
        model.borrow_mut().crash();
        let image = disk.crash_image(&mut rng).map_err(|e| e.to_string())?;
        sim.abort_all();
        drop(img);
        disk = disk.reopen(image.content);
        disk.set_faults_enabled(false);
        img = open(&sim, case, disk.clone())?;
        let sectors = case.sectors() as usize;
        let reader = img.clone();
        let bytes = sim
            .block_on(async move {
                let mut buf = vec![0u8; sectors * SECTOR_SIZE];
                reader.read(0, &mut buf).await.map(|()| buf)
            })
            .map_err(|e| format!("executor: {e}"))?
            .map_err(|e| format!("reading back after crash {crashes}: {e}"))?;
        if let Err(v) = model.borrow_mut().after_crash_check(&bytes) {
            violations.borrow_mut().extend(v);
        }
        disk.set_faults_enabled(faults);
        crashes += 1;
    }
    let violations = violations.take();
    Ok(Outcome {
        violations,
        crashes,
    })
}

fn check(case: &Case) -> u64 {
    match run(case) {
        Ok(o) if o.violations.is_empty() => o.crashes,
        Ok(o) => panic!(
            "{}\n{}",
            case.summary(),
            summarize(&o.violations, 10).join("\n")
        ),
        Err(e) => panic!("{}\n{e}", case.summary()),
    }
}

#[test]
fn generated_cases_survive_crashes_on_the_simulated_disk() {
    let mut crashes = 0;
    for seed in 0..12 {
        let mut case = Case::generate(seed, Profile::Mixed);
        // Injected I/O errors are left out for now: the engine as it stands
        // can leave a guest request waiting forever after one (the
        // executor reports a hang), which is the runner's to report.
        case.disk.faults.enabled = false;
        // This harness runs one disk; data-file cases are the runner's
        // (tests/case_data_file.rs).
        case.image = case.image.without_data_file();
        // Snapshot operations run alone, on the image handed over (the
        // runner's `run_alone_group`), and compressed writes may be
        // refused: the runner's (tests/driver_interface.rs).
        let case = case.without_snapshots_and_compression();
        crashes += check(&case);
    }
    assert!(crashes >= 24, "only {crashes} crashes");
}
