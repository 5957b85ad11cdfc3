//! The findings ledger (`corpus/findings.json`, docs/findings.md) stays
//! true without running any other driver: the list loads, every case it
//! names exists under `corpus/regressions/` (where `verify_corpus` replays
//! it on the engine and requires a pass), every
//! `corpus/regressions/<driver>-*` case is in it, every finding has its
//! entry in docs/findings.md with its case paths, a malformed list is
//! refused with a message naming the problem, and the script-kind
//! finding reports "gone" on qcsim's own tools. Replaying the findings on
//! their drivers (`qcsim findings`) is not part of the default run.

use std::path::{Path, PathBuf};

use crate::support::{exec, qcsim, text, QCSIM};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn ledger() -> serde_json::Value {
    let text = std::fs::read_to_string(repo().join("corpus/findings.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn the_findings_list_loads_and_names_every_case_of_another_driver() {
    let root = repo();
    let out = qcsim(&["findings", "--dry-run"], &root);
    let ledger = ledger();
    let findings = ledger["findings"].as_array().unwrap();
    assert!(
        out.starts_with(&format!(
            "findings: {} of {}",
            findings.len(),
            findings.len()
        )),
        "{out}"
    );
    // The data-file defect is the ledger's first entry, with seed 82's
    // case beside seed 55's.
    assert_eq!(findings[0]["id"], "qemu-data-file-cow-lost");
    for f in findings {
        let id = f["id"].as_str().unwrap();
        assert!(out.contains(&format!("{id} (")), "{id} not printed: {out}");
    }
    assert!(
        out.contains("qemu-data-file-cow-lost-seed-82.json"),
        "{out}"
    );
}

#[test]
fn every_finding_has_its_entry_in_the_docs() {
    let doc = std::fs::read_to_string(repo().join("docs/findings.md")).unwrap();
    for f in ledger()["findings"].as_array().unwrap() {
        let id = f["id"].as_str().unwrap();
        assert!(
            doc.contains(&format!("\n## {id}\n")),
            "docs/findings.md has no `## {id}` entry"
        );
        let files: Vec<&str> = match f["replay"]["kind"].as_str() {
            Some("cases") => f["replay"]["cases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["case"].as_str().unwrap())
                .collect(),
            _ => vec![f["replay"]["script"].as_str().unwrap()],
        };
        for file in files {
            assert!(doc.contains(file), "docs/findings.md does not name {file}");
        }
    }
    for n in ledger()["not_defects"].as_array().unwrap() {
        let case = n["case"].as_str().unwrap();
        assert!(doc.contains(case), "docs/findings.md does not name {case}");
    }
}

/// A repository with the ledger's layout: `corpus/regressions/` holding
/// `cases`, and `corpus/findings.json` holding `list`.
fn fake_repo(cases: &[&str], list: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let reg = dir.path().join("corpus/regressions");
    std::fs::create_dir_all(&reg).unwrap();
    for c in cases {
        std::fs::write(reg.join(c), "{}").unwrap();
    }
    std::fs::write(dir.path().join("corpus/findings.json"), list).unwrap();
    dir
}

/// A list of one case finding of `case`, with `extra` fields at the top.
fn one_finding(case: &str, extra: &str) -> String {
    format!(
        r#"{{"format": "qcsim-findings", "version": 1, {extra}
  "findings": [{{"id": "qemu-x", "driver": "qemu", "seen_with": "v",
    "replay": {{"kind": "cases", "cases": [{{"case": "{case}", "symptom": "s"}}]}},
    "guest_sees": "g", "upstream_fix": "unknown"}}]}}"#
    )
}

fn refused(dir: &Path, needle: &str) {
    let out = exec(QCSIM, &["findings", "--dry-run"], dir);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains(needle), "no {needle:?} in {all}");
    assert!(!all.contains("panicked"), "{all}");
}

#[test]
fn a_malformed_findings_list_is_refused_naming_the_problem() {
    let ok = one_finding("corpus/regressions/qemu-x-seed-1.json", "");
    let d = fake_repo(&["qemu-x-seed-1.json"], &ok);
    qcsim(&["findings", "--dry-run"], d.path());

    let d = fake_repo(&["qemu-x-seed-1.json"], "{\"format\": ");
    refused(d.path(), "corpus/findings.json: not a findings list");
    let d = fake_repo(&[], &ok);
    refused(
        d.path(),
        "its case corpus/regressions/qemu-x-seed-1.json does not exist",
    );
    let d = fake_repo(&["qemu-x-seed-1.json", "qemu-y-seed-2.json"], &ok);
    refused(
        d.path(),
        "corpus/regressions/qemu-y-seed-2.json: a case of a driver other than ours, in neither",
    );
    let d = fake_repo(&["qemu-x-seed-1.json", "qcow2-rs-z-seed-3.json"], &ok);
    refused(
        d.path(),
        "corpus/regressions/qcow2-rs-z-seed-3.json: a case of a driver other than ours, in neither",
    );
    let d = fake_repo(
        &["qemu-x-seed-1.json"],
        &ok.replace("\"version\": 1", "\"version\": 9"),
    );
    refused(d.path(), "expected \"qcsim-findings\" version 1");
    let d = fake_repo(&["x.json"], &one_finding("corpus/regressions/x.json", ""));
    refused(d.path(), "is not corpus/regressions/qemu-....json");
    let d = fake_repo(
        &["qemu-x-seed-1.json"],
        &ok.replace("\"driver\": \"qemu\"", "\"driver\": \"vbox\""),
    );
    refused(d.path(), "driver \"vbox\" is not one of qemu, imago");
    let d = fake_repo(
        &["qemu-x-seed-1.json"],
        &ok.replace("\"guest_sees\"", "\"guest_see\""),
    );
    refused(d.path(), "unknown field `guest_see`");
    let out = exec(QCSIM, &["findings", "--dry-run", "no-such-id"], &repo());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("no finding with id \"no-such-id\""));
}

/// The amend finding's script, run on qcsim's own drop-in tools instead of
/// QEMU's, says "gone": the engine's counterpart of replaying a crash case
/// on the engine (`verify_corpus`). Exit status 11 is the script's "gone".
#[test]
fn the_amend_finding_is_gone_on_qcsims_tools() {
    let script = repo().join("scripts/findings/qemu-amend-downgrade-shared-zero.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .args(["--tools", "qcsim"])
        .env("QCSIM", QCSIM)
        .output()
        .unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(11), "{all}");
    assert!(all.contains("verdict: gone: qemu-img check clean"), "{all}");
}

/// The qcow2-rs findings replay in process, with no QEMU: each is still
/// present on the vendored qcow2-rs (a fix there shows as "gone" here
/// first), and the small-cluster panic is caught as the case's failure.
#[test]
fn the_qcow2_rs_findings_replay_in_process_and_are_present() {
    let ids: Vec<String> = ledger()["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["driver"].as_str().unwrap().starts_with("qcow2-rs"))
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 5, "{ids:?}");
    let mut args = vec!["findings"];
    args.extend(ids.iter().map(String::as_str));
    let out = qcsim(&args, &repo());
    for id in &ids {
        assert!(out.contains(&format!("{id} (")), "{id} not replayed: {out}");
    }
    assert!(
        out.contains("findings: 5 still present, 0 gone, 0 failing otherwise, 0 could not run"),
        "{out}"
    );
}
