//! Traces run as cases: the recorded mke2fs replays through the engine
//! with crashes and passes, every crash state checked; the case it runs
//! as survives JSON and replays to the same trace hash.

use std::path::PathBuf;

use engine::CreateOptions;
use sim::case::Case;
use sim::iotrace::blkparse::{self, BlkparseOptions};
use sim::iotrace::format::parse_str;
use sim::iotrace::plan::{plan_case, TraceCase, TracePlan};
use sim::iotrace::strace::{self, StraceOptions};
use sim::iotrace::Trace;
use sim::runner::{run_case, RunOptions};

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sim/traces")
        .join(name);
    std::fs::read(p).unwrap()
}

fn mke2fs() -> Trace {
    strace::import(&fixture("mke2fs.strace")[..], &StraceOptions::default())
        .unwrap()
        .trace
}

/// A trace plan: `crashes` crashes drawn from `seed` on a `size`-byte disk
/// (also `trace_recorded`'s).
pub(crate) fn plan(seed: u64, size: u64, crashes: usize, after_flush: bool) -> TracePlan {
    let mut p = TracePlan::new(
        seed,
        CreateOptions {
            size,
            ..CreateOptions::default()
        },
    );
    p.crashes = crashes;
    p.crash_after_flush = after_flush;
    p
}

#[test]
fn mke2fs_replays_with_crashes_and_passes() {
    let trace = mke2fs();
    let tc: TraceCase = plan_case(&trace, &plan(1, 16 << 20, 3, true)).unwrap();
    assert_eq!(tc.stats.crashes, 3);
    // mke2fs fsyncs 4 times; a flush window drawn for a crash gets none after it.
    assert!(tc.stats.crashes_after_flush >= 1);
    // The 16 MiB discard is split into 2 MiB operations.
    assert_eq!(tc.stats.split, 1);
    let report = run_case(&tc.case, &RunOptions::default());
    assert!(report.passed(), "{:#?}", report.failures);
    let s = &report.stats;
    let crashes = 3 + tc.stats.crashes_after_flush;
    assert_eq!(s.counts.crash_states_checked, crashes);
    // Every crash reads the whole 16 MiB disk back against the model, and
    // the end reads it once more.
    assert_eq!(s.counts.recovered_sectors_checked, crashes * 32768);
    assert!(s.counts.read_sectors_checked >= 32768);
    assert!(s.counts.guest_writes > 0);

    // The saved case loads and runs again bit for bit.
    let back = Case::from_json(&tc.case.to_json()).unwrap();
    assert_eq!(back, tc.case);
    let again = run_case(&back, &RunOptions::default());
    assert_eq!(again.trace_hash, report.trace_hash);
    assert_eq!(again.stats, report.stats);
}

#[test]
fn a_seed_draws_the_crashes_and_the_schedule() {
    let trace = mke2fs();
    let a = plan_case(&trace, &plan(1, 16 << 20, 2, false)).unwrap();
    let b = plan_case(&trace, &plan(2, 16 << 20, 2, false)).unwrap();
    assert_eq!(a, plan_case(&trace, &plan(1, 16 << 20, 2, false)).unwrap());
    assert_ne!(a.case.workload, b.case.workload);
}

#[test]
fn blkparse_trace_with_reads_replays_and_passes() {
    let imported = blkparse::import(
        &fixture("ext4-commit.blkparse")[..],
        &BlkparseOptions::default(),
    )
    .unwrap();
    let mut p = plan(5, 16 << 20, 2, true);
    p.create.cluster_size = 4096;
    p.depth = 4;
    let tc = plan_case(&imported.trace, &p).unwrap();
    let report = run_case(&tc.case, &RunOptions::default());
    assert!(report.passed(), "{:#?}", report.failures);
    // The trace's read, checked by the model (cut short only if a crash
    // came first), and the final whole-disk read.
    assert!(report.stats.counts.read_sectors_checked >= 32768);
    assert!(report.stats.counts.crash_states_checked >= 2);
}

#[test]
fn dsync_writer_fua_writes_replay_with_crashes_and_pass() {
    let imported = strace::import(
        &fixture("dsync-writer.strace")[..],
        &StraceOptions::default(),
    )
    .unwrap();
    let fua = imported.trace.counts().fua;
    assert!(fua > 0);
    // Crash after each of its fsyncs and in 3 windows drawn from the seed:
    // the model holds every completed FUA write durable at each crash.
    let tc = plan_case(&imported.trace, &plan(3, 4 << 20, 3, true)).unwrap();
    assert_eq!(tc.stats.fua, fua);
    // No request of it is over 2 MiB: one FUA operation each.
    assert_eq!(tc.stats.fua_ops, fua);
    let report = run_case(&tc.case, &RunOptions::default());
    assert!(report.passed(), "{:#?}", report.failures);
    let c = &report.stats.counts;
    // A crash cuts off what is in flight in its window: at most the case's
    // FUA operations return, and some do.
    assert!(
        c.guest_fua_requests > 0 && c.guest_fua_requests <= fua,
        "{c:?}"
    );
    assert!(c.disk_fua_writes > 0, "{c:?}");
    assert!(c.crash_states_checked >= 3);
}

#[test]
fn requests_past_the_disk_name_their_line() {
    let trace = parse_str("# header\nw 0 4096\nf\nw 1048576 512\n").unwrap();
    let e = plan_case(&trace, &plan(0, 1 << 20, 0, false)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 4: `w 1048576 512` ends at byte 1049088, past the end of the 1048576-byte disk"
    );
}

#[test]
fn a_trace_too_large_for_one_run_names_the_limit() {
    // 600 MiB of 2 MiB writes over a 64 MiB disk: more sectors written
    // than a case may hold.
    let text: String = (0..300)
        .map(|i| format!("w {} 2097152\n", (i % 32) * 2097152))
        .collect();
    let e = plan_case(&parse_str(&text).unwrap(), &plan(0, 64 << 20, 0, false)).unwrap_err();
    assert!(e.to_string().contains("case::MAX_WRITTEN_SECTORS"), "{e}");
}
