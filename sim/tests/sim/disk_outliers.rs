//! Latency outliers: requests held far longer than the rest, at rates per
//! device and per kind. A held request is an ordinary request that
//! completes late: a flush issued while it is in flight does not make it
//! durable, the bus and channels go on serving others, and turning
//! outliers on moves no other random draw.

use std::future::Future;

use engine::dev::{BlockDev, IoOp, WriteFlags};
use sim::disk::{
    DeviceRole, DiskOptions, HeldRequest, LatencyOptions, OutlierOptions, OutlierRates, SimDisk,
    SparseStore, MAX_HELD_REQUESTS, MAX_OUTLIER_FACTOR, PPM,
};
use sim::exec::Sim;

/// Fixed latencies (ns), free transfers, and `outliers`.
fn fixed(write: u64, flush: u64, outliers: OutlierOptions) -> DiskOptions {
    DiskOptions {
        latency: LatencyOptions {
            read_min: write,
            read_mean: write,
            write_min: write,
            write_mean: write,
            flush_min: flush,
            flush_mean: flush,
            seek: 0,
            bandwidth: 0,
            channels: 0,
            extend: 0,
            stroke: 0,
            stroke_span: 0,
            zeroes_journal: None,
            outliers,
        },
        ..DiskOptions::default()
    }
}

/// Every write of the image disk held `factor` times its latency.
fn writes_held(factor: u32) -> OutlierOptions {
    OutlierOptions {
        image: OutlierRates {
            write_ppm: PPM,
            ..OutlierRates::default()
        },
        factor_min: factor,
        factor_max: factor,
        ..OutlierOptions::default()
    }
}

fn block_on<T: 'static>(sim: &Sim, f: impl Future<Output = T> + 'static) -> T {
    let h = sim.spawn(f);
    sim.run().unwrap();
    h.take().expect("the task finished")
}

fn byte_at(store: &SparseStore, off: u64) -> u8 {
    let mut b = [0u8; 1];
    store.read(off, &mut b);
    b[0]
}

#[test]
fn a_held_write_outlives_a_flush_which_does_not_make_it_durable() {
    let sim = Sim::new(11);
    let disk = sim.disk(fixed(1_000, 5_000, writes_held(100))).unwrap();
    let d = disk.clone();
    let s = sim.clone();
    let (flushed_at, durable_after_flush) = block_on(&sim, async move {
        let d2 = d.clone();
        let held = s.spawn(async move { d2.write(0, &[7; 512], WriteFlags::default()).await });
        // Issued after the held write, completed long before it.
        d.flush().await.unwrap();
        let at = s.now();
        let durable = byte_at(&d.durable(), 0);
        held.await.unwrap();
        (at, durable)
    });
    assert_eq!(flushed_at, 5_000);
    assert_eq!(
        durable_after_flush, 0,
        "a flush made an in-flight write durable"
    );
    // The held write took its latency times the factor.
    assert_eq!(sim.now(), 100_000);
    assert_eq!(disk.held_requests(), 1);
    assert_eq!(byte_at(&disk.volatile(), 0), 7);
    assert_eq!(byte_at(&disk.durable(), 0), 0, "completed, not yet flushed");
    let d = disk.clone();
    block_on(&sim, async move { d.flush().await.unwrap() });
    assert_eq!(byte_at(&disk.durable(), 0), 7);
}

#[test]
fn a_held_write_may_be_kept_or_lost_by_a_crash() {
    // Crash while the held write is in flight: over seeds, crash states
    // both keep and drop it, as for any pending write.
    let mut kept = [false; 2];
    for seed in 0..32 {
        let sim = Sim::new(seed);
        let disk = sim.disk(fixed(1_000, 5_000, writes_held(1000))).unwrap();
        let d = disk.clone();
        sim.spawn(async move { d.write(0, &[3; 512], WriteFlags::default()).await });
        let d = disk.clone();
        sim.spawn(async move { d.flush().await });
        sim.run_until_time(50_000).unwrap();
        assert_eq!(disk.pending_count(), 1, "seed {seed}");
        let mut rng = sim::rng::stream(seed, sim::rng::Stream::Crash);
        let image = disk.crash_image(&mut rng).unwrap();
        kept[usize::from(byte_at(&image.content, 0) == 3)] = true;
    }
    assert_eq!(
        kept,
        [true, true],
        "crashes always or never kept the held write"
    );
}

