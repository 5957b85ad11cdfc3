//! Injected faults: EIO by rank and by rate, ENOSPC past the capacity, lost
//! and misdirected writes, the master switch, the fault report, and the
//! per-case fault settings drawn from a seed.

use std::cell::RefCell;
use std::rc::Rc;

use engine::dev::{BlockDev, DevError, IoOp, WriteFlags, ZeroFlags};
use sim::disk::{DiskOptions, FaultKind, FaultOptions, NthRequest, SimDisk, PPM};
use sim::exec::Sim;

fn with_faults(f: FaultOptions) -> DiskOptions {
    DiskOptions {
        faults: FaultOptions { enabled: true, ..f },
        ..DiskOptions::default()
    }
}

/// Run `n` sequential single-sector writes, each followed by a read of it,
/// and return the results.
type Results = Rc<RefCell<Vec<(IoOp, Result<(), DevError>)>>>;

fn write_read(sim: &Sim, disk: &SimDisk, n: u64) -> Results {
    let out: Results = Rc::default();
    let d = disk.clone();
    let o = out.clone();
    sim.spawn(async move {
        for i in 0..n {
            let r = d
                .write(i * 512, &[i as u8 + 1; 512], WriteFlags::default())
                .await;
            o.borrow_mut().push((IoOp::Write, r));
            let mut b = [0u8; 512];
            let r = d.read(i * 512, &mut b).await;
            o.borrow_mut().push((IoOp::Read, r));
        }
    });
    sim.run().unwrap();
    out
}

#[test]
fn eio_at_the_nth_request_of_a_kind() {
    let sim = Sim::new(1);
    let disk = sim
        .disk(with_faults(FaultOptions {
            error_at: vec![
                NthRequest {
                    op: IoOp::Write,
                    n: 3,
                    device: None,
                },
                NthRequest {
                    op: IoOp::Read,
                    n: 5,
                    device: None,
                },
            ],
            ..FaultOptions::default()
        }))
        .unwrap();
    let out = write_read(&sim, &disk, 6);
    let failed: Vec<(usize, IoOp)> = out
        .borrow()
        .iter()
        .enumerate()
        .filter(|(_, (_, r))| r.is_err())
        .map(|(i, (op, _))| (i, *op))
        .collect();
    // Requests alternate write, read: write #3 is request 4, read #5 is 9.
    assert_eq!(failed, vec![(4, IoOp::Write), (9, IoOp::Read)]);
    assert_eq!(
        out.borrow()[4].1,
        Err(DevError::Io {
            op: IoOp::Write,
            offset: 1024,
            len: 512
        })
    );
    let report = disk.injected_faults();
    assert_eq!(report.len(), 2);
    assert_eq!((report[0].request, report[0].op), (4, IoOp::Write));
    let line = report[1].to_string();
    assert!(
        line.starts_with("#9 read 2048+512 at ") && line.ends_with(" ns: EIO"),
        "{line}"
    );
    assert!(matches!(report[0].kind, FaultKind::Io { landed } if landed == 0 || landed == 512));
    assert_eq!(disk.counters().errors, 2);
}

#[test]
fn failed_flush_makes_nothing_durable() {
    let sim = Sim::new(2);
    let disk = sim
        .disk(with_faults(FaultOptions {
            error_at: vec![NthRequest {
                op: IoOp::Flush,
                n: 1,
                device: None,
            }],
            ..FaultOptions::default()
        }))
        .unwrap();
    let d = disk.clone();
    let h = sim.spawn(async move {
        d.write(0, &[1; 512], WriteFlags::default()).await.unwrap();
        let first = d.flush().await;
        let durable_after_first = d.durable().to_bytes();
        let second = d.flush().await;
        (first, durable_after_first, second)
    });
    sim.run().unwrap();
    let (first, durable_after_first, second) = h.take().unwrap();
    assert_eq!(
        first,
        Err(DevError::Io {
            op: IoOp::Flush,
            offset: 0,
            len: 0
        })
    );
    assert!(durable_after_first.is_empty());
    assert_eq!(second, Ok(()));
    assert_eq!(disk.durable().to_bytes(), vec![1u8; 512]);
}

