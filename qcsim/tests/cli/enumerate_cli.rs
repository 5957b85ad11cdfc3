//! `qcsim enumerate` from the command line: a generated small workload and
//! a saved case, counts printed, exit code 0 when every state passes.

use std::process::Command;

fn qcsim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(args)
        .output()
        .expect("qcsim runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn enumerates_a_generated_workload() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("small.json");
    let saved = saved.to_str().unwrap();
    let (code, out, err) = qcsim(&["enumerate", "--seed", "2", "--cap", "16", "--save", saved]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("crash point in group"), "{out}");
    assert!(out.contains("crash states"), "{out}");
    assert!(out.contains(": 0 failed"), "{out}");
    // The saved case enumerates the same way, as JSON.
    let (code, out, err) = qcsim(&["enumerate", "--case", saved, "--cap", "16", "--json"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["checked"].as_u64().unwrap() >= 1);
    assert!(v["checked"].as_u64().unwrap() <= 16);
    assert_eq!(v["failing"].as_array().unwrap().len(), 0);
}

#[test]
fn refuses_a_case_without_crash() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nocrash.json");
    let mut case = sim::case::Case::generate(1, sim::workload::Profile::Random);
    case.workload = vec![vec![sim::case::Op::Flush]];
    case.save(&path).unwrap();
    let (code, out, err) = qcsim(&["enumerate", "--case", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("no crash point"), "{err}");
}

#[test]
fn shrink_refuses_a_passing_case() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pass.json");
    let mut case = sim::case::Case::generate(1, sim::workload::Profile::Random);
    case.disk.faults.enabled = false;
    case.workload = vec![vec![sim::case::Op::Write {
        sector: 0,
        sectors: 4,
        fua: false,
    }]];
    case.save(&path).unwrap();
    let (code, out, err) = qcsim(&["shrink", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(err.contains("does not fail"), "{err}");
    assert!(!dir.path().join("pass.shrunk.json").exists());
}
