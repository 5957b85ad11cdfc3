//! Crash images: every sector of every sampled or enumerated crash state
//! holds a value the crash rule allows, computed here independently from the
//! write log; enumeration is complete; reopening serves the image; tearing
//! and the crash-tracking switch behave as documented.

use std::collections::{BTreeMap, BTreeSet};

use engine::dev::{BlockDev, IoOp, WriteFlags, ZeroFlags};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::disk::{CrashError, CrashMode, DiskOptions, LogEntry, SimDisk, TearFill, PPM};
use sim::exec::Sim;
use sim::rng::{stream, Stream};

const SECTOR: u64 = 512;
const SECTORS: u64 = 12;

/// Run a random concurrent workload of sector-aligned writes (some FUA,
/// some write_zeroes) and flushes over a few sectors, and stop it at a
/// random moment, leaving requests in flight.
fn crashed_disk(seed: u64, sector_size: u32) -> (Sim, SimDisk) {
    let sim = Sim::new(seed);
    let opts = DiskOptions {
        sector_size,
        ..DiskOptions::default()
    };
    let disk = sim.disk(opts).unwrap();
    let mut r = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let mut tag = 0u8;
    for _ in 0..r.gen_range(1..=4) {
        let mut ops = Vec::new();
        for _ in 0..r.gen_range(1..=6) {
            tag += 1;
            let off = r.gen_range(0..SECTORS) * SECTOR;
            let n = r.gen_range(1..=3u64).min(SECTORS - off / SECTOR);
            let kind = r.gen_range(0..10);
            ops.push((kind, off, n, tag, r.gen_bool(0.2)));
        }
        let d = disk.clone();
        sim.spawn(async move {
            for (kind, off, n, tag, fua) in ops {
                match kind {
                    0..=1 => d.flush().await.unwrap(),
                    2 => d
                        .write_zeroes(
                            off,
                            n * SECTOR,
                            ZeroFlags {
                                fua,
                                ..ZeroFlags::default()
                            },
                        )
                        .await
                        .unwrap(),
                    _ => d
                        .write(off, &vec![tag; (n * SECTOR) as usize], WriteFlags { fua })
                        .await
                        .unwrap(),
                }
            }
        });
    }
    let stop = r.gen_range(0..400_000);
    sim.run_until_time(stop).unwrap();
    sim.abort_all();
    (sim, disk)
}

/// The values (one byte per 512-byte sector suffices: writes fill whole
/// sectors with their tag) each sector may hold after a crash, from the log
/// alone: the newest durable write's value (or zero) and the value of every
/// write not durable that completed after it or is still in flight.
fn allowed(log: &[LogEntry]) -> BTreeMap<u64, BTreeSet<u8>> {
    let flushes: Vec<u64> = log
        .iter()
        .filter(|e| e.op == IoOp::Flush && e.result == Some(Ok(())))
        .map(|e| e.issue_seq)
        .collect();
    let writes: Vec<&LogEntry> = log
        .iter()
        .filter(|e| matches!(e.op, IoOp::Write | IoOp::WriteZeroes))
        .collect();
    let durable = |w: &LogEntry| match w.complete_seq {
        Some(c) => w.fua || flushes.iter().any(|&f| f > c),
        None => false,
    };
    let value = |w: &LogEntry| w.data().map_or(0, |d| d[0]);
    let mut out = BTreeMap::new();
    for s in 0..SECTORS {
        let (lo, hi) = (s * SECTOR, (s + 1) * SECTOR);
        let touching: Vec<&&LogEntry> = writes
            .iter()
            .filter(|w| w.offset < hi && lo < w.offset + w.len)
            .collect();
        let base = touching
            .iter()
            .filter(|w| durable(w))
            .max_by_key(|w| w.complete_seq);
        let base_seq = base.and_then(|w| w.complete_seq).unwrap_or(0);
        let mut set = BTreeSet::from([base.map_or(0, |w| value(w))]);
        for w in &touching {
            if !durable(w) && w.complete_seq.is_none_or(|c| c > base_seq) {
                set.insert(value(w));
            }
        }
        out.insert(s, set);
    }
    out
}

fn sector_values(content: &sim::disk::SparseStore) -> Vec<u8> {
    (0..SECTORS)
        .map(|s| {
            let mut buf = vec![0u8; SECTOR as usize];
            content.read(s * SECTOR, &mut buf);
            assert!(
                buf.iter().all(|&b| b == buf[0]),
                "sector {s} mixes values: {buf:?}"
            );
            buf[0]
        })
        .collect()
}

