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
    let value = |w: &LogEntry| match &w.data {
        Some(d) => d[0],
        None => 0,
    };
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
fn four_k_sectors_move_together() {
    for seed in 0..40 {
        let (sim, disk) = crashed_disk(seed, 4096);
        let mut rng = stream(sim.seed(), Stream::Crash);
        let img = disk.crash_image(&mut rng).unwrap();
        let d = disk.durable();
        // Every 4 KiB sector is the durable one, or a value some pending
        // write could produce over it; in particular, no 4 KiB sector mixes
        // two pending writes.
        for c in &img.choices {
            let mut got = vec![0u8; 4096];
            img.content.read(c.sector * 4096, &mut got);
            let mut old = vec![0u8; 4096];
            d.read(c.sector * 4096, &mut old);
            if let Some(kept) = c.kept {
                let e = &disk.log()[kept as usize];
                let newv = e.data.as_ref().map_or(0, |d| d[0]);
                for (i, (&g, &o)) in got.iter().zip(&old).enumerate() {
                    let p = c.sector * 4096 + i as u64;
                    let inside = e.offset <= p && p < e.offset + e.len;
                    assert_eq!(g, if inside { newv } else { o }, "seed {seed} byte {p}");
                }
            } else {
                assert_eq!(got, old, "seed {seed}");
            }
        }
    }
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
