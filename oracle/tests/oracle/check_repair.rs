//! Repair test: `qemu-img check -r all` and the checker's repair, each on
//! its own copy of the same corrupted image, must agree on the verdict;
//! where QEMU's repair succeeds, both tools must find both results clean
//! and both results must hold the same guest data.

use crate::check_support::corrupt::cases;
use crate::check_support::{bases, qemu_check, run, Scratch};
use oracle::check::{check, repair, RepairMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Whether QEMU reads the same guest data from both images (`qemu-img
/// compare`): `Some(equal)`, or `None` when it cannot read one of them
/// (QEMU's own repair can leave zero flags in a version 2 image, which it
/// then refuses to read).
fn same_guest_data(a: &std::path::Path, b: &std::path::Path) -> Option<bool> {
    let o = run(
        "qemu-img",
        &[
            "compare",
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            a.to_str().expect("utf-8"),
            b.to_str().expect("utf-8"),
        ],
    );
    match o.status.code() {
        Some(0) => Some(true),
        Some(1) => Some(false),
        _ => None,
    }
}

/// Repairs copies of `bytes` with both tools and records disagreements;
/// returns whether QEMU's repair succeeded (and so the results were
/// compared in full).
fn compare_repairs(
    s: &Scratch,
    name: &str,
    bytes: &[u8],
    mode: RepairMode,
    failures: &mut Vec<String>,
) -> bool {
    let flag = match mode {
        RepairMode::Leaks => "leaks",
        RepairMode::All => "all",
    };
    // A refcount block far outside the image makes both tools grow the
    // file to reach it; QEMU then needs gigabytes of memory to check it.
    let far_refblock = check(&bytes.to_vec())
        .findings
        .iter()
        .any(|f| f.message.contains("is outside image") && f.offset.is_some_and(|o| o > 64 << 20));
    if far_refblock {
        return false;
    }
    let theirs = s.path("theirs.qcow2");
    let ours_path = s.path("ours.qcow2");
    std::fs::write(&theirs, bytes).expect("write");
    std::fs::write(&ours_path, bytes).expect("write");
    let (qrc, qjson) = qemu_check(&theirs, Some(flag));
    // Files, not memory: a repair may grow the file sparsely by far.
    let mut ours = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ours_path)
        .expect("open");
    let (orc, ojson) = match repair(&mut ours, mode) {
        Ok(r) => (r.exit_code(), r.failure.is_none().then(|| r.to_qemu_json())),
        Err(_) => (1, None),
    };
    if qrc != orc {
        failures.push(format!(
            "{name}: after -r {flag} qemu-img exits {qrc}, checker {orc}"
        ));
        return false;
    }
    let fixed = |j: &Option<serde_json::Value>| {
        ["leaks-fixed", "corruptions-fixed"].map(|k| {
            j.as_ref()
                .and_then(|v| v.get(k))
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
        })
    };
    if fixed(&qjson) != fixed(&ojson) {
        failures.push(format!(
            "{name}: qemu-img fixed [leaks, corruptions] {:?}, checker {:?}",
            fixed(&qjson),
            fixed(&ojson)
        ));
    }
    if qrc != 0 {
        return false;
    }
    let theirs_file = std::fs::File::open(&theirs).expect("open");
    let verdicts = [
        ("qemu-img on ours", qemu_check(&ours_path, None).0),
        ("checker on ours", check(&ours).exit_code()),
        ("checker on theirs", check(&theirs_file).exit_code()),
    ];
    for (who, rc) in verdicts {
        if rc != 0 {
            failures.push(format!("{name}: {who} exits {rc} after repair"));
        }
    }
    match same_guest_data(&theirs, &ours_path) {
        Some(true) => {}
        Some(false) => failures.push(format!("{name}: guest data differs after repair")),
        // Unreadable for QEMU: then it must be unreadable on both sides.
        None => {
            let alone = same_guest_data(&theirs, &theirs).is_some()
                || same_guest_data(&ours_path, &ours_path).is_some();
            if alone {
                failures.push(format!("{name}: only one repaired image is readable"));
            }
        }
    }
    true
}

