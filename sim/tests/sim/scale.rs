//! Scale (issue 12, point 3): a 1 TiB virtual disk runs in proportion to
//! what is written, and what limits remain are refused by validation,
//! naming the limit.

use sim::case::{Case, CaseError, Op};
use sim::runner::{run_case_measured, RunOptions};
use sim::workload::Profile;

const TIB: u64 = 1 << 40;
/// Sectors per 64 KiB cluster.
const CLUSTER: u64 = 128;

/// Seed 1's case on a disk of `size` bytes and 64 KiB clusters, without a
/// backing or data file and with faults off, running `workload`.
fn on_disk(size: u64, workload: Vec<Vec<Op>>) -> Result<Case, CaseError> {
    let case = Case::generate(1, Profile::Mixed);
    let mut v: serde_json::Value = serde_json::from_str(&case.to_json()).unwrap();
    let c = &mut v["image"]["create"];
    c["size"] = size.into();
    c["cluster_size"] = (64u64 << 10).into();
    c["extended_l2"] = false.into();
    c["backing_file"] = serde_json::Value::Null;
    c["backing_format"] = serde_json::Value::Null;
    c["data_file"] = serde_json::Value::Null;
    c["data_file_raw"] = false.into();
    v["image"]["backing"] = serde_json::Value::Null;
    v["image"]["data_file"] = serde_json::Value::Null;
    v["disk"]["faults"] = serde_json::to_value(sim::disk::FaultOptions::default()).unwrap();
    // The generated workload may not fit the new geometry (a compressed
    // write is one whole cluster): the case's own replaces it first.
    v["workload"] = serde_json::to_value(&workload).unwrap();
    Case::from_json(&v.to_string())
}

/// Whole-cluster writes of `clusters` clusters at both ends of a disk of
/// `sectors` sectors, a flush, a crash, the same again a cluster further
/// in, a flush and a crash.
fn both_ends(sectors: u64, clusters: u64) -> Vec<Vec<Op>> {
    let mut w = Vec::new();
    for round in 0..2 {
        let mut group = Vec::new();
        for i in 0..clusters {
            let at = (round * clusters + i) * CLUSTER;
            group.push(Op::Write {
                sector: at,
                sectors: CLUSTER,
                fua: false,
            });
            group.push(Op::Write {
                sector: sectors - at - CLUSTER,
                sectors: CLUSTER,
                fua: false,
            });
        }
        w.push(group);
        w.push(vec![Op::Flush]);
        w.push(vec![Op::Crash]);
    }
    w
}

/// A 1 TiB disk written at both ends passes, and what the run holds is
/// what was written: the model knows exactly the sectors written; the
/// image's store holds exactly the same chunks as on a 1 GiB disk (the
/// written clusters', and as many tables) but one more of the L1 table
/// (its first and last entries are 16 KiB apart here); the reads after each crash and at the end
/// cover the two 1 MiB ends, not the disk (a 64 MiB disk is read whole).
#[test]
fn a_1_tib_disk_written_at_both_ends_costs_what_was_written() {
    let clusters = 8;
    let run = |size: u64| {
        let case = on_disk(size, both_ends(size / 512, clusters)).unwrap();
        let (report, footprint) = run_case_measured(&case, &RunOptions::default(), &mut |_, _| {});
        assert!(report.passed(), "{size}: {:?}", report.failures);
        (report, footprint)
    };
    let (big, fb) = run(TIB);
    let (small, _) = run(64 << 20);
    let (_, fs) = run(1 << 30);
    let written = 2 * 2 * clusters * CLUSTER;
    assert_eq!(fb.model_sectors, written);
    assert_eq!(fs.model_sectors, written);
    let chunk_per_cluster = (64 << 10) / sim::disk::CHUNK;
    let data_chunks = 2 * 2 * clusters * chunk_per_cluster;
    assert!(fs.image_chunks > data_chunks, "{fs:?}");
    // The L1 entries of the two ends lie in two chunks of the L1 table.
    assert_eq!(fb.image_chunks, fs.image_chunks + 1, "{fb:?} {fs:?}");
    assert_eq!(fb.durable_chunks, fb.image_chunks, "{fb:?}");
    assert_eq!(big.stats.counts.crashes, 2);
    // Two reads of 1 MiB (2048 sectors) after each crash and at the end.
    assert_eq!(big.stats.counts.recovered_sectors_checked, 2 * 2 * 2048);
    assert_eq!(
        small.stats.counts.recovered_sectors_checked,
        2 * (64 << 20) / 512
    );
}