/// A rank fault scoped to one disk fails that disk's request only, and
/// the disk lists it by rank (what the shrinker pins); unscoped, every
/// disk's request of that rank fails.
#[test]
fn a_rank_fault_scoped_to_a_disk_fails_only_there() {
    let sim = Sim::new(4);
    let first = sim.disk(with_faults(FaultOptions::default())).unwrap();
    let scoped = |device| FaultOptions {
        error_at: vec![NthRequest {
            op: IoOp::Flush,
            n: 2,
            device,
        }],
        ..FaultOptions::default()
    };
    let index = first.index();
    let a = sim.disk(with_faults(scoped(Some(index + 1)))).unwrap();
    let b = sim.disk(with_faults(scoped(Some(index + 7)))).unwrap();
    let c = sim.disk(with_faults(scoped(None))).unwrap();
    let disks = [a.clone(), b.clone(), c.clone()];
    let h = sim.spawn(async move {
        let mut out = Vec::new();
        for d in &disks {
            out.push((d.flush().await.is_ok(), d.flush().await.is_ok()));
        }
        out
    });
    sim.run().unwrap();
    assert_eq!(
        h.take().unwrap(),
        vec![(true, false), (true, true), (true, false)]
    );
    let pinned = a.failed_by_rank();
    assert_eq!(
        pinned,
        vec![NthRequest {
            op: IoOp::Flush,
            n: 2,
            device: Some(index + 1),
        }]
    );
    assert_eq!(a.injected_faults()[0].rank, 2);
    assert!(b.failed_by_rank().is_empty());
}

#[test]
fn enospc_past_the_capacity() {
    let sim = Sim::new(3);
    let disk = sim
        .disk(with_faults(FaultOptions {
            capacity: Some(4096),
            ..FaultOptions::default()
        }))
        .unwrap();
    let d = disk.clone();
    let h = sim.spawn(async move {
        let a = d.write(3584, &[1; 512], WriteFlags::default()).await;
        let b = d.write(3584, &[1; 1024], WriteFlags::default()).await;
        let c = d.write_zeroes(4096, 512, ZeroFlags::default()).await;
        let t = d.truncate(8192).await;
        (a, b, c, t)
    });
    sim.run().unwrap();
    let (a, b, c, t) = h.take().unwrap();
    assert_eq!(a, Ok(()));
    assert_eq!(
        b,
        Err(DevError::NoSpace {
            op: IoOp::Write,
            offset: 3584,
            len: 1024
        })
    );
    assert!(matches!(
        c,
        Err(DevError::NoSpace {
            op: IoOp::WriteZeroes,
            ..
        })
    ));
    assert!(matches!(
        t,
        Err(DevError::NoSpace {
            op: IoOp::Truncate,
            ..
        })
    ));
    assert_eq!(disk.len(), 4096, "a refused request must not extend");
}

#[test]
fn error_rates_are_seeded_and_the_switch_turns_them_off() {
    let count = |seed: u64, on: bool| {
        let sim = Sim::new(seed);
        let disk = sim
            .disk(with_faults(FaultOptions {
                read_error_ppm: PPM / 4,
                write_error_ppm: PPM / 4,
                ..FaultOptions::default()
            }))
            .unwrap();
        disk.set_faults_enabled(on);
        let out = write_read(&sim, &disk, 40);
        let n = out.borrow().iter().filter(|(_, r)| r.is_err()).count();
        assert_eq!(n, disk.injected_faults().len());
        (n, sim.trace_hash())
    };
    let (a, ha) = count(5, true);
    assert!((5..=40).contains(&a), "{a} errors out of 80 at 25%");
    assert_eq!(count(5, true), (a, ha));
    assert_ne!(count(6, true).1, ha);
    assert_eq!(count(5, false).0, 0);
}

