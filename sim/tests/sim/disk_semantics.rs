//! The simulated disk's everyday behaviour: flush and FUA durability,
//! reordered completions, write_zeroes and discard support, counters, the
//! write log and the determinism of its trace.

use std::future::Future;

use engine::dev::{BlockDev, DevError, IoOp, WriteFlags, ZeroFlags};
use sim::disk::{DiscardEffect, DiskOptions, LatencyOptions, SimDisk};
use sim::exec::Sim;

/// Options with fixed latencies (ns) and free transfers, so tests can tell
/// exactly when each request completes.
fn fixed(read: u64, write: u64, flush: u64) -> DiskOptions {
    DiskOptions {
        latency: LatencyOptions {
            read_min: read,
            read_mean: read,
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
            outliers: Default::default(),
        },
        ..DiskOptions::default()
    }
}

fn block_on<T: 'static>(sim: &Sim, f: impl Future<Output = T> + 'static) -> T {
    let h = sim.spawn(f);
    sim.run().unwrap();
    h.take().expect("the task finished")
}

fn byte_at(store: &sim::disk::SparseStore, off: u64) -> u8 {
    let mut b = [0u8; 1];
    store.read(off, &mut b);
    b[0]
}

#[test]
fn flush_covers_only_writes_completed_before_it_was_issued() {
    let sim = Sim::new(1);
    let disk = sim.disk(fixed(100, 1_000, 5_000)).unwrap();
    let d = disk.clone();
    let s = sim.clone();
    block_on(&sim, async move {
        d.write(0, &[1; 512], WriteFlags::default()).await.unwrap();
        // At t=1000: a write that completes at 2000 and a flush issued now
        // that completes at 6000. The write completes after the flush was
        // issued, so the flush does not make it durable.
        let d2 = d.clone();
        let late = s.spawn(async move { d2.write(512, &[2; 512], WriteFlags::default()).await });
        d.flush().await.unwrap();
        late.await.unwrap();
        assert_eq!(s.now(), 6_000);
    });
    let durable = disk.durable();
    let volatile = disk.volatile();
    assert_eq!(byte_at(&durable, 0), 1);
    assert_eq!(
        byte_at(&durable, 512),
        0,
        "a later completion became durable"
    );
    assert_eq!(byte_at(&volatile, 512), 2);
    assert_eq!(disk.pending_count(), 1);
    // A second flush takes it.
    let d = disk.clone();
    block_on(&sim, async move { d.flush().await.unwrap() });
    assert_eq!(byte_at(&disk.durable(), 512), 2);
    assert_eq!(disk.pending_count(), 0);
    // The log orders the events exactly, even where times tie.
    let log = disk.log();
    let w2 = log.iter().find(|e| e.op == IoOp::Write && e.offset == 512);
    let f1 = log.iter().find(|e| e.op == IoOp::Flush);
    let (w2, f1) = (w2.unwrap(), f1.unwrap());
    assert_eq!((w2.issued, f1.issued), (1_000, 1_000));
    assert_eq!((w2.completed, f1.completed), (Some(2_000), Some(6_000)));
    assert!(w2.complete_seq.unwrap() > f1.issue_seq);
}

#[test]
fn write_completing_before_a_flush_issue_at_the_same_instant_is_durable() {
    let sim = Sim::new(2);
    let disk = sim.disk(fixed(100, 1_000, 5_000)).unwrap();
    let d = disk.clone();
    block_on(&sim, async move {
        d.write(0, &[9; 512], WriteFlags::default()).await.unwrap();
        d.flush().await.unwrap();
    });
    assert_eq!(byte_at(&disk.durable(), 0), 9);
}

#[test]
fn fua_is_durable_on_completion_and_older_cached_data_cannot_resurface() {
    let sim = Sim::new(3);
    let disk = sim.disk(fixed(100, 1_000, 5_000)).unwrap();
    let d = disk.clone();
    block_on(&sim, async move {
        d.write(0, &[1; 1024], WriteFlags::default()).await.unwrap();
        d.write(512, &[2; 512], WriteFlags { fua: true })
            .await
            .unwrap();
    });
    let durable = disk.durable();
    assert_eq!(byte_at(&durable, 0), 0, "the cached write is not durable");
    assert_eq!(byte_at(&durable, 512), 2, "the FUA write is durable");
    assert_eq!(disk.counters().fua_writes, 1);
    // A crash may show the first write's first sector, but never its second
    // one over the newer durable FUA data.
    let states: Vec<_> = disk.crash_states(100).unwrap().collect();
    assert_eq!(states.len(), 2);
    for st in &states {
        assert_eq!(byte_at(&st.content, 512), 2);
    }
    let d = disk.clone();
    block_on(&sim, async move { d.flush().await.unwrap() });
    let durable = disk.durable();
    assert_eq!(byte_at(&durable, 0), 1);
    assert_eq!(
        byte_at(&durable, 512),
        2,
        "flush resurrected superseded data"
    );
    assert_eq!(disk.durable(), disk.volatile());
}