/// A disk beyond the largest virtual size is refused, naming the limit.
#[test]
fn a_disk_past_1_tib_is_refused_naming_the_limit() {
    let e = on_disk(2 * TIB, vec![vec![Op::Flush]]).unwrap_err();
    assert!(matches!(e, CaseError::VirtualSize(_)), "{e}");
    assert!(e.to_string().contains("case::MAX_VIRTUAL_SIZE"), "{e}");
    assert!(on_disk(TIB, vec![vec![Op::Flush]]).is_ok());
}

/// An L1 table too large to hold (1 TiB of 4 KiB clusters needs 4 MiB)
/// is refused, naming the limit; 8 KiB clusters fit.
#[test]
fn an_l1_table_past_its_bound_is_refused_naming_the_limit() {
    let mut case = on_disk(TIB, vec![vec![Op::Flush]]).unwrap();
    case.image.create.cluster_size = 4 << 10;
    let e = case.validate().unwrap_err();
    assert!(e.to_string().contains("case::MAX_L1_TABLE_BYTES"), "{e}");
    assert!(e.to_string().contains("4194304 bytes"), "{e}");
    case.image.create.cluster_size = 8 << 10;
    case.validate().unwrap();
}

/// More than `MAX_OPS` (2^20) operations are refused, naming the limit;
/// that many are not.
#[test]
fn more_operations_than_the_bound_are_refused_naming_the_limit() {
    let mut case = on_disk(TIB, vec![vec![Op::Flush]]).unwrap();
    // A crash every 1024 operations keeps each epoch's work in bounds.
    case.workload = (0..sim::case::MAX_OPS)
        .map(|i| {
            vec![if i % 1024 == 1023 {
                Op::Crash
            } else {
                Op::Flush
            }]
        })
        .collect();
    case.validate().unwrap();
    const { assert!(sim::case::MAX_OPS >= 1_000_000) };
    case.workload.push(vec![Op::Flush]);
    let e = case.validate().unwrap_err();
    assert!(e.to_string().contains("case::MAX_OPS"), "{e}");
}

/// The bounds on what a workload writes and the work it needs name
/// themselves when passed.
#[test]
fn workloads_past_the_size_bounds_are_refused_naming_the_limit() {
    let writes = |n: u64| -> Vec<Vec<Op>> {
        (0..n)
            .map(|i| {
                vec![Op::Write {
                    sector: i * 4096,
                    sectors: 4096,
                    fua: false,
                }]
            })
            .collect()
    };
    let limit = sim::case::MAX_WRITTEN_SECTORS / 4096;
    let e = on_disk(TIB, writes(limit + 1)).unwrap_err();
    assert!(e.to_string().contains("case::MAX_WRITTEN_SECTORS"), "{e}");
    on_disk(TIB, writes(limit)).unwrap();
    let mut case = on_disk(64 << 20, vec![vec![Op::Flush]]).unwrap();
    case.image.create.cluster_size = 512;
    case.workload = writes(200)
        .iter()
        .map(|g| {
            g.iter()
                .map(|op| match *op {
                    Op::Write {
                        sector,
                        sectors,
                        fua,
                    } => Op::Write {
                        sector: sector % 131072,
                        sectors,
                        fua,
                    },
                    op => op,
                })
                .collect()
        })
        .collect();
    let e = case.validate().unwrap_err();
    assert!(e.to_string().contains("case::MAX_EPOCH_WORK"), "{e}");
    case.workload = writes(40)
        .into_iter()
        .map(|g| {
            g.into_iter()
                .map(|op| match op {
                    Op::Write {
                        sector,
                        sectors,
                        fua,
                    } => Op::Write {
                        sector: sector % 131072,
                        sectors,
                        fua,
                    },
                    op => op,
                })
                .collect()
        })
        .chain((0..400).map(|_| vec![Op::Crash]))
        .collect();
    let e = case.validate().unwrap_err();
    assert!(e.to_string().contains("case::MAX_WORK"), "{e}");
}