#[test]
fn a_failed_write_lands_a_prefix_or_nothing() {
    for seed in 0..30 {
        let sim = Sim::new(seed);
        let disk = sim
            .disk(with_faults(FaultOptions {
                error_at: vec![NthRequest {
                    op: IoOp::Write,
                    n: 1,
                    device: None,
                }],
                ..FaultOptions::default()
            }))
            .unwrap();
        let d = disk.clone();
        sim.spawn(async move {
            assert!(d.write(0, &[7; 4096], WriteFlags::default()).await.is_err());
        });
        sim.run().unwrap();
        let landed = match disk.injected_faults()[0].kind {
            FaultKind::Io { landed } => landed,
            k => panic!("{k:?}"),
        };
        assert_eq!(landed % 512, 0);
        let mut v = vec![0u8; 4096];
        disk.volatile().read(0, &mut v);
        assert!(v[..landed as usize].iter().all(|&b| b == 7));
        assert!(v[landed as usize..].iter().all(|&b| b == 0));
    }
}

#[test]
fn lost_and_misdirected_writes_report_success() {
    let sim = Sim::new(7);
    let disk = sim
        .disk(with_faults(FaultOptions {
            lost_write_ppm: PPM,
            ..FaultOptions::default()
        }))
        .unwrap();
    let out = write_read(&sim, &disk, 3);
    assert!(out.borrow().iter().all(|(_, r)| r.is_ok()));
    assert!(disk.volatile().to_bytes().iter().all(|&b| b == 0));
    assert_eq!(disk.injected_faults().len(), 3);
    assert!(disk
        .injected_faults()
        .iter()
        .all(|f| f.kind == FaultKind::Lost));

    let sim = Sim::new(8);
    let disk = sim
        .disk(with_faults(FaultOptions {
            misdirected_write_ppm: PPM,
            misdirect_sectors_max: 4,
            ..FaultOptions::default()
        }))
        .unwrap();
    let d = disk.clone();
    sim.spawn(async move {
        d.write(8192, &[9; 512], WriteFlags::default())
            .await
            .unwrap();
    });
    sim.run().unwrap();
    let to = match disk.injected_faults()[0].kind {
        FaultKind::Misdirected { to } => to,
        k => panic!("{k:?}"),
    };
    assert_ne!(to, 8192);
    assert!(to.abs_diff(8192) <= 4 * 512 && to % 512 == 0);
    let mut b = [0u8; 512];
    disk.volatile().read(to, &mut b);
    assert_eq!(b, [9; 512]);
    // Violation reports find it from where it landed too.
    let found = disk.writes_touching(to, 512, 4);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].landed, Some((to, 512)));
}