#[test]
fn completions_come_back_reordered() {
    let sim = Sim::new(4);
    let disk = sim.disk(DiskOptions::default()).unwrap();
    for i in 0..32u64 {
        let d = disk.clone();
        sim.spawn(async move {
            d.write(i * 4096, &[i as u8; 4096], WriteFlags::default())
                .await
                .unwrap()
        });
    }
    sim.run().unwrap();
    let log = disk.log();
    assert_eq!(log.len(), 32);
    let mut by_completion: Vec<_> = log.iter().collect();
    by_completion.sort_by_key(|e| e.complete_seq);
    let ids: Vec<u64> = by_completion.iter().map(|e| e.id).collect();
    let sorted: Vec<u64> = (0..32).collect();
    assert_ne!(ids, sorted, "completions came back in issue order");
    // Every write landed regardless of order.
    let v = disk.volatile();
    for i in 0..32u64 {
        assert_eq!(byte_at(&v, i * 4096 + 17), i as u8);
    }
}

#[test]
fn write_completes_into_the_volatile_view_only_at_completion() {
    let sim = Sim::new(5);
    let disk = sim.disk(fixed(10, 1_000, 10)).unwrap();
    let d = disk.clone();
    let h = sim.spawn(async move { d.write(0, &[7; 512], WriteFlags::default()).await });
    sim.run_until_time(999).unwrap();
    assert_eq!(byte_at(&disk.volatile(), 0), 0);
    assert_eq!(disk.len(), 512, "length counts issued writes");
    sim.run().unwrap();
    assert_eq!(h.take(), Some(Ok(())));
    assert_eq!(byte_at(&disk.volatile(), 0), 7);
}

#[test]
fn write_zeroes_support_and_fallback() {
    let sim = Sim::new(6);
    let mut opts = fixed(10, 10, 10);
    opts.support.write_zeroes = false;
    let disk = sim.disk(opts).unwrap();
    let d = disk.clone();
    block_on(&sim, async move {
        d.write(0, &[5; 8192], WriteFlags::default()).await.unwrap();
        let cheap = ZeroFlags {
            no_fallback: true,
            ..ZeroFlags::default()
        };
        let err = d.write_zeroes(0, 4096, cheap).await.unwrap_err();
        assert_eq!(
            err,
            DevError::NotSupported {
                op: IoOp::WriteZeroes
            }
        );
        assert!(err.is_not_supported());
        let mut b = [0u8; 1];
        d.read(100, &mut b).await.unwrap();
        assert_eq!(b[0], 5, "a refused write_zeroes changed data");
        d.write_zeroes(0, 4096, ZeroFlags::default()).await.unwrap();
        d.read(100, &mut b).await.unwrap();
        assert_eq!(b[0], 0);
    });
    let c = disk.counters();
    assert_eq!(c.write_zeroes, 2);
    assert_eq!(c.write_zeroes_unsupported, 1);
    assert_eq!(c.write_zeroes_bytes, 4096);
    assert_eq!(c.write_zeroes_fallback_bytes, 4096);

    // An efficient device zeroes without fallback bytes.
    let disk = sim.disk(fixed(10, 10, 10)).unwrap();
    let d = disk.clone();
    block_on(&sim, async move {
        let flags = ZeroFlags {
            no_fallback: true,
            may_unmap: true,
            fua: false,
        };
        d.write_zeroes(1 << 20, 1 << 16, flags).await.unwrap();
    });
    let c = disk.counters();
    assert_eq!((c.write_zeroes, c.write_zeroes_fallback_bytes), (1, 0));
    assert_eq!(disk.len(), (1 << 20) + (1 << 16), "write_zeroes extends");
}

