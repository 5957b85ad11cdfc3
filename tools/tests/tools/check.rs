//! `tools::check`: qemu-img check's verdicts and exit codes on planted
//! damage, repair, and the typed errors.

use engine::dev::FileOpenError;
use oracle::check::RepairError;
use testkit::assert_clean;
use tools::check::{check_file, CheckError, CheckOptions, RepairMode};
use tools::files::OpenError;

use crate::support::{plant_leak, plant_zero_refcount, qcow2, truncate};

fn check(path: &std::path::Path) -> tools::check::CheckOutcome {
    check_file(path, &CheckOptions::default()).unwrap()
}

fn repair(path: &std::path::Path, mode: RepairMode) -> tools::check::CheckOutcome {
    let opts = CheckOptions {
        repair: Some(mode),
        ..CheckOptions::default()
    };
    check_file(path, &opts).unwrap()
}

#[test]
fn a_clean_image_checks_clean() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[(0, 7, 65536)]);
    let outcome = check(&path);
    assert_eq!(outcome.exit_code(), 0);
    assert!(!outcome.check_failed());
    assert_eq!(outcome.finding_messages().count(), 0);
    assert_eq!(outcome.report.filename, path.display().to_string());
    assert!(
        outcome
            .human()
            .starts_with("No errors were found on the image.\n"),
        "{}",
        outcome.human()
    );
    let json: serde_json::Value = serde_json::from_str(&outcome.json()).unwrap();
    assert_eq!(json["check-errors"], 0);
    assert_eq!(json["filename"], path.display().to_string());
}

#[test]
fn a_planted_leak_is_found_and_repaired() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    // Two clusters of data behind one L2 table, which is then unlinked:
    // the table and both data clusters leak.
    let path = qcow2(dir.path(), "leak.qcow2", &[(0, 0xab, 2 * 65536)]);
    plant_leak(&path);
    let before = std::fs::read(&path).unwrap();

    let found = check(&path);
    assert_eq!(found.exit_code(), 3, "leaks only");
    assert_eq!(found.report.leaks, 3);
    assert_eq!(found.report.corruptions, 0);
    let messages: Vec<&str> = found.finding_messages().collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(
        messages
            .iter()
            .all(|m| m.starts_with("Leaked cluster ") && m.ends_with(" refcount=1 reference=0")),
        "{messages:?}"
    );
    assert!(
        found
            .human()
            .contains("\n3 leaked clusters were found on the image.\n"),
        "{}",
        found.human()
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a check writes nothing"
    );

    let repaired = repair(&path, RepairMode::Leaks);
    assert_eq!(repaired.exit_code(), 0);
    assert_eq!(repaired.report.leaks_fixed, 3);
    assert_eq!(repaired.report.leaks, 0);
    assert!(
        repaired
            .human()
            .starts_with("The following inconsistencies were found and repaired:\n\n    3 leaked clusters\n    0 corruptions\n"),
        "{}",
        repaired.human()
    );
    assert_eq!(check(&path).exit_code(), 0);
    assert_clean(&path, "the repaired image");
}

#[test]
fn a_planted_corruption_exits_2_and_repair_all_fixes_it() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "cor.qcow2", &[(0, 1, 512)]);
    // Cluster 3 is the L1 table of a fresh image: in use, refcount 0.
    plant_zero_refcount(&path, 3);
    let found = check(&path);
    assert_eq!(found.exit_code(), 2);
    assert_eq!(found.report.corruptions, 1);
    assert_eq!(
        found.finding_messages().collect::<Vec<_>>(),
        ["ERROR cluster 3 refcount=0 reference=1"]
    );

    // Leaks-only repair cannot fix it, and says the check failed.
    let leaks_only = repair(&path, RepairMode::Leaks);
    assert_eq!(leaks_only.exit_code(), 1);
    assert!(leaks_only.check_failed());
    assert_eq!(
        leaks_only.failure(),
        Some("ERROR need to rebuild refcount structures")
    );

    let fixed = repair(&path, RepairMode::All);
    assert_eq!(fixed.exit_code(), 0, "{}", fixed.human());
    assert_eq!(fixed.report.corruptions_fixed, 1);
    assert_eq!(check(&path).exit_code(), 0);
    assert_clean(&path, "the rebuilt image");
}

