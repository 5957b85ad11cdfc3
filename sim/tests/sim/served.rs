//! A served disk (`sim::served`): requests submitted from outside the
//! simulation, several in flight at once, rebuilt bit for bit from its
//! request log (every pending write, so every crash state), a log cut at
//! any byte replaying to its last whole record, and the bounded cache
//! writing the oldest completed writes back.

use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

use engine::dev::ZeroFlags;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::disk::{DiskOptions, SparseStore};
use sim::served::reqlog::{replay, ReqLogError};
use sim::served::{DiskRequest, ServedDisk};

/// A log written to memory the test keeps.
#[derive(Clone, Default)]
struct Shared(Rc<RefCell<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

const SIZE: u64 = 1 << 20;

fn initial() -> SparseStore {
    let mut s = SparseStore::new();
    s.write(8192, &[0x5a; 4096]);
    s.truncate(SIZE);
    s
}

/// A session of `n` batches of up to 4 requests in flight at once, the
/// waits in a drawn order; the log it wrote.
fn session(options: DiskOptions, n: usize, close: bool) -> (ServedDisk, Vec<u8>) {
    let mut disk = ServedDisk::new(9, options, initial()).unwrap();
    let log = Shared::default();
    disk.record(Box::new(log.clone())).unwrap();
    let mut r = ChaCha8Rng::seed_from_u64(3);
    let mut reads = Vec::new();
    for _ in 0..n {
        let mut batch = Vec::new();
        for _ in 0..r.gen_range(1..=4) {
            let offset = r.gen_range(0..SIZE / 512 - 16) * 512;
            let len = r.gen_range(1..=16u64) * 512;
            let req = match r.gen_range(0..10) {
                0..=4 => DiskRequest::Write {
                    offset,
                    data: vec![r.gen(); len as usize],
                    fua: r.gen_bool(0.1),
                },
                5 => DiskRequest::WriteZeroes {
                    offset,
                    len,
                    flags: ZeroFlags {
                        may_unmap: r.gen(),
                        ..ZeroFlags::default()
                    },
                },
                6 => DiskRequest::Discard { offset, len },
                7 => DiskRequest::Flush,
                _ => DiskRequest::Read { offset, len },
            };
            batch.push(disk.submit(req).unwrap());
        }
        while !batch.is_empty() {
            let t = batch.remove(r.gen_range(0..batch.len()));
            reads.push(disk.wait(t).unwrap().unwrap().len());
        }
    }
    // Two left in flight: a crash state may keep them or not.
    disk.submit(DiskRequest::Write {
        offset: 0,
        data: vec![7; 4096],
        fua: false,
    })
    .unwrap();
    disk.submit(DiskRequest::Flush).unwrap();
    if close {
        disk.finish_log().unwrap();
    } else {
        disk.flush_log().unwrap();
    }
    let bytes = log.0.borrow().clone();
    (disk, bytes)
}

/// Hashes of what the disk would show after a crash now, state by state.
fn crash_hashes(disk: &ServedDisk) -> Vec<u64> {
    disk.disk()
        .crash_states_by_write(64)
        .unwrap()
        .map(|s| s.content.content_hash())
        .collect()
}

#[test]
fn a_replayed_log_rebuilds_the_same_disk() {
    let (live, log) = session(DiskOptions::default(), 200, true);
    let again = replay(&log[..]).unwrap();
    assert!(again.closed);
    assert_eq!((live.in_flight(), again.disk.in_flight()), (2, 2));
    let (a, b) = (live.disk(), again.disk.disk());
    assert_eq!(a.volatile(), b.volatile());
    assert_eq!(a.durable(), b.durable());
    assert_eq!(a.pending_count(), b.pending_count());
    assert!(a.pending_count() > 0, "the session leaves writes pending");
    assert_eq!(a.counters(), b.counters());
    assert_eq!(live.sim().trace_hash(), again.disk.sim().trace_hash());
    assert_eq!(live.sim().now(), again.disk.sim().now());
    let (ca, cb) = (crash_hashes(&live), crash_hashes(&again.disk));
    assert!(ca.len() > 1, "more than one crash state");
    assert_eq!(ca, cb);
    // Another seed's disk differs: the replay does not just echo.
    let other = ServedDisk::new(10, DiskOptions::default(), initial()).unwrap();
    assert_ne!(other.sim().seed(), again.disk.sim().seed());
}

#[test]
fn a_log_cut_anywhere_replays_to_its_last_whole_record() {
    let (_, log) = session(DiskOptions::default(), 20, false);
    let full = replay(&log[..]).unwrap();
    assert!(!full.closed, "no end marker: cut short");
    let header = 24 + u32::from_le_bytes(log[20..24].try_into().unwrap()) as usize;
    let mut last = 0;
    for cut in (0..log.len()).step_by(97) {
        match replay(&log[..cut]) {
            Ok(r) => {
                assert!(!r.closed);
                assert!(r.requests >= last && r.requests <= full.requests);
                last = r.requests;
            }
            // Only a cut inside the magic or the header is refused.
            Err(ReqLogError::Magic | ReqLogError::Header(_)) => assert!(cut < header, "{cut}"),
            Err(e) => panic!("cut at {cut}: {e}"),
        }
    }
    assert!(last > 0);
}

#[test]
fn a_damaged_log_is_refused_with_its_reason() {
    let (_, log) = session(DiskOptions::default(), 5, true);
    let mut bad = log.clone();
    // The first record's tag, just past the header (the initial content
    // is one chunk: `C` + offset + 4096 bytes).
    let header = u32::from_le_bytes(log[20..24].try_into().unwrap()) as usize;
    let first = 24 + header + 1 + 8 + 4096;
    assert_eq!(log[first], b'S');
    bad[first] = b'?';
    let e = replay(&bad[..]).err().unwrap().to_string();
    assert!(e.contains("unknown record type"), "{e}");
    // A request numbered out of order.
    let mut bad = log.clone();
    bad[first + 1] = 5;
    let e = replay(&bad[..]).err().unwrap().to_string();
    assert!(e.contains("request #5 where #0 comes next"), "{e}");
    // A header claiming more than it may.
    let mut bad = log.clone();
    bad[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
    let e = replay(&bad[..]).err().unwrap().to_string();
    assert!(e.contains("more than the"), "{e}");
}

#[test]
fn a_bounded_cache_writes_the_oldest_back() {
    let mut o = DiskOptions::default();
    o.log.enabled = false;
    o.crash.cache_bytes_max = Some(256 << 10);
    let mut disk = ServedDisk::new(1, o, initial()).unwrap();
    for i in 0..64u64 {
        let t = disk
            .submit(DiskRequest::Write {
                offset: i * 16384,
                data: vec![i as u8 + 1; 16384],
                fua: false,
            })
            .unwrap();
        disk.wait(t).unwrap().unwrap();
        assert!(disk.disk().pending_count() * 16384 <= 256 << 10);
    }
    // No flush was sent, yet the first writes are durable: written back.
    let durable = disk.disk().durable();
    let mut b = [0u8; 1];
    durable.read(0, &mut b);
    assert_eq!(b[0], 1);
    durable.read(63 * 16384, &mut b);
    assert_eq!(b[0], 0, "the newest write is still only in the cache");
    // Without the bound, nothing is durable without a flush.
    let mut disk = ServedDisk::new(1, DiskOptions::default(), initial()).unwrap();
    for i in 0..64u64 {
        let t = disk
            .submit(DiskRequest::Write {
                offset: i * 16384,
                data: vec![1; 16384],
                fua: false,
            })
            .unwrap();
        disk.wait(t).unwrap().unwrap();
    }
    assert_eq!(disk.disk().pending_count(), 64);
}

#[test]
fn an_idle_disk_is_not_a_hang() {
    let mut disk = ServedDisk::new(2, DiskOptions::default(), initial()).unwrap();
    // Nothing submitted: nothing to wait for, no run, no hang report.
    assert!(disk.wait(0).is_err());
    let t = disk.submit(DiskRequest::Flush).unwrap();
    disk.wait(t).unwrap().unwrap();
    let t = disk
        .submit(DiskRequest::Read {
            offset: 8192,
            len: 4096,
        })
        .unwrap();
    assert_eq!(disk.wait(t).unwrap().unwrap(), vec![0x5a; 4096]);
    assert_eq!(disk.in_flight(), 0);
}