#[test]
fn sampled_crash_sectors_are_always_allowed() {
    let mut modes = BTreeSet::new();
    let mut kept_new = 0;
    for seed in 0..150 {
        let (sim, disk) = crashed_disk(seed, 512);
        let allowed = allowed(&disk.log());
        let mut rng = stream(sim.seed(), Stream::Crash);
        for _ in 0..8 {
            let img = disk.crash_image(&mut rng).unwrap();
            modes.insert(format!("{:?}", img.mode));
            for (s, v) in sector_values(&img.content).into_iter().enumerate() {
                let ok = &allowed[&(s as u64)];
                assert!(
                    ok.contains(&v),
                    "seed {seed}: sector {s} holds {v}, allowed {ok:?}; choice {:?}",
                    img.choice(s as u64)
                );
            }
            kept_new += img.choices.iter().filter(|c| c.kept.is_some()).count();
        }
    }
    assert_eq!(modes.len(), 2, "both sampling modes used: {modes:?}");
    assert!(kept_new > 100, "crashes almost never keep a pending write");
}

#[test]
fn enumeration_yields_exactly_the_allowed_states() {
    let mut checked = 0;
    for seed in 0..200 {
        let (_sim, disk) = crashed_disk(seed, 512);
        let states = disk.crash_states(5_000).unwrap();
        if states.is_truncated() {
            continue;
        }
        let allowed = allowed(&disk.log());
        let total = states.total().unwrap();
        let mut seen = BTreeSet::new();
        let mut first = true;
        for img in states {
            assert_eq!(img.mode, CrashMode::Enumerated);
            let values = sector_values(&img.content);
            if first {
                assert_eq!(
                    img.content,
                    disk.durable(),
                    "the first state is the durable one"
                );
                first = false;
            }
            for (s, v) in values.iter().enumerate() {
                assert!(allowed[&(s as u64)].contains(v), "seed {seed} sector {s}");
            }
            seen.insert(values);
        }
        // Complete: every combination of allowed values shows up.
        let product: usize = allowed.values().map(|a| a.len()).product();
        assert_eq!(seen.len(), product, "seed {seed}: {total} states");
        checked += 1;
    }
    assert!(checked > 100, "too few small cases: {checked}");
}

#[test]
fn crash_after_flush_keeps_everything() {
    let sim = Sim::new(1);
    let disk = sim.disk(DiskOptions::default()).unwrap();
    let d = disk.clone();
    sim.spawn(async move {
        for i in 0..8u64 {
            d.write(i * 512, &[i as u8 + 1; 512], WriteFlags::default())
                .await
                .unwrap();
        }
        d.flush().await.unwrap();
    });
    sim.run().unwrap();
    let mut rng = stream(1, Stream::Crash);
    for _ in 0..5 {
        let img = disk.crash_image(&mut rng).unwrap();
        assert!(img.choices.is_empty());
        assert_eq!(img.content, disk.volatile());
    }
    assert_eq!(disk.crash_states(10).unwrap().count(), 1);
}

#[test]
fn reopened_disk_serves_the_crash_image() {
    let (sim, disk) = crashed_disk(9, 512);
    let mut rng = stream(9, Stream::Crash);
    let img = disk.crash_image(&mut rng).unwrap();
    let reopened = disk.reopen(img.content.clone());
    assert_eq!(reopened.options(), disk.options());
    assert_eq!(reopened.len(), img.content.len());
    let r = reopened.clone();
    let expect = img.content.to_bytes();
    let h = sim.spawn(async move {
        let mut buf = vec![0u8; expect.len() + 100];
        r.read(0, &mut buf).await.unwrap();
        buf[..expect.len()] == expect[..] && buf[expect.len()..].iter().all(|&b| b == 0)
    });
    sim.run().unwrap();
    assert_eq!(h.take(), Some(true));
    assert_eq!(reopened.pending_count(), 0);
    assert_eq!(reopened.durable(), img.content);
}

#[test]
fn four_k_sectors_take_only_what_landed_writes_put_there() {
    for seed in 0..40 {
        let (sim, disk) = crashed_disk(seed, 4096);
        let mut rng = stream(sim.seed(), Stream::Crash);
        let img = disk.crash_image(&mut rng).unwrap();
        let d = disk.durable();
        let log = disk.log();
        for c in &img.choices {
            assert_eq!(c.kept, c.landed.last().copied());
            assert!(c.landed.iter().all(|w| c.candidates.contains(w)));
            let mut got = vec![0u8; 4096];
            img.content.read(c.sector * 4096, &mut got);
            let mut old = vec![0u8; 4096];
            d.read(c.sector * 4096, &mut old);
            // Every byte is durable, or put there by a write that landed.
            for (i, (&g, &o)) in got.iter().zip(&old).enumerate() {
                let p = c.sector * 4096 + i as u64;
                let ok = g == o
                    || c.landed.iter().any(|&w| {
                        let e = &log[w as usize];
                        let v = e.data().map_or(0, |d| d[0]);
                        e.offset <= p && p < e.offset + e.len && v == g
                    });
                assert!(
                    ok,
                    "seed {seed} byte {p}: {g}, durable {o}, landed {:?}",
                    c.landed
                );
            }
        }
    }
}