/// `repair_all_agrees_with_qemu_img_and_preserves_data`, over the bases
/// whose index is `half` modulo 2: two tests, so that the test threads
/// share the work (one took a third of the binary's time alone).
fn repair_all_agrees_on_half(half: usize) {
    let s = Scratch::new();
    let mut failures = Vec::new();
    let mut repaired = 0;
    for (i, base) in bases(&s).iter().enumerate().filter(|(i, _)| i % 2 == half) {
        // Each base repairs a different third of the corruptions: every
        // kind is still repaired on several bases, at a third of the cost.
        for case in cases(base, 0x5eed_0000 + i as u64, 0)
            .into_iter()
            .enumerate()
            .filter(|(k, c)| k % 3 == i % 3 || c.name.contains("snapshot-"))
            .map(|(_, c)| c)
        {
            if compare_repairs(&s, &case.name, &case.bytes, RepairMode::All, &mut failures) {
                repaired += 1;
            }
        }
    }
    println!("half {half}: {repaired} repairs succeeded");
    assert!(repaired > 13, "only {repaired} repairs succeeded");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn repair_all_agrees_with_qemu_img_and_preserves_data() {
    repair_all_agrees_on_half(0);
}

#[test]
fn repair_all_agrees_with_qemu_img_and_preserves_data_on_the_other_bases() {
    repair_all_agrees_on_half(1);
}

#[test]
fn repair_leaks_frees_leaked_clusters_like_qemu_img() {
    let s = Scratch::new();
    let mut failures = Vec::new();
    let mut leaky = 0;
    for (i, base) in bases(&s).iter().enumerate() {
        for case in cases(base, 0x1ea5 + i as u64, 0) {
            if check(&case.bytes).exit_code() != 3 {
                continue;
            }
            leaky += 1;
            let theirs = s.path("theirs.qcow2");
            std::fs::write(&theirs, &case.bytes).expect("write");
            let (qrc, qjson) = qemu_check(&theirs, Some("leaks"));
            let mut ours = case.bytes.clone();
            let report = repair(&mut ours, RepairMode::Leaks).expect("repair opens");
            let fixed = qjson
                .as_ref()
                .and_then(|j| j.get("leaks-fixed"))
                .and_then(|v| v.as_u64())
                .unwrap_or(0);
            if qrc != report.exit_code() || fixed != report.leaks_fixed {
                failures.push(format!(
                    "{}: qemu-img exit {qrc} fixed {fixed}; checker exit {} fixed {}",
                    case.name,
                    report.exit_code(),
                    report.leaks_fixed
                ));
            }
            if check(&ours).exit_code() != 0 {
                failures.push(format!("{}: not clean after -r leaks", case.name));
            }
        }
    }
    assert!(leaky >= 5, "only {leaky} leaky cases");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Seeded random bit flips in the metadata clusters, repaired by both tools
/// with -r all and -r leaks in turn.
#[test]
fn repairs_agree_with_qemu_img_on_random_metadata_flips() {
    const PER_BASE: usize = 6;
    let s = Scratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(0x7e9a);
    let mut failures = Vec::new();
    for base in bases(&s) {
        let cs = crate::check_support::Layout::read(&base.bytes).cluster_size();
        let hot = (8 * cs).min(base.bytes.len() as u64);
        for n in 0..PER_BASE {
            let mut img = base.bytes.clone();
            let mut what = Vec::new();
            for _ in 0..rng.gen_range(1..=3) {
                let at = rng.gen_range(0..hot) as usize;
                let bit = rng.gen_range(0..8);
                img[at] ^= 1 << bit;
                what.push(format!("{at:#x}.{bit}"));
            }
            let name = format!("{}/flip-{n} [{}]", base.name, what.join(" "));
            // Alternate the modes: -r leaks must refuse or fix exactly what
            // qemu-img -r leaks does.
            let mode = if n % 2 == 0 {
                RepairMode::All
            } else {
                RepairMode::Leaks
            };
            compare_repairs(&s, &name, &img, mode, &mut failures);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