#[test]
fn a_held_request_holds_no_channel() {
    // One channel, two writes issued at once. Each holds the channel for
    // its 1000 ns; a held one completes 9000 ns later still, but the other
    // need not wait for that.
    let last_completion = |outliers: OutlierOptions| {
        let mut o = fixed(1_000, 5_000, outliers);
        o.latency.channels = 1;
        let sim = Sim::new(4);
        let disk = sim.disk(o).unwrap();
        for i in 0..2u64 {
            let d = disk.clone();
            sim.spawn(async move { d.write(i * 512, &[1; 512], WriteFlags::default()).await });
        }
        sim.run().unwrap();
        sim.now()
    };
    assert_eq!(last_completion(OutlierOptions::default()), 2_000);
    // Held in the channel, the second would end at 20000.
    assert_eq!(last_completion(writes_held(10)), 11_000);
}

/// Completion times of a fixed sequence of writes and flushes.
fn completions(outliers: OutlierOptions) -> Vec<u64> {
    let sim = Sim::new(21);
    let mut o = DiskOptions::default();
    o.latency.outliers = outliers;
    let disk = sim.disk(o).unwrap();
    let s = sim.clone();
    block_on(&sim, async move {
        let mut t = Vec::new();
        for i in 0..50u64 {
            disk.write(i * 512, &[1; 512], WriteFlags::default())
                .await
                .unwrap();
            t.push(s.now());
        }
        t
    })
}

#[test]
fn outliers_of_other_kinds_or_devices_move_no_draw() {
    let none = completions(OutlierOptions::default());
    // Flushes and reads held, another device's writes held: these writes
    // are timed exactly as without outliers.
    let others = OutlierOptions {
        image: OutlierRates {
            read_ppm: PPM,
            flush_ppm: PPM,
            ..OutlierRates::default()
        },
        data_file: OutlierRates {
            write_ppm: PPM,
            ..OutlierRates::default()
        },
        ..OutlierOptions::default()
    };
    assert_eq!(completions(others), none);
    // Holding a tenth of the writes changes their times.
    let some = OutlierOptions {
        image: OutlierRates {
            write_ppm: PPM / 10,
            ..OutlierRates::default()
        },
        ..OutlierOptions::default()
    };
    assert_ne!(completions(some.clone()), none);
    assert_eq!(completions(some.clone()), completions(some));
}

#[test]
fn each_device_draws_at_its_own_rates() {
    let sim = Sim::new(5);
    let o = fixed(1_000, 1_000, writes_held(10));
    let image = sim.disk(o.clone()).unwrap();
    let data =
        SimDisk::with_role(&sim, o.clone(), SparseStore::new(), DeviceRole::DataFile).unwrap();
    let backing = SimDisk::with_role(&sim, o, SparseStore::new(), DeviceRole::Backing).unwrap();
    for d in [&image, &data, &backing] {
        let d = d.clone();
        block_on(&sim, async move {
            d.write(0, &[1; 512], WriteFlags::default()).await.unwrap()
        });
    }
    assert_eq!(
        [
            image.held_requests(),
            data.held_requests(),
            backing.held_requests()
        ],
        [1, 0, 0]
    );
    // A reopened disk (after a crash) keeps its role.
    let again = data.reopen(SparseStore::new());
    block_on(&sim, async move {
        again
            .write(0, &[1; 512], WriteFlags::default())
            .await
            .unwrap();
        assert_eq!(again.held_requests(), 0);
    });
}

#[test]
fn worst_request_counts_the_largest_factor() {
    let plain = LatencyOptions::ssd();
    let mut held = plain.clone();
    held.outliers = writes_held(MAX_OUTLIER_FACTOR);
    let bytes = 1 << 20;
    let slowest_flush = 2 * plain.flush_mean - plain.flush_min;
    assert!(plain.worst_request(bytes) < slowest_flush * 2);
    assert!(held.worst_request(bytes) >= slowest_flush * u64::from(MAX_OUTLIER_FACTOR));
}