#[test]
fn partial_sector_writes_accumulate_in_completion_order() {
    let sim = Sim::new(12);
    let opts = DiskOptions {
        sector_size: 4096,
        ..DiskOptions::default()
    };
    let disk = sim.disk(opts).unwrap();
    let d = disk.clone();
    sim.block_on(async move {
        d.write(0, &[1; 512], WriteFlags::default()).await.unwrap();
        d.write(512, &[2; 512], WriteFlags::default())
            .await
            .unwrap();
    })
    .unwrap();
    // A state reaches only as far as the writes that landed in it.
    let a = vec![1u8; 512];
    let ab = [vec![1u8; 512], vec![2; 512]].concat();
    let b = [vec![0u8; 512], vec![2; 512]].concat();
    // Sector by sector: as durable, once the first write landed, once both.
    let states: Vec<Vec<u8>> = disk
        .crash_states(10)
        .unwrap()
        .map(|i| i.content.to_bytes())
        .collect();
    assert_eq!(states, vec![vec![], a.clone(), ab.clone()]);
    // Write by write: any subset.
    let mut states: Vec<Vec<u8>> = disk
        .crash_states_by_write(10)
        .unwrap()
        .map(|i| i.content.to_bytes())
        .collect();
    states.sort();
    let mut expect = vec![vec![], a, ab, b];
    expect.sort();
    assert_eq!(states, expect);
}

#[test]
fn torn_sectors_keep_a_new_prefix() {
    for fill in [TearFill::Old, TearFill::Garbage] {
        let sim = Sim::new(2);
        let mut opts = DiskOptions::default();
        opts.crash.tear_ppm = PPM;
        opts.crash.tear_fill = fill;
        let disk = sim.disk(opts).unwrap();
        let d = disk.clone();
        sim.spawn(async move {
            d.write(0, &[1; 2048], WriteFlags::default()).await.unwrap();
            d.flush().await.unwrap();
            d.write(0, &[2; 2048], WriteFlags::default()).await.unwrap();
        });
        sim.run().unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut torn = 0;
        for _ in 0..10 {
            let img = disk.crash_image(&mut rng).unwrap();
            let sum = img.summary();
            assert_eq!((sum.touched, sum.changed), (4, sum.torn), "{sum}");
            for c in &img.choices {
                let mut got = vec![0u8; 512];
                img.content.read(c.sector * 512, &mut got);
                match (c.kept, c.torn) {
                    (None, _) => assert!(got.iter().all(|&b| b == 1)),
                    (Some(_), None) => panic!("tear_ppm = 1e6 but a sector was not torn"),
                    (Some(_), Some(cut)) => {
                        torn += 1;
                        let cut = cut as usize;
                        assert!(got[..cut].iter().all(|&b| b == 2));
                        if fill == TearFill::Old {
                            assert!(got[cut..].iter().all(|&b| b == 1));
                        }
                    }
                }
            }
        }
        assert!(torn > 0);
    }
}