#[test]
fn refusals_are_typed_errors_naming_the_file() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[]);
    let opts = CheckOptions {
        repair: Some(RepairMode::Leaks),
        force_share: true,
    };
    let err = check_file(&path, &opts).unwrap_err();
    assert!(
        matches!(&err, CheckError::ForceShareRepair { path: p } if *p == path),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with(&format!("Could not open '{}': force-share", path.display())),
        "{err}"
    );

    let missing = dir.path().join("missing.qcow2");
    let err = check_file(&missing, &CheckOptions::default()).unwrap_err();
    match &err {
        CheckError::Open { path: p, error } => {
            assert_eq!(p, &missing);
            match &**error {
                OpenError::File(FileOpenError::Open { error, .. }) => {
                    assert_eq!(error.kind(), std::io::ErrorKind::NotFound)
                }
                other => panic!("not a missing file: {other:?}"),
            }
        }
        other => panic!("not an open error: {other:?}"),
    }

    // A header cut short: the check reports a failure, the repair cannot
    // open the image at all.
    truncate(&path, 100);
    let outcome = check(&path);
    assert_eq!(outcome.exit_code(), 1);
    assert!(outcome.failure().is_some());
    let err = check_file(
        &path,
        &CheckOptions {
            repair: Some(RepairMode::All),
            ..CheckOptions::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, CheckError::Repair { path: p, error: RepairError::Open(_) } if *p == path),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&format!(
            "Could not open '{}': could not open the image",
            path.display()
        )),
        "{err}"
    );
}

/// `qemu-img check [-r MODE] --output json PATH`'s standard output.
fn qemu_json(path: &std::path::Path, repair: Option<&str>) -> String {
    let mut args = vec!["check", "-f", "qcow2", "--output", "json"];
    if let Some(r) = repair {
        args.extend(["-r", r]);
    }
    let name = path.to_str().unwrap();
    args.push(name);
    let out = testkit::exec("qemu-img", &args, path.parent().unwrap());
    String::from_utf8(out.stdout).unwrap()
}

/// qcsim prints `json()` and a newline: byte for byte what qemu-img prints
/// for a clean, a leaky and a corrupt image, and for repairs (the copies'
/// names aside).
#[test]
fn the_json_report_is_qemu_imgs_byte_for_byte() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let clean = qcow2(dir.path(), "clean.qcow2", &[(0, 7, 65536)]);
    let leaky = qcow2(dir.path(), "leak.qcow2", &[(0, 0xab, 2 * 65536)]);
    plant_leak(&leaky);
    let corrupt = qcow2(dir.path(), "cor.qcow2", &[(0, 1, 512)]);
    plant_zero_refcount(&corrupt, 3);
    for path in [&clean, &leaky, &corrupt] {
        assert_eq!(
            check(path).json() + "\n",
            qemu_json(path, None),
            "{}",
            path.display()
        );
    }
    for (path, mode, flag) in [
        (&leaky, RepairMode::Leaks, "leaks"),
        (&corrupt, RepairMode::All, "all"),
    ] {
        let theirs = path.with_extension("qemu.qcow2");
        std::fs::copy(path, &theirs).unwrap();
        let want = qemu_json(&theirs, Some(flag))
            .replace(theirs.to_str().unwrap(), path.to_str().unwrap());
        assert_eq!(repair(path, mode).json() + "\n", want, "-r {flag}");
    }
}

/// qemu-img check opens an image's external data file (and locks it); one
/// that cannot be opened fails the check, naming it.
#[test]
fn a_missing_data_file_is_a_typed_error_naming_it() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("df.qcow2");
    let data = dir.path().join("df.data");
    let opts = format!("data_file={}", data.display());
    testkit::qemu_create(&path, &opts, "1M", None);
    assert_eq!(check(&path).exit_code(), 0);
    std::fs::remove_file(&data).unwrap();
    let err = check_file(&path, &CheckOptions::default()).unwrap_err();
    match &err {
        CheckError::Open { error, .. } => {
            assert!(matches!(**error, OpenError::DataFile { .. }), "{err}")
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("df.data"), "{err}");
    assert_eq!(testkit::qemu_check(&path, None).0, 1, "qemu-img fails too");
}
