//! `--driver qemu` and `--driver imago`: a case on QEMU's own qcow2
//! driver (qemu-nbd, its storage the simulated disk over NBD) passes; on
//! a disk that ignores flushes it fails, and the failing case's kept
//! request log rebuilds its crash states bit for bit without QEMU; a small
//! campaign passes; the imago library passes and fails the same way.

use crate::support::{exec, qcsim, text, QCSIM};

/// The number before `what` on the line that has it.
fn number_before(out: &str, what: &str) -> u64 {
    let at = out
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {out}"));
    out[..at]
        .trim_end()
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number before {what:?} in {out}"))
}

#[test]
fn a_case_on_qemus_driver_passes_and_fails_on_a_disk_that_ignores_flush() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = qcsim(
        &["run", "--seed", "0", "--driver", "qemu", "--corpus", "c"],
        d,
    );
    assert!(out.contains("seed 0 (qemu): PASS"), "{out}");
    assert!(number_before(&out, "crash states") > 0, "{out}");
    assert!(number_before(&out, "recovered sectors") > 0, "{out}");
    assert!(number_before(&out, "flushes from QEMU") > 0, "{out}");

    let broken = exec(
        QCSIM,
        &[
            "run",
            "--seed",
            "0",
            "--driver",
            "qemu",
            "--disk-ignores-flush",
            "--corpus",
            "c",
        ],
        d,
    );
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    assert!(text(&broken).contains("FAIL"), "{}", text(&broken));
    let kept = d.join("c/qemu-seed-0");
    assert!(kept.join("case.json").is_file());
    let epoch = kept.join("epoch-0");
    // The crash states the run judged, rebuilt from its request log alone.
    qcsim(
        &[
            "disk-replay",
            epoch.join("requests.log").to_str().unwrap(),
            "--samples",
            "2",
            "--crash-seed",
            "0",
            "--crash-dir",
            "again",
        ],
        d,
    );
    for k in 0..3 {
        let name = format!("crash-{k}.raw");
        let (a, b) = (
            std::fs::read(epoch.join(&name)).unwrap(),
            std::fs::read(d.join("again").join(&name)).unwrap(),
        );
        assert!(a == b, "{name} differs when replayed");
    }
}

#[test]
fn a_campaign_on_qemus_driver_passes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = exec(
        QCSIM,
        &[
            "campaign", "--driver", "qemu", "--seeds", "0..3", "--jobs", "2", "--quiet",
            "--corpus", "c",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("campaign (qemu): 3 cases"), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    assert!(number_before(&stdout, "crash states") > 0, "{stdout}");
}

/// QEMU reuses a discarded cluster before the L2 change unlinking it is
/// durable, so after this case's crash a discarded sector reads a later
/// write meant for another sector. The block layer's discard contract
/// allows it, and external drivers are held to that one (the engine, to
/// its stricter one: `verify_corpus` replays the same file in process).
/// Before the contract it failed on every run.
#[test]
fn qemus_reuse_of_a_discarded_cluster_passes_under_the_block_layer_contract() {
    let dir = tempfile::tempdir().unwrap();
    let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus/regressions/qemu-discard-reuse-seed-94.json");
    let out = qcsim(
        &["replay", "--driver", "qemu", case.to_str().unwrap()],
        dir.path(),
    );
    assert!(out.contains("seed 94 (qemu): PASS"), "{out}");
    assert!(number_before(&out, "crash states") > 0, "{out}");
}

/// A case with a backing file runs on QEMU (the backing file a real
/// file QEMU reads) and passes: a version 2 overlay of a qcow2 backing
/// file, whose header the run once misread as dirty after a clean close.
#[test]
fn a_case_with_a_backing_file_runs_on_qemus_driver() {
    let dir = tempfile::tempdir().unwrap();
    let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus/regressions/qemu-v2-backing-seed-17.json");
    let out = qcsim(
        &["replay", "--driver", "qemu", case.to_str().unwrap()],
        dir.path(),
    );
    assert!(out.contains("seed 17 (qemu): PASS"), "{out}");
    assert!(number_before(&out, "crash states") > 0, "{out}");
}

/// `--driver imago`: the imago library over the same simulated disk (its
/// storage an NBD client of it) passes a case, and fails it on a disk
/// that ignores flushes; a version 2 image is skipped (imago refuses
/// discards there). Seed 3: seed 1's case, since the hazard cycles'
/// background reads and armed guards, is one imago fails (its L1 and L2
/// writes reach the disk before the refcount blocks are flushed).
#[test]
fn a_case_on_imago_passes_and_fails_on_a_disk_that_ignores_flush() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = qcsim(
        &["run", "--seed", "3", "--driver", "imago", "--corpus", "c"],
        d,
    );
    assert!(out.contains("seed 3 (imago): PASS"), "{out}");
    assert!(number_before(&out, "crash states") > 0, "{out}");
    assert!(number_before(&out, "flushes from imago") > 0, "{out}");
    let broken = exec(
        QCSIM,
        &[
            "run",
            "--seed",
            "3",
            "--driver",
            "imago",
            "--disk-ignores-flush",
            "--corpus",
            "c",
        ],
        d,
    );
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    assert!(d.join("c/imago-seed-3/case.json").is_file());
    let v2 = qcsim(
        &["run", "--seed", "0", "--driver", "imago", "--corpus", "c"],
        d,
    );
    assert!(v2.contains("SKIPPED") && v2.contains("version 2"), "{v2}");
}
