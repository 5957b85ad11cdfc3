//! The counters each optimisation switch controls, seen from both sides:
//! cancelled COW areas never reach the device (the write log of the image
//! disk proves it, through the engine's host mapping), and every counter a
//! switch is for moves when the switch is on and stays still when it is off.

use engine::dev::IoOp;
use engine::Switches;
use sim::bench::{
    backing_byte, guest_byte, run_job_with, sequential_ops, GuestOp, JobSetup, Observed, Workload,
    CLUSTER_SIZE as C,
};
use sim::disk::LatencyOptions;

fn setup(workload: Workload, size: u64, switches: Switches) -> JobSetup {
    JobSetup {
        workload,
        size,
        switches,
        // Growing the file ahead (zero_cow's second part) zeroes the new
        // clusters before they are handed out; it is not COW, and would
        // land on the clusters these tests inspect. sim/tests/grow_ahead.rs
        // covers it.
        grow_ahead: 0,
        latency: LatencyOptions::ssd(),
        log: true,
    }
}

fn run(workload: Workload, size: u64, switches: Switches, ops: Vec<GuestOp>) -> Observed {
    run_job_with(&setup(workload, size, switches), ops).expect("job runs")
}

fn off(s: Switches, name: &str) -> Switches {
    s.with(name, false).expect("known switch")
}

fn w(offset: u64, len: u64) -> GuestOp {
    GuestOp::Write { offset, len }
}

/// Where guest offset `guest` lives on the image disk.
fn host(o: &Observed, guest: u64) -> u64 {
    let img = o.image.clone();
    o.sim
        .block_on(async move { img.host_offset(guest).await })
        .expect("simulation runs")
        .expect("host_offset")
        .unwrap_or_else(|| panic!("guest {guest:#x} is not mapped"))
}

/// Device writes (of any kind) whose payload landed on `[start, start +
/// len)`, as (bytes landed there, write_zeroes among them).
fn landed(o: &Observed, start: u64, len: u64) -> (u64, usize) {
    let mut bytes = 0;
    let mut zeroes = 0;
    for e in o.disk.log().iter().filter(|e| e.is_write()) {
        if let Some((at, n)) = e.landed {
            let lo = at.max(start);
            let hi = (at + n).min(start + len);
            if lo < hi {
                bytes += hi - lo;
                zeroes += usize::from(e.op == IoOp::WriteZeroes);
            }
        }
    }
    (bytes, zeroes)
}

/// What the guest must read back after `ops`, byte by byte.
fn model(workload: Workload, size: u64, ops: &[GuestOp]) -> Vec<u8> {
    let mut m: Vec<u8> = (0..size)
        .map(|o| {
            if workload.has_backing() {
                backing_byte(o)
            } else {
                0
            }
        })
        .collect();
    for (id, op) in ops.iter().enumerate() {
        if let GuestOp::Write { offset, len } = *op {
            for o in offset..offset + len {
                m[o as usize] = guest_byte(id as u64, o);
            }
        }
    }
    m
}

fn read_all(o: &Observed, size: u64) -> Vec<u8> {
    let img = o.image.clone();
    o.sim
        .block_on(async move {
            let mut buf = vec![0u8; size as usize];
            img.read(0, &mut buf).await.map(|_| buf)
        })
        .expect("simulation runs")
        .expect("read")
}

/// Unaligned writes into fresh clusters. Cluster 0: a write in the middle
/// (head and tail COW), then the head covered wholly and the tail in part.
/// Cluster 1: one small write, nothing covers its COW. Cluster 2: a whole
/// aligned cluster (no COW).
fn unaligned_ops() -> Vec<GuestOp> {
    vec![
        w(4096, 8192),
        w(0, 4096),
        w(12288, 20480),
        w(C + 1536, 1024),
        w(2 * C, C),
        GuestOp::Flush,
    ]
}

const SMALL: u64 = 1 << 20;

#[test]
fn sequential_cancelled_cow_never_reaches_the_device() {
    for wl in Workload::ALL {
        let ops: Vec<GuestOp> = sequential_ops(SMALL).collect();
        let on = run(wl, SMALL, Switches::ALL_ON, ops.clone());
        assert!(on.engine.cow_created > 0);
        assert_eq!(
            on.engine.cow_cancelled_whole + on.engine.cow_cancelled_partial,
            on.engine.cow_created,
            "{}",
            wl.name()
        );
        assert_eq!(on.engine.cow_performed, 0);
        assert_eq!(on.row.backing_bytes_read, 0, "{}", wl.name());
        for c in 0..SMALL / C {
            let h = host(&on, c * C);
            // Only the guest's own 4 KiB writes: each byte once, no zeroing.
            assert_eq!(landed(&on, h, C), (C, 0), "{} cluster {c}", wl.name());
        }
        assert_eq!(read_all(&on, SMALL), model(wl, SMALL, &ops));

        // The same check sees the copies when the COW is not delayed.
        let dc = run(wl, SMALL, off(Switches::ALL_ON, "delayed_cow"), ops.clone());
        assert_eq!(dc.engine.cow_cancelled_whole, 0);
        for c in 0..SMALL / C {
            let h = host(&dc, c * C);
            assert!(
                landed(&dc, h + 4096, C - 4096).0 > C - 4096,
                "{}",
                wl.name()
            );
        }
        assert_eq!(read_all(&dc, SMALL), model(wl, SMALL, &ops));
    }
}

