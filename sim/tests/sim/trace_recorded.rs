//! The recorded real workloads (`traces/*.trace.zst`, made by
//! scripts/record-workloads.sh): mke2fs populating an ext4 file system
//! from a directory of 10000 files, and sqlite3 committing 300
//! transactions with fsyncs. Each decompresses (by magic bytes) to the
//! counts it was recorded with and replays through the engine with
//! crashes, every crash state checked. The default run replays the sqlite
//! trace whole and the first requests of the mke2fs one;
//! scripts/replay-recorded.sh replays both whole with 8 crashes.

use std::path::PathBuf;

use sim::iotrace::compressed::{self, Compression};
use sim::iotrace::format;
use sim::iotrace::plan::plan_case;
use sim::iotrace::Trace;
use sim::runner::{run_case, RunOptions};

use super::trace_run::plan;

/// The recorded trace `name`, checked to hold `requests` requests counted
/// as `counts`.
fn recorded(name: &str, requests: usize, counts: &str) -> Trace {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sim/traces")
        .join(name);
    let f = std::fs::File::open(&p).unwrap();
    let (c, r) = compressed::reader(f, compressed::MAX_DECOMPRESSED).unwrap();
    assert_eq!(c, Compression::Zstd, "{name}");
    let t = format::parse(r).unwrap();
    assert_eq!(t.entries.len(), requests, "{name}");
    assert_eq!(t.counts().to_string(), counts, "{name}");
    t
}

/// Replay `trace` on a `size`-byte disk with `crashes` crashes drawn from
/// `seed`: (operations, groups, crash states checked, recovered sectors
/// checked).
fn replay(trace: &Trace, size: u64, seed: u64, crashes: usize) -> (u64, u64, u64, u64) {
    let tc = plan_case(trace, &plan(seed, size, crashes, false)).unwrap();
    assert_eq!(tc.stats.crashes, crashes as u64);
    let report = run_case(&tc.case, &RunOptions::default());
    assert!(report.passed(), "{:#?}", report.failures);
    let s = &report.stats;
    assert_eq!(s.counts.crash_states_checked, crashes as u64);
    (
        tc.stats.ops,
        tc.stats.groups,
        s.counts.crash_states_checked,
        s.counts.recovered_sectors_checked,
    )
}

#[test]
fn sqlite_recording_replays_whole_with_crashes() {
    let t = recorded(
        "sqlite.trace.zst",
        14042,
        "13739 writes (56274944 bytes), 0 reads (0 bytes), 0 write_zeroes (0 bytes), \
         0 discards (0 bytes), 303 flushes",
    );
    // 3 crashes, each reading the whole 64 MiB disk back (131072 sectors).
    assert_eq!(replay(&t, 64 << 20, 1, 3), (14045, 2162, 3, 393216));
}

#[test]
fn mke2fs_recording_holds_its_counts_and_its_start_replays_with_crashes() {
    let t = recorded(
        "mke2fs-d.trace.zst",
        97966,
        "97957 writes (100310016 bytes), 0 reads (0 bytes), 3 write_zeroes (8455168 bytes), \
         2 discards (268436480 bytes), 4 flushes",
    );
    // The first 8000 requests: the discard of the whole disk, the zeroed
    // ranges and the first files' data and metadata.
    let mut start = Trace::default();
    for e in &t.entries[..8000] {
        start.push(e.line, e.request).unwrap();
    }
    assert_eq!(
        start.counts().to_string(),
        "7993 writes (8186880 bytes), 0 reads (0 bytes), 3 write_zeroes (8455168 bytes), \
         2 discards (268436480 bytes), 2 flushes"
    );
    assert_eq!(replay(&start, 256 << 20, 1, 3), (8133, 1020, 3, 548864));
}
