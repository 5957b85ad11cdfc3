//! Repair test: `qemu-img check -r all` and the checker's repair, each on
//! its own copy of the same corrupted image, must agree on the verdict;
//! where QEMU's repair succeeds, both tools must find both results clean
//! and both results must hold the same guest data.

mod check_support;

use check_support::corrupt::cases;
use check_support::{bases, qemu_check, run, Scratch};
use oracle::check::{check, repair, RepairMode};

/// The guest data as `qemu-img convert -O raw` reads it; `None` when QEMU
/// cannot read the image (its own repair can leave zero flags in a
/// version 2 image, which it then refuses to read).
fn to_raw(s: &Scratch, img: &std::path::Path, name: &str) -> Option<Vec<u8>> {
    let out = s.path(name);
    let o = run(
        "qemu-img",
        &[
            "convert",
            "-f",
            "qcow2",
            "-O",
            "raw",
            img.to_str().expect("utf-8"),
            out.to_str().expect("utf-8"),
        ],
    );
    o.status
        .success()
        .then(|| std::fs::read(out).expect("read raw"))
}

#[test]
fn repair_all_agrees_with_qemu_img_and_preserves_data() {
    let s = Scratch::new();
    let mut failures = Vec::new();
    let mut repaired = 0;
    for (i, base) in bases(&s).iter().enumerate() {
        for case in cases(base, 0x5eed_0000 + i as u64, 2) {
            let theirs = s.path("theirs.qcow2");
            let ours_path = s.path("ours.qcow2");
            std::fs::write(&theirs, &case.bytes).expect("write");
            let (qrc, _) = qemu_check(&theirs, Some("all"));
            let mut ours = case.bytes.clone();
            let orc = match repair(&mut ours, RepairMode::All) {
                Ok(r) => r.exit_code(),
                Err(_) => 1,
            };
            if qrc != orc {
                failures.push(format!(
                    "{}: after -r all qemu-img exits {qrc}, checker {orc}",
                    case.name
                ));
                continue;
            }
            if qrc != 0 {
                continue;
            }
            repaired += 1;
            std::fs::write(&ours_path, &ours).expect("write");
            let theirs_bytes = std::fs::read(&theirs).expect("read");
            let verdicts = [
                ("qemu-img on ours", qemu_check(&ours_path, None).0),
                ("checker on ours", check(&ours).exit_code()),
                ("checker on theirs", check(&theirs_bytes).exit_code()),
            ];
            for (who, rc) in verdicts {
                if rc != 0 {
                    failures.push(format!("{}: {who} exits {rc} after repair", case.name));
                }
            }
            if to_raw(&s, &theirs, "theirs.raw") != to_raw(&s, &ours_path, "ours.raw") {
                failures.push(format!("{}: guest data differs after repair", case.name));
            }
        }
    }
    assert!(repaired > 50, "only {repaired} repairs succeeded");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
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