#[test]
fn unaligned_cancelled_cow_never_reaches_the_device() {
    for wl in Workload::ALL {
        let ops = unaligned_ops();
        let on = run(wl, SMALL, Switches::ALL_ON, ops.clone());
        let e = on.engine;
        assert_eq!(e.cow_created, 4, "{}: {e:?}", wl.name());
        assert!(e.cow_cancelled_whole >= 1, "{}: {e:?}", wl.name());
        assert!(e.cow_cancelled_partial >= 1, "{}: {e:?}", wl.name());
        assert!(e.cow_performed >= 2, "{}: {e:?}", wl.name());
        let h0 = host(&on, 0);
        // The head [0, 4K) was cancelled wholly, the tail's [12K, 32K) in part:
        // only the guest writes that covered them landed there.
        assert_eq!(landed(&on, h0, 4096), (4096, 0), "{}", wl.name());
        assert_eq!(landed(&on, h0 + 12288, 20480), (20480, 0), "{}", wl.name());
        // The rest of the tail was copied (or zeroed) once.
        assert!(landed(&on, h0 + 32768, C - 32768).0 >= C - 32768);
        assert_eq!(
            read_all(&on, SMALL),
            model(wl, SMALL, &ops),
            "{}",
            wl.name()
        );

        let dc = run(wl, SMALL, off(Switches::ALL_ON, "delayed_cow"), ops.clone());
        let h0 = host(&dc, 0);
        assert!(landed(&dc, h0, 4096).0 > 4096, "{}", wl.name());
        assert_eq!(
            read_all(&dc, SMALL),
            model(wl, SMALL, &ops),
            "{}",
            wl.name()
        );
    }
}

#[test]
fn delayed_cow_counters_move_only_when_on() {
    for wl in Workload::ALL {
        let seq: Vec<GuestOp> = sequential_ops(SMALL).collect();
        for ops in [seq, unaligned_ops()] {
            let on = run(wl, SMALL, Switches::ALL_ON, ops.clone()).engine;
            assert!(on.cow_cancelled_whole > 0, "{}: {on:?}", wl.name());
            let dc = run(wl, SMALL, off(Switches::ALL_ON, "delayed_cow"), ops).engine;
            assert_eq!(dc.cow_cancelled_whole, 0, "{}", wl.name());
            assert_eq!(dc.cow_cancelled_partial, 0, "{}", wl.name());
            assert_eq!(dc.alloc_joins, 0, "{}", wl.name());
            assert_eq!(dc.cow_performed, dc.cow_created, "{}", wl.name());
        }
        let seq = run(wl, SMALL, Switches::ALL_ON, sequential_ops(SMALL).collect()).engine;
        assert!(seq.alloc_joins > 0, "{}: {seq:?}", wl.name());
        let un = run(wl, SMALL, Switches::ALL_ON, unaligned_ops()).engine;
        assert!(un.cow_cancelled_partial > 0, "{}: {un:?}", wl.name());
    }
}

#[test]
fn zero_cow_counts_zeroing_only_when_on() {
    // COW that is performed (delayed_cow off) over zeroes (no backing).
    let base = off(Switches::ALL_ON, "delayed_cow");
    for ops in [unaligned_ops(), sequential_ops(SMALL).collect()] {
        let on = run(Workload::Seq4k, SMALL, base, ops.clone());
        assert!(on.engine.zeroing_requests > 0, "{:?}", on.engine);
        assert!(on.device.write_zeroes > 0);
        let zoff = run(Workload::Seq4k, SMALL, off(base, "zero_cow"), ops.clone());
        assert_eq!(zoff.engine.zeroing_requests, 0);
        assert_eq!(zoff.device.write_zeroes, 0);
        assert!(zoff.device.write_bytes > on.device.write_bytes);
        assert_eq!(read_all(&zoff, SMALL), read_all(&on, SMALL));
    }
    // Over backing data there is nothing to zero.
    let b = run(Workload::Seq4kBacking, SMALL, base, unaligned_ops());
    assert_eq!(b.engine.zeroing_requests, 0);
}

