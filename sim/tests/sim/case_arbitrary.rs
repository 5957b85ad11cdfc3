//! `Case::from_arbitrary`: any bytes give a valid, bounded case.

use arbitrary::Unstructured;
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sim::case::{Case, Op, MAX_GROUP_OPS};
use sim::workload::MAX_ARBITRARY_CRASHES;

fn decode(bytes: &[u8]) -> Case {
    let case =
        Case::from_arbitrary(&mut Unstructured::new(bytes)).expect("from_arbitrary never fails");
    if let Err(e) = case.validate() {
        panic!("decoded case is invalid: {e}\n{}", case.to_json());
    }
    case
}

#[test]
fn empty_and_tiny_inputs_decode() {
    let empty = decode(&[]);
    assert!(empty.workload.is_empty());
    for len in 1..64 {
        decode(&vec![0xff; len]);
        decode(&vec![0; len]);
    }
}

#[test]
fn random_bytes_decode_to_valid_bounded_cases() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    let mut ops_seen = 0;
    let mut most_crashes = 0;
    let mut kinds = [false; 12];
    let mut fua_seen = 0;
    let mut snapshot_versions = [false; 2];
    for _ in 0..400 {
        let len = rng.gen_range(0..8192);
        let mut bytes = vec![0u8; len];
        rng.fill_bytes(&mut bytes);
        let case = decode(&bytes);
        assert!(case.image.create.size <= 4 << 20);
        let ops: Vec<&Op> = case.workload.iter().flatten().collect();
        assert!(
            ops.len()
                <= sim::workload::MAX_ARBITRARY_OPS
                    + sim::workload::MAX_ARBITRARY_EXTRAS
                    + sim::workload::MAX_ARBITRARY_AMENDS
                    + sim::workload::MAX_ARBITRARY_RESIZES
        );
        // Each crash reads the whole image back: a few keep a fuzzer fast.
        let crashes = ops.iter().filter(|op| ***op == Op::Crash).count();
        assert!(crashes <= MAX_ARBITRARY_CRASHES, "{crashes} crash points");
        most_crashes = most_crashes.max(crashes);
        for g in &case.workload {
            assert!(!g.is_empty() && g.len() <= MAX_GROUP_OPS);
        }
        for op in ops {
            ops_seen += 1;
            fua_seen += usize::from(op.is_fua());
            match op.range() {
                // A compressed write is one whole cluster.
                Some((s, n)) if matches!(op, Op::WriteCompressed { .. }) => {
                    let cs = case.image.create.cluster_size / 512;
                    assert!(
                        s % cs == 0 && n <= cs,
                        "{op:?} with clusters of {cs} sectors"
                    );
                }
                Some((_, n)) => assert!(n <= 256),
                None => {}
            }
            // On either version: a crash inside one on version 2 is
            // judged, then repaired as `qemu-img check -r all` would.
            if op.is_snapshot() {
                let v2 = case.image.create.compat == engine::Compat::V2;
                snapshot_versions[usize::from(v2)] = true;
            }
            kinds[match op {
                Op::Write { .. } => 0,
                Op::Read { .. } | Op::BackgroundRead { .. } => 1,
                Op::WriteZeroes { .. } => 2,
                Op::Discard { .. } => 3,
                Op::Flush => 4,
                Op::Crash => 5,
                Op::WriteCompressed { .. } => 6,
                Op::SnapshotCreate => 7,
                Op::SnapshotApply { .. } => 8,
                Op::SnapshotDelete { .. } => 9,
                Op::Amend { .. } => 10,
                Op::Resize { .. } => 11,
            }] = true;
        }
        // The JSON form of a decoded case is a case too.
        assert_eq!(Case::from_json(&case.to_json()).unwrap(), case);
    }
    assert!(ops_seen > 1000, "only {ops_seen} ops decoded");
    // Write-like requests flagged FUA come up too.
    assert!(fua_seen > 50, "only {fua_seen} FUA requests decoded");
    assert_eq!(most_crashes, MAX_ARBITRARY_CRASHES, "the cap is reached");
    assert_eq!(kinds, [true; 12], "some op kinds never decoded");
    assert_eq!(snapshot_versions, [true; 2], "snapshots on v3, then v2");
}

#[test]
fn decoding_is_a_function_of_the_bytes() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut bytes = vec![0u8; 4096];
    rng.fill_bytes(&mut bytes);
    assert_eq!(decode(&bytes), decode(&bytes));
    let mut other = bytes.clone();
    other[0] ^= 1;
    assert_ne!(decode(&bytes), decode(&other));
}

/// Decoded cases with snapshot operations and compressed writes run and
/// pass: the fuzz target reaches them, and the runner takes them as the
/// seeded campaign's.
#[test]
fn decoded_snapshots_and_compressed_writes_run_and_pass() {
    let mut rng = ChaCha8Rng::seed_from_u64(0xc0de);
    let (mut snapshot_ops, mut compressed, mut ran) = (0, 0, 0);
    while ran < 12 {
        let mut bytes = vec![0u8; rng.gen_range(64..1024)];
        rng.fill_bytes(&mut bytes);
        let case = decode(&bytes);
        let ops: Vec<&Op> = case.workload.iter().flatten().collect();
        let s = ops.iter().filter(|op| op.is_snapshot()).count();
        let c = ops
            .iter()
            .filter(|op| matches!(op, Op::WriteCompressed { .. }))
            .count();
        if s + c == 0 {
            continue;
        }
        let report = sim::runner::run_case(&case, &sim::runner::RunOptions::default());
        assert!(report.passed(), "{:?}\n{}", report.failures, case.to_json());
        snapshot_ops += s;
        compressed += c;
        ran += 1;
    }
    assert!(
        snapshot_ops > 0 && compressed > 0,
        "{snapshot_ops} snapshot ops, {compressed} compressed"
    );
}
