//! Differential test of the checker against `qemu-img check`: clean
//! QEMU-made images of many shapes, corrupted in every way the generator
//! knows, must get the same exit code and counters from both.

use crate::check_support::corrupt::cases;
use crate::check_support::{bases, project, qemu_check, Scratch};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn checker_agrees_with_qemu_img_on_corrupted_images() {
    let s = Scratch::new();
    let mut failures = Vec::new();
    let mut total = 0;
    let mut seen_exit = std::collections::BTreeMap::new();
    for (i, base) in bases(&s).iter().enumerate() {
        for case in cases(base, 0x5eed_0000 + i as u64, 6) {
            total += 1;
            let path = s.path("case.qcow2");
            std::fs::write(&path, &case.bytes).expect("write case");
            let (qrc, qjson) = qemu_check(&path, None);
            *seen_exit.entry(qrc).or_insert(0) += 1;
            let ours = oracle::check::check(&case.bytes);
            let orc = ours.exit_code();
            let want = qjson.as_ref().map(project);
            let got = ours
                .failure
                .is_none()
                .then(|| project(&ours.to_qemu_json()));
            if qrc != orc || want != got {
                failures.push(format!(
                    "{}: qemu-img exit {qrc} {want:?}\n    checker exit {orc} {got:?} failure={:?}",
                    case.name, ours.failure
                ));
            }
        }
    }
    assert!(total > 100, "only {total} cases generated");
    // The generator must reach every verdict, or the comparison is weak.
    for code in [0, 1, 2, 3] {
        assert!(
            seen_exit.contains_key(&code),
            "no case made qemu-img exit {code}: {seen_exit:?}"
        );
    }
    eprintln!("{total} cases, qemu-img exit codes {seen_exit:?}");
    assert!(
        failures.is_empty(),
        "{} of {total} cases disagree:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The human report must read exactly as `qemu-img check`'s stdout.
#[test]
fn human_output_matches_qemu_img_wording() {
    let s = Scratch::new();
    let mut compared = 0;
    let mut failures = Vec::new();
    for (i, base) in bases(&s).iter().enumerate() {
        for case in cases(base, 0x4a11 + i as u64, 0).iter().step_by(4) {
            let path = s.path("human.qcow2");
            std::fs::write(&path, &case.bytes).expect("write case");
            let out = crate::check_support::run(
                "qemu-img",
                &["check", "-f", "qcow2", path.to_str().expect("utf-8")],
            );
            let ours = oracle::check::check(&case.bytes);
            if ours.failure.is_some() {
                continue;
            }
            compared += 1;
            let want = String::from_utf8_lossy(&out.stdout).into_owned();
            if want != ours.human() {
                failures.push(format!(
                    "{}:\n--- qemu-img\n{want}--- checker\n{}",
                    case.name,
                    ours.human()
                ));
            }
        }
    }
    assert!(compared > 30, "only {compared} reports compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Seeded random bit flips anywhere in the metadata clusters (header and
/// extensions included), compared with `qemu-img check` like the named
/// cases.
#[test]
fn checker_agrees_with_qemu_img_on_random_metadata_flips() {
    const PER_BASE: usize = 12;
    let s = Scratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(0xf120);
    let mut failures = Vec::new();
    for base in bases(&s) {
        let cs = crate::check_support::Layout::read(&base.bytes).cluster_size();
        let hot = (12 * cs).min(base.bytes.len() as u64);
        for n in 0..PER_BASE {
            let mut img = base.bytes.clone();
            let mut what = Vec::new();
            for _ in 0..rng.gen_range(1..=6) {
                let at = rng.gen_range(0..hot) as usize;
                let bit = rng.gen_range(0..8);
                img[at] ^= 1 << bit;
                what.push(format!("{at:#x}.{bit}"));
            }
            let path = s.path("flip.qcow2");
            std::fs::write(&path, &img).expect("write case");
            let (qrc, qjson) = qemu_check(&path, None);
            let ours = oracle::check::check(&img);
            let want = qjson.as_ref().map(project);
            let got = ours
                .failure
                .is_none()
                .then(|| project(&ours.to_qemu_json()));
            if qrc != ours.exit_code() || want != got {
                failures.push(format!(
                    "{}/flip-{n} [{}]: qemu-img exit {qrc} {want:?}\n    checker exit {} {got:?} failure={:?}",
                    base.name,
                    what.join(" "),
                    ours.exit_code(),
                    ours.failure
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