#[test]
fn discard_effect_is_configurable() {
    for (effect, expect) in [(DiscardEffect::Zeroes, 0u8), (DiscardEffect::Nothing, 3u8)] {
        let sim = Sim::new(7);
        let mut opts = fixed(10, 10, 10);
        opts.support.discard = effect;
        let disk = sim.disk(opts).unwrap();
        let d = disk.clone();
        let got = block_on(&sim, async move {
            d.write(0, &[3; 4096], WriteFlags::default()).await.unwrap();
            d.discard(0, 1 << 20).await.unwrap();
            let mut b = [9u8; 4];
            d.read(1000, &mut b).await.unwrap();
            b[0]
        });
        assert_eq!(got, expect, "{effect:?}");
        assert_eq!(disk.len(), 4096, "a discard does not extend the device");
        assert_eq!(disk.counters().discards, 1);
    }
    // Either: some discards zero, some do not, by the seed.
    let sim = Sim::new(7);
    let mut opts = fixed(10, 10, 10);
    opts.support.discard = DiscardEffect::Either;
    let disk = sim.disk(opts).unwrap();
    let d = disk.clone();
    let zeroed = sim
        .block_on(async move {
            let mut zeroed = Vec::new();
            for _ in 0..16 {
                d.write(0, &[3; 512], WriteFlags::default()).await.unwrap();
                d.discard(0, 512).await.unwrap();
                let mut b = [9u8; 1];
                d.read(0, &mut b).await.unwrap();
                zeroed.push(b[0] == 0);
            }
            zeroed
        })
        .unwrap();
    assert!(
        zeroed.iter().any(|&z| z) && zeroed.iter().any(|&z| !z),
        "{zeroed:?}"
    );
}

#[test]
fn counters_are_exact_and_reads_past_the_end_are_zero() {
    let sim = Sim::new(8);
    let disk = sim.disk(DiskOptions::default()).unwrap();
    let d = disk.clone();
    block_on(&sim, async move {
        d.write(0, &[1; 1000], WriteFlags::default()).await.unwrap();
        d.write(1000, &[2; 24], WriteFlags { fua: true })
            .await
            .unwrap();
        let mut buf = vec![0xaa; 2048];
        d.read(512, &mut buf).await.unwrap();
        assert!(buf[..488].iter().all(|&b| b == 1));
        assert!(buf[488..512].iter().all(|&b| b == 2));
        assert!(buf[512..].iter().all(|&b| b == 0));
        d.flush().await.unwrap();
        d.flush().await.unwrap();
        d.truncate(100).await.unwrap();
        let mut b = [0xaa; 8];
        d.read(96, &mut b).await.unwrap();
        assert_eq!(b, [1, 1, 1, 1, 0, 0, 0, 0]);
    });
    let c = disk.counters();
    assert_eq!(
        (c.writes, c.write_bytes, c.fua_writes, c.reads, c.read_bytes),
        (2, 1024, 1, 2, 2056)
    );
    assert_eq!((c.flushes, c.truncates, c.errors), (2, 1, 0));
    assert_eq!(disk.len(), 100);
    let touching = disk.writes_touching(990, 20, 10);
    assert_eq!(
        touching.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![0, 1, 5]
    );
    assert_eq!(touching[1].data().as_deref(), Some(&[2u8; 24][..]));
}

/// A concurrent workload whose trace hash stands for the whole run.
fn workload_hash(seed: u64) -> (u64, u64) {
    let sim = Sim::new(seed);
    let disk = sim.disk(DiskOptions::default()).unwrap();
    for t in 0..4u64 {
        let d = disk.clone();
        sim.spawn(async move {
            for i in 0..6u64 {
                let off = ((t * 7 + i * 3) % 16) * 512;
                d.write(off, &[(t * 10 + i) as u8; 1024], WriteFlags::default())
                    .await
                    .unwrap();
                if i % 3 == 2 {
                    d.flush().await.unwrap();
                }
                let mut b = [0u8; 512];
                d.read(off, &mut b).await.unwrap();
            }
        });
    }
    sim.run().unwrap();
    (sim.trace_hash(), sim.now())
}

#[test]
fn trace_hash_is_a_function_of_the_seed() {
    let a = workload_hash(42);
    assert_eq!(a, workload_hash(42));
    assert_ne!(a.0, workload_hash(43).0);
}

