//! Guest requests flagged FUA (`Image::write_fua`, `write_zeroes_fua`,
//! `discard_fua`): what each costs in device requests, and that what it
//! wrote survives the harshest crash after it returns (every write not
//! made durable by a flush or its own FUA lost), consistent to the
//! checker.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

use super::snapshot_crash::{journal, replay, Ev};

const CS: u64 = 64 << 10;

/// A fresh 64 MiB image's bytes, after `prep` ran on it and it closed.
fn image(prep: impl AsyncFnOnce(&Image<MemDev>)) -> Vec<u8> {
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 64 << 20,
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(prep(&img));
    block_on(img.close()).unwrap().to_bytes()
}

/// The image a crash right after `evs` leaves when the device lost every
/// write that neither a flush nor its own FUA made durable.
fn harshest_crash(base: &[u8], evs: &[Ev]) -> Vec<u8> {
    let last_flush = evs.iter().rposition(|e| matches!(e, Ev::Flush));
    let (before, after) = evs.split_at(last_flush.map_or(0, |i| i + 1));
    let mut kept: Vec<Ev> = before.to_vec();
    kept.extend(
        after
            .iter()
            .filter(|e| matches!(e, Ev::FuaWrite(..)))
            .cloned(),
    );
    replay(base, &kept)
}

/// What the guest reads of `len` bytes at `off` on the image `bytes`.
fn read_back(bytes: &[u8], off: u64, len: usize) -> Vec<u8> {
    let opts = EngineOptions {
        read_only: true,
        ..EngineOptions::default()
    };
    let img = block_on(Image::open(MemDev::from_bytes(bytes.to_vec()), opts)).unwrap();
    let mut buf = vec![0u8; len];
    block_on(img.read(off, &mut buf)).unwrap();
    buf
}

/// `bytes` is consistent (leaks allowed) and reads `want` at `off`.
fn assert_reads(bytes: &[u8], off: u64, want: &[u8], what: &str) {
    let r = oracle::check::check(&bytes.to_vec());
    assert!(r.failure.is_none(), "{what}: {r:?}");
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind == oracle::check::FindingKind::Leak),
        "{what}: {:?}",
        r.findings
    );
    assert!(
        read_back(bytes, off, want.len()) == want,
        "{what}: the FUA request's bytes were lost"
    );
}

fn flushes(evs: &[Ev]) -> usize {
    evs.iter().filter(|e| matches!(e, Ev::Flush)).count()
}

fn fua_writes(evs: &[Ev]) -> usize {
    evs.iter().filter(|e| matches!(e, Ev::FuaWrite(..))).count()
}

#[test]
fn an_overwrite_in_place_of_a_durable_mapping_is_one_fua_write() {
    let base = image(async |img| img.write(0, &[1; 8192]).await.unwrap());
    let (_, evs) = journal(&base, async |img| {
        img.write_fua(4096, &[2; 4096]).await.unwrap();
        let c = img.counters();
        assert_eq!(
            (c.guest_fua_requests, c.fua_in_place, c.fua_flushes),
            (1, 1, 0)
        );
        // No metadata written, no flush: the close's come after.
        assert_eq!(
            (c.device_flushes, c.l2_writebacks, c.refcount_writebacks),
            (0, 0, 0)
        );
    });
    assert!(
        matches!(&evs[0], Ev::FuaWrite(_, d) if d == &[2; 4096]),
        "the request's first device request is not its data with FUA"
    );
    let crashed = harshest_crash(&base, &evs[..1]);
    assert_reads(&crashed, 4096, &[2; 4096], "in place");
}

#[test]
fn an_overwrite_of_a_mapping_not_yet_durable_is_made_durable() {
    let base = image(async |_| {});
    let (_, evs) = journal(&base, async |img| {
        img.write(0, &[1; 8192]).await.unwrap();
        // In place, but its cluster's L2 entry is only in the cache.
        img.write_fua(0, &[3; 4096]).await.unwrap();
        assert_eq!(img.counters().fua_in_place, 0);
    });
    let end = request_end(&evs);
    let crashed = harshest_crash(&base, &evs[..end]);
    assert_reads(&crashed, 0, &[3; 4096], "after a plain write");
}

/// Where the FUA request's requests end: the last FUA write (the close
/// after it writes nothing with FUA).
fn request_end(evs: &[Ev]) -> usize {
    evs.iter()
        .rposition(|e| matches!(e, Ev::FuaWrite(..)))
        .unwrap()
        + 1
}

#[test]
fn an_allocating_fua_write_costs_at_most_two_flushes() {
    // A new L2 table: refcounts and data, flush, the table, flush, the
    // L1 entry with FUA.
    let base = image(async |_| {});
    let (_, evs) = journal(&base, async |img| {
        img.write_fua(CS, &[4; 4096]).await.unwrap();
        assert_eq!(img.counters().fua_flushes, 2);
    });
    let end = request_end(&evs);
    assert_eq!(flushes(&evs[..end]), 2);
    assert_reads(
        &harshest_crash(&base, &evs[..end]),
        CS,
        &[4; 4096],
        "new table",
    );
    // An L2 table already on disk: refcounts and data, flush, the table
    // with FUA.
    let base = image(async |img| img.write(0, &[1; 4096]).await.unwrap());
    let (_, evs) = journal(&base, async |img| {
        img.write_fua(3 * CS + 512, &[5; 1024]).await.unwrap();
        assert_eq!(img.counters().fua_flushes, 1);
    });
    let end = request_end(&evs);
    assert_eq!((flushes(&evs[..end]), fua_writes(&evs[..end])), (1, 1));
    let crashed = harshest_crash(&base, &evs[..end]);
    let mut want = vec![0u8; 2048];
    want[512..1536].fill(5);
    assert_reads(&crashed, 3 * CS, &want, "existing table, partial cluster");
}

#[test]
fn fua_write_zeroes_and_discards_are_durable() {
    let base = image(async |img| img.write(0, &[1; 4 * CS as usize]).await.unwrap());
    let (_, evs) = journal(&base, async |img| {
        img.write_zeroes_fua(0, CS, false).await.unwrap();
        img.discard_fua(2 * CS, CS).await.unwrap();
    });
    let end = request_end(&evs);
    let crashed = harshest_crash(&base, &evs[..end]);
    assert_reads(&crashed, 0, &vec![0; CS as usize], "zeroes");
    assert_reads(&crashed, 2 * CS, &vec![0; CS as usize], "discard");
    assert_reads(&crashed, CS, &vec![1; CS as usize], "between");
}

#[test]
fn without_fua_the_harshest_crash_loses_the_write() {
    // The test's crash is harsh enough to matter: the same write without
    // FUA is lost.
    let base = image(async |img| img.write(0, &[1; 4096]).await.unwrap());
    let (_, evs) = journal(&base, async |img| img.write(CS, &[6; 4096]).await.unwrap());
    let first_flush = evs.iter().position(|e| matches!(e, Ev::Flush)).unwrap();
    let crashed = harshest_crash(&base, &evs[..first_flush]);
    assert_eq!(
        read_back(&crashed, CS, 4096),
        vec![0; 4096],
        "a plain write survived"
    );
}