#[test]
fn crash_needs_tracking() {
    let sim = Sim::new(0);
    let mut opts = DiskOptions::default();
    opts.crash.track = false;
    let disk = sim.disk(opts).unwrap();
    let d = disk.clone();
    sim.spawn(async move {
        d.write(0, &[1; 512], WriteFlags::default()).await.unwrap();
    });
    sim.run().unwrap();
    assert_eq!(
        disk.pending_count(),
        0,
        "untracked disks keep no pending writes"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    assert_eq!(
        disk.crash_image(&mut rng).unwrap_err(),
        CrashError::NotTracked
    );
}

#[test]
fn a_partial_sector_write_lays_over_the_durable_sector() {
    let sim = Sim::new(4);
    let disk = sim.disk(DiskOptions::default()).unwrap();
    let d = disk.clone();
    sim.spawn(async move {
        d.write(0, &[1; 1024], WriteFlags::default()).await.unwrap();
        d.flush().await.unwrap();
        d.write(100, &[2; 8], WriteFlags::default()).await.unwrap();
    });
    sim.run().unwrap();
    let states: Vec<_> = disk.crash_states(10).unwrap().collect();
    assert_eq!(states.len(), 2);
    let mut new = vec![1u8; 1024];
    new[100..108].fill(2);
    assert_eq!(states[0].content.to_bytes(), vec![1u8; 1024]);
    assert_eq!(states[1].content.to_bytes(), new);
    assert_eq!(states[1].choices[0].candidates, vec![2]);
}

#[test]
fn whole_write_enumeration_is_allowed_and_ends_at_the_volatile_view() {
    let mut checked = 0;
    for seed in 0..120 {
        let (_sim, disk) = crashed_disk(seed, 512);
        let pending = disk.pending_count() as u32;
        if pending > 10 {
            continue;
        }
        let allowed = allowed(&disk.log());
        let states: Vec<_> = disk.crash_states_by_write(1 << 12).unwrap().collect();
        assert_eq!(states.len(), 1 << pending, "seed {seed}");
        assert_eq!(states[0].content, disk.durable());
        for img in &states {
            for (s, v) in sector_values(&img.content).iter().enumerate() {
                assert!(allowed[&(s as u64)].contains(v), "seed {seed} sector {s}");
            }
        }
        let in_flight = disk
            .log()
            .iter()
            .any(|e| e.is_write() && e.completed.is_none());
        if !in_flight {
            // Every pending write landed, in completion order: what reads
            // saw before the crash.
            let all = states.last().unwrap();
            assert_eq!(sector_values(&all.content), sector_values(&disk.volatile()));
            checked += 1;
        }
    }
    assert!(checked > 10, "{checked}");
}

#[test]
fn crash_points_rebuilt_from_the_log_match_the_live_ones() {
    for seed in 0..25 {
        let sim = Sim::new(seed);
        let opts = DiskOptions {
            faults: sim::disk::FaultOptions::swarm(seed, false),
            ..DiskOptions::default()
        };
        let disk = sim.disk(opts).unwrap();
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        for t in 0..3u64 {
            let d = disk.clone();
            let ops: Vec<(u32, u64, bool)> = (0..8)
                .map(|_| (r.gen_range(0..8), r.gen_range(0..SECTORS), r.gen_bool(0.2)))
                .collect();
            sim.spawn(async move {
                for (i, (kind, s, fua)) in ops.into_iter().enumerate() {
                    let off = s * SECTOR;
                    let _ = match kind {
                        0 => d.flush().await,
                        1 => d.write_zeroes(off, SECTOR, ZeroFlags::default()).await,
                        2 => d.discard(off, 2 * SECTOR).await,
                        _ => {
                            let tag = (t * 16 + i as u64 + 1) as u8;
                            d.write(off, &[tag; 1024], WriteFlags { fua }).await
                        }
                    };
                }
            });
        }
        // Stop at several moments, keeping the live crash point of each.
        let mut live = Vec::new();
        let mut target = 0;
        loop {
            target += 5;
            let dk = disk.clone();
            let end = sim.run_until(move || dk.event_seq() >= target).unwrap();
            live.push((disk.event_seq(), disk.crash_point().unwrap()));
            if end == sim::exec::RunEnd::Finished {
                break;
            }
        }
        assert!(live.len() > 3);
        for (at, point) in live {
            let rebuilt = disk.crash_point_at(at).unwrap();
            assert_eq!(rebuilt.durable(), point.durable(), "seed {seed} at {at}");
            assert_eq!(rebuilt.pending(), point.pending(), "seed {seed} at {at}");
            let a = rebuilt.sample(&mut ChaCha8Rng::seed_from_u64(at));
            let b = point.sample(&mut ChaCha8Rng::seed_from_u64(at));
            assert_eq!(a.content, b.content, "seed {seed} at {at}");
            assert_eq!(a.choices, b.choices, "seed {seed} at {at}");
        }
        let now = disk.event_seq();
        assert_eq!(
            disk.crash_point_at(now + 1).unwrap_err(),
            CrashError::Future { at: now + 1, now }
        );
        let start = disk.crash_point_at(0).unwrap();
        assert!(start.pending().is_empty() && start.durable().is_empty());
    }
}

#[test]
fn replay_needs_every_payload() {
    let sim = Sim::new(0);
    let mut opts = DiskOptions::default();
    opts.log.data_bytes_max = 1024;
    let disk = sim.disk(opts).unwrap();
    let d = disk.clone();
    sim.block_on(async move {
        d.write(0, &[1; 1024], WriteFlags::default()).await.unwrap();
        d.write(0, &[2; 512], WriteFlags::default()).await.unwrap();
    })
    .unwrap();
    assert!(disk.crash_point_at(2).is_ok());
    assert_eq!(
        disk.crash_point_at(3).unwrap_err(),
        CrashError::LogIncomplete { request: 1 }
    );
}