#[test]
fn bad_options_are_refused_with_the_field_named() {
    let sim = Sim::new(0);
    let mut o = DiskOptions {
        sector_size: 1000,
        ..DiskOptions::default()
    };
    let e = SimDisk::new(&sim, o.clone()).unwrap_err();
    assert_eq!(e.field, "sector_size");
    o.sector_size = 4096;
    o.latency.write_mean = 1;
    let e = SimDisk::new(&sim, o.clone()).unwrap_err();
    assert_eq!(e.field, "latency.write_mean");
    o.latency = LatencyOptions::hdd();
    o.latency.channels = u32::MAX;
    let e = SimDisk::new(&sim, o.clone()).unwrap_err();
    assert_eq!(e.field, "latency.channels");
    assert!(e.to_string().contains("4294967295"), "{e}");
    o.latency = LatencyOptions::hdd();
    o.faults.read_error_ppm = 2_000_000;
    assert_eq!(
        SimDisk::new(&sim, o).unwrap_err().field,
        "faults.read_error_ppm"
    );
}

#[test]
fn one_channel_serialises_requests() {
    let sim = Sim::new(9);
    let mut o = fixed(1_000, 1_000, 1_000);
    o.latency.channels = 1;
    let disk = sim.disk(o).unwrap();
    for i in 0..4u64 {
        let d = disk.clone();
        sim.spawn(async move { d.write(i * 512, &[1; 512], WriteFlags::default()).await });
    }
    sim.run().unwrap();
    assert_eq!(sim.now(), 4_000);
}

#[test]
fn log_lines_name_the_request_and_block_on_drives_a_body() {
    let sim = Sim::new(10);
    let disk = sim.disk(fixed(100, 1_000, 5_000)).unwrap();
    let d = disk.clone();
    let r = sim
        .block_on(async move {
            d.write(4096, &[1; 8192], WriteFlags { fua: true }).await?;
            d.flush().await
        })
        .unwrap();
    assert_eq!(r, Ok(()));
    let log = disk.log();
    let line = log[0].to_string();
    assert!(
        line.starts_with("#0 write 4096+8192 fua data ")
            && line.ends_with(", issued 0 ns, completed 1000 ns: ok"),
        "{line}"
    );
    assert_eq!(
        log[1].to_string(),
        "#1 flush, issued 1000 ns, completed 6000 ns: ok"
    );
    let json = serde_json::to_value(&log[0]).unwrap();
    assert_eq!(json["op"], "Write");
    assert_eq!(json["result"], "ok");
    assert_eq!(json["landed"], serde_json::json!([4096, 8192]));
    assert!(json.get("data").is_none(), "payloads stay out of reports");
}

#[test]
fn transfers_share_the_bus() {
    let sim = Sim::new(11);
    let mut o = fixed(0, 0, 0);
    // 1 MB/s: a 1000-byte transfer takes 1 ms.
    o.latency.bandwidth = 1_000_000;
    let disk = sim.disk(o).unwrap();
    for i in 0..4u64 {
        let d = disk.clone();
        sim.spawn(async move { d.write(i * 1000, &[1; 1000], WriteFlags::default()).await });
    }
    sim.run().unwrap();
    assert_eq!(sim.now(), 4_000_000);
}

#[test]
fn write_like_requests_in_flight_over_the_same_bytes_are_overlaps() {
    let sim = Sim::new(12);
    let disk = sim.disk(fixed(100, 1_000, 5_000)).unwrap();
    // Back to back over the same bytes: no overlap, the first completed.
    let d = disk.clone();
    block_on(&sim, async move {
        d.write(0, &[1; 4096], WriteFlags::default()).await.unwrap();
        d.write(0, &[2; 4096], WriteFlags::default()).await.unwrap();
    });
    assert_eq!(disk.overlaps().1, 0);
    // Side by side, disjoint: none either.
    for i in 0..2u64 {
        let d = disk.clone();
        sim.spawn(async move {
            d.write(8192 + i * 4096, &[3; 4096], WriteFlags::default())
                .await
        });
    }
    sim.run().unwrap();
    assert_eq!(disk.overlaps().1, 0);
    // A write and a discard in flight over one shared sector.
    let d = disk.clone();
    sim.spawn(async move { d.write(16384, &[4; 4096], WriteFlags::default()).await });
    let d = disk.clone();
    sim.spawn(async move { d.discard(20480 - 512, 4096).await });
    sim.run().unwrap();
    let (kept, n) = disk.overlaps();
    assert_eq!(n, 1);
    assert_eq!(kept[0].earlier.op, IoOp::Write);
    assert_eq!(kept[0].earlier.offset, 16384);
    assert_eq!(kept[0].later.op, IoOp::Discard);
    assert!(kept[0].to_string().contains("was in flight"), "{}", kept[0]);
}