#[test]
fn swarm_mixes_gentle_brutal_and_off_and_round_trips_through_json() {
    let all: Vec<DiskOptions> = (0..300).map(|s| DiskOptions::swarm(s, false)).collect();
    assert_eq!(all[17], DiskOptions::swarm(17, false));
    let off = all.iter().filter(|o| !o.faults.enabled).count();
    let brutal = all
        .iter()
        .filter(|o| o.faults.write_error_ppm >= 10_000 || o.faults.read_error_ppm >= 10_000)
        .count();
    let gentle = all
        .iter()
        .filter(|o| {
            o.faults.enabled && o.faults.write_error_ppm > 0 && o.faults.write_error_ppm <= 3_000
        })
        .count();
    let no_reads = all
        .iter()
        .filter(|o| o.faults.enabled && o.faults.read_error_ppm == 0)
        .count();
    assert!(
        off > 30 && brutal > 30 && gentle > 30 && no_reads > 20,
        "{off} {brutal} {gentle} {no_reads}"
    );
    assert!(all.iter().all(|o| !o.is_harsh()));
    assert!(all.iter().any(|o| o.sector_size == 4096));
    for o in &all {
        o.validate().unwrap();
        let json = serde_json::to_string(o).unwrap();
        let back: DiskOptions = serde_json::from_str(&json).unwrap();
        assert_eq!(&back, o);
    }
    let harsh: Vec<DiskOptions> = (0..100).map(|s| DiskOptions::swarm(s, true)).collect();
    assert!(harsh.iter().any(|o| o.faults.lost_write_ppm > 0));
    assert!(harsh.iter().any(|o| o.is_harsh()) && !harsh.iter().all(|o| o.is_harsh()));
    assert!(harsh.iter().any(|o| o.crash.tear_ppm > 0));
    // Unknown fields are refused, so a typo in a saved case is loud.
    let bad = serde_json::from_str::<DiskOptions>(r#"{"sector_sise": 512}"#);
    assert!(bad.is_err());
}

#[test]
fn refused_write_zeroes_is_never_faulted_and_misdirection_extends() {
    let sim = Sim::new(9);
    let mut opts = with_faults(FaultOptions {
        write_error_ppm: PPM,
        ..FaultOptions::default()
    });
    opts.support.write_zeroes = false;
    let disk = sim.disk(opts).unwrap();
    let d = disk.clone();
    let r = sim
        .block_on(async move {
            let flags = ZeroFlags {
                no_fallback: true,
                ..ZeroFlags::default()
            };
            d.write_zeroes(0, 512, flags).await
        })
        .unwrap();
    assert!(r.unwrap_err().is_not_supported());
    assert!(disk.injected_faults().is_empty());

    let disk = sim
        .disk(with_faults(FaultOptions {
            misdirected_write_ppm: PPM,
            misdirect_sectors_max: 1,
            ..FaultOptions::default()
        }))
        .unwrap();
    let d = disk.clone();
    sim.block_on(async move {
        // Sector 0 can only be misdirected forwards.
        d.write(0, &[1; 512], WriteFlags::default()).await.unwrap();
    })
    .unwrap();
    assert_eq!(disk.len(), 1024, "the device grew to cover where it landed");
}

/// A disk that ignores flushes (`ignores_flush`, not under the master
/// switch): a flush and a FUA write succeed and make nothing durable, so
/// a crash after them may lose both; the same requests on a sound disk
/// are durable. The write log's replay (`crash_point_at`) agrees.
#[test]
fn a_disk_that_ignores_flush_makes_nothing_durable() {
    for ignores in [false, true] {
        let sim = Sim::new(4);
        let mut o = DiskOptions::default();
        o.faults.ignores_flush = ignores;
        let disk = sim.disk(o).unwrap();
        let d = disk.clone();
        sim.spawn(async move {
            d.write(0, &[1; 4096], WriteFlags::default()).await.unwrap();
            d.flush().await.unwrap();
            d.write(4096, &[2; 512], WriteFlags { fua: true })
                .await
                .unwrap();
        });
        sim.run().unwrap();
        let durable = disk.durable();
        let mut b = [0u8; 2];
        durable.read(0, &mut b[..1]);
        durable.read(4096, &mut b[1..]);
        let states: Vec<_> = disk
            .crash_states_by_write(16)
            .unwrap()
            .map(|s| s.content)
            .collect();
        let replayed = disk.crash_point_at(disk.event_seq()).unwrap();
        assert_eq!(replayed.durable(), &durable);
        if ignores {
            assert_eq!(b, [0, 0], "nothing is durable");
            assert_eq!(disk.pending_count(), 2);
            // The all-durable state first: a crash that loses both.
            let mut lost = [9u8; 1];
            states[0].read(0, &mut lost);
            assert_eq!(lost, [0]);
            assert_eq!(states.len(), 4);
        } else {
            assert_eq!(b, [1, 2]);
            assert_eq!(disk.pending_count(), 0);
            assert_eq!(states.len(), 1);
        }
    }
}

/// Cases on a disk that ignores flushes fail, with reads after a crash
/// that the model does not allow (data it held durable, lost): the
/// harness sees a lost write. The same seeds on a sound disk pass.
#[test]
fn cases_on_a_disk_that_ignores_flush_fail() {
    use sim::campaign::{case_for, CampaignPlan};
    use sim::runner::{run_case, Failure, RunOptions};
    let plan = |broken_disk| CampaignPlan {
        disk_ignores_flush: broken_disk,
        ..CampaignPlan::new(0..12)
    };
    let (mut failed, mut model) = (0, 0);
    for seed in 0..12 {
        let sound = run_case(&case_for(&plan(false), seed), &RunOptions::default());
        assert!(
            sound.passed(),
            "seed {seed} on a sound disk: {:?}",
            sound.failures
        );
        let case = case_for(&plan(true), seed);
        assert!(case.disk.faults.ignores_flush);
        let r = run_case(&case, &RunOptions::default());
        failed += u32::from(!r.passed());
        model += r
            .failures
            .iter()
            .filter(|f| matches!(f, Failure::Model { .. }))
            .count();
    }
    assert!(failed >= 6, "only {failed} of 12 cases failed");
    assert!(model > 0, "no model violation: no lost write seen");
}