#[test]
fn merge_cow_saves_requests_on_unaligned_writes() {
    // One 4 KiB write in the middle of each of eight fresh clusters: head
    // COW, data and tail COW, copied (zero_cow off, delayed_cow off).
    let ops: Vec<GuestOp> = (0..8)
        .map(|i| w(i * C + 8192, 4096))
        .chain([GuestOp::Flush])
        .collect();
    let base = Switches::ALL_ON
        .with("delayed_cow", false)
        .and_then(|s| s.with("zero_cow", false))
        .unwrap();
    for wl in Workload::ALL {
        let on = run(wl, SMALL, base, ops.clone());
        let moff = run(wl, SMALL, off(base, "merge_cow"), ops.clone());
        assert_eq!(on.engine.cow_performed, 16, "{}", wl.name());
        assert_eq!(moff.engine.cow_performed, 16, "{}", wl.name());
        assert!(
            moff.device.writes >= on.device.writes + 16,
            "{}: merged {} vs unmerged {}",
            wl.name(),
            on.device.writes,
            moff.device.writes
        );
        assert_eq!(on.device.write_bytes, moff.device.write_bytes);
        assert_eq!(read_all(&on, SMALL), model(wl, SMALL, &ops));
        assert_eq!(read_all(&moff, SMALL), model(wl, SMALL, &ops));
    }
}

#[test]
fn delayed_metadata_writes_tables_only_at_flush() {
    // Sequential writes with a guest flush after every fourth cluster.
    let ops: Vec<GuestOp> = (0..SMALL / 4096)
        .flat_map(|i| {
            let flush = (i + 1) % (4 * C / 4096) == 0;
            std::iter::once(w(i * 4096, 4096)).chain(flush.then_some(GuestOp::Flush))
        })
        .collect();
    for wl in Workload::ALL {
        let on = run(wl, SMALL, Switches::ALL_ON, ops.clone());
        let flushes = on.engine.guest_flushes;
        assert_eq!(flushes, SMALL / C / 4);
        assert!(on.device.flushes <= 3 * flushes, "{:?}", on.device);
        assert!(on.engine.l2_writebacks <= flushes, "{:?}", on.engine);
        assert!(on.engine.refcount_writebacks <= flushes, "{:?}", on.engine);
        let dm = run(
            wl,
            SMALL,
            off(Switches::ALL_ON, "delayed_metadata"),
            ops.clone(),
        );
        let clusters = dm.engine.clusters_allocated;
        assert_eq!(clusters, SMALL / C);
        assert!(dm.device.flushes >= clusters + flushes, "{:?}", dm.device);
        assert!(dm.engine.l2_writebacks >= clusters, "{:?}", dm.engine);
        assert!(dm.engine.refcount_writebacks >= clusters, "{:?}", dm.engine);
    }
}

#[test]
fn multi_cluster_one_request_per_contiguous_run() {
    // Four aligned 256 KiB writes (four clusters each), then reads of them.
    let size = SMALL;
    let ops: Vec<GuestOp> = (0..4)
        .map(|i| w(i * 4 * C, 4 * C))
        .chain([GuestOp::Flush])
        .collect();
    for wl in Workload::ALL {
        let on = run(wl, size, Switches::ALL_ON, ops.clone());
        let mc = run(
            wl,
            size,
            off(Switches::ALL_ON, "multi_cluster"),
            ops.clone(),
        );
        for (o, per_run) in [(&on, 1), (&mc, 4)] {
            for run_start in (0..4).map(|i| i * 4 * C) {
                // The device writes that put the run's four clusters down.
                let mut ids = std::collections::BTreeSet::new();
                for k in 0..4 {
                    let h = host(o, run_start + k * C);
                    ids.extend(
                        o.disk
                            .log()
                            .iter()
                            .filter(|e| {
                                matches!(e.op, IoOp::Write | IoOp::WriteZeroes) && e.touches(h, C)
                            })
                            .map(|e| e.id),
                    );
                }
                assert_eq!(ids.len(), per_run, "{}: run at {run_start:#x}", wl.name());
            }
        }
        let expect = model(wl, size, &ops);
        for (o, per_run) in [(&on, 1), (&mc, 4)] {
            for run_start in (0..4).map(|i| i * 4 * C) {
                let before = o.disk.counters().reads;
                let img = o.image.clone();
                let data = o
                    .sim
                    .block_on(async move {
                        let mut buf = vec![0u8; (4 * C) as usize];
                        img.read(run_start, &mut buf).await.map(|_| buf)
                    })
                    .expect("simulation runs")
                    .expect("read");
                let reads = o.disk.counters().reads - before;
                assert_eq!(reads, per_run, "{}: read at {run_start:#x}", wl.name());
                let at = run_start as usize;
                assert!(data == expect[at..at + (4 * C) as usize], "{}", wl.name());
            }
        }
    }
}