#[test]
fn outlier_bounds_are_checked_with_the_field_named() {
    let bad = |f: &dyn Fn(&mut OutlierOptions)| {
        let mut o = DiskOptions::default();
        f(&mut o.latency.outliers);
        o.validate().unwrap_err().to_string()
    };
    let e = bad(&|o| o.factor_max = MAX_OUTLIER_FACTOR + 1);
    assert!(e.contains("factor_max"), "{e}");
    let e = bad(&|o| o.factor_max = 0);
    assert!(e.contains("factor_max"), "{e}");
    let e = bad(&|o| o.factor_min = 0);
    assert!(e.contains("factor_min"), "{e}");
    let e = bad(&|o| {
        o.factor_min = 20;
        o.factor_max = 10;
    });
    assert!(e.contains("factor_min"), "{e}");
    let e = bad(&|o| o.backing.discard_ppm = PPM + 1);
    assert!(e.contains("discard_ppm"), "{e}");
    DiskOptions::default().validate().unwrap();
}

#[test]
fn swarm_outliers_mix_none_rare_and_common() {
    let all: Vec<OutlierOptions> = (0..200).map(OutlierOptions::swarm).collect();
    assert_eq!(all[7], OutlierOptions::swarm(7));
    let none = all.iter().filter(|o| !o.any()).count();
    assert!((50..150).contains(&none), "{none} of 200 without outliers");
    let rates: Vec<u32> = all
        .iter()
        .flat_map(|o| [o.image.write_ppm, o.data_file.read_ppm, o.backing.read_ppm])
        .collect();
    assert!(rates.iter().any(|&r| (1..=5_000).contains(&r)));
    assert!(rates.iter().any(|&r| r >= 10_000));
    for o in &all {
        let mut d = DiskOptions::default();
        d.latency.outliers = o.clone();
        d.validate().unwrap();
    }
}

#[test]
fn a_request_held_by_rank_is_held_without_a_draw_and_listed() {
    // The third write of the disk, held 50 times its latency; no rate.
    let rank = |n| OutlierOptions {
        held: vec![HeldRequest {
            device: 0,
            op: IoOp::Write,
            n,
            factor: 50,
        }],
        ..OutlierOptions::default()
    };
    let none = completions(OutlierOptions::default());
    let held = completions(rank(3));
    // The writes are awaited one by one: the third ends 49 latencies late
    // and every later one with it; the first two are untouched.
    assert_eq!(held[..2], none[..2]);
    assert!(held[2] > none[2], "{held:?}");
    assert_eq!(held[3] - held[2], none[3] - none[2]);
    // Another disk's rank, or a rank past the last request: nothing held.
    let mut other = rank(3);
    other.held[0].device = 1;
    assert_eq!(completions(other), none);
    assert_eq!(completions(rank(51)), none);
    // What a disk held by rate it lists by rank, and held so it runs alike.
    let sim = Sim::new(3);
    let disk = sim.disk(fixed(1_000, 1_000, writes_held(20))).unwrap();
    let d = disk.clone();
    block_on(&sim, async move {
        for i in 0..4u64 {
            d.write(i * 512, &[1; 512], WriteFlags::default())
                .await
                .unwrap();
        }
    });
    let list = disk.held_list();
    assert_eq!(list.len(), 4);
    assert_eq!(
        list.iter()
            .map(|h| (h.op, h.n, h.factor))
            .collect::<Vec<_>>(),
        (1..=4).map(|n| (IoOp::Write, n, 20)).collect::<Vec<_>>()
    );
}

#[test]
fn requests_held_by_rank_are_validated() {
    let bad = |h: HeldRequest| {
        let mut o = DiskOptions::default();
        o.latency.outliers.held = vec![h];
        o.validate().unwrap_err().to_string()
    };
    let ok = HeldRequest {
        device: 0,
        op: IoOp::Read,
        n: 1,
        factor: 10,
    };
    let e = bad(HeldRequest { n: 0, ..ok });
    assert!(e.contains("held") && e.contains("count from 1"), "{e}");
    let e = bad(HeldRequest {
        factor: MAX_OUTLIER_FACTOR + 1,
        ..ok
    });
    assert!(e.contains("factor"), "{e}");
    let e = bad(HeldRequest {
        op: IoOp::Truncate,
        ..ok
    });
    assert!(e.contains("truncate"), "{e}");
    let mut o = DiskOptions::default();
    o.latency.outliers.held = vec![ok; MAX_HELD_REQUESTS + 1];
    let e = o.validate().unwrap_err().to_string();
    assert!(e.contains("more than"), "{e}");
}
