//! A run is a pure function of its case: `qcsim run --seed 7` twice and
//! `qcsim replay` of its saved case print the same trace hash, and in
//! process the same seed gives the same hash while different seeds differ.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use sim::case::Case;
use sim::runner::{run_case, RunOptions};
use sim::workload::Profile;

/// Run the binary; return its stdout's trace hash line.
fn qcsim_hash(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(args)
        .output()
        .expect("qcsim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.code().is_some(),
        "qcsim {args:?} was killed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find(|l| l.starts_with("trace hash: "))
        .unwrap_or_else(|| panic!("no trace hash from qcsim {args:?}: {stdout}"))
        .to_string()
}

#[test]
fn run_twice_and_replay_print_one_hash() {
    let dir = tempfile::tempdir().expect("temp dir");
    let saved = dir.path().join("seed-7.json");
    let saved = saved.to_str().expect("utf-8 path");
    let first = qcsim_hash(&["run", "--seed", "7", "--save", saved]);
    let second = qcsim_hash(&["run", "--seed", "7"]);
    let replayed = qcsim_hash(&["replay", saved]);
    assert_eq!(first, second, "run --seed 7 twice");
    assert_eq!(first, replayed, "replay of the saved case");
    assert!(Path::new(saved).exists());
    // The saved case is the generated one, whole.
    let loaded = Case::load(Path::new(saved)).expect("saved case loads");
    assert_eq!(loaded, Case::generate(7, Profile::Mixed));
    let hash = run_case(&loaded, &RunOptions::default()).trace_hash;
    assert_eq!(first, format!("trace hash: {hash:016x}"), "in process");
}

#[test]
fn same_seed_same_hash_other_seed_other_hash() {
    let mut seen = BTreeMap::new();
    for (seed, profile) in [
        (1, Profile::Random),
        (2, Profile::Backing),
        (3, Profile::Mixed),
        (4, Profile::Mkfs),
        (5, Profile::Iozone),
        (6, Profile::Bench),
        (8, Profile::Sequential),
    ] {
        let case = Case::generate(seed, profile);
        let a = run_case(&case, &RunOptions::default());
        let b = run_case(&case, &RunOptions::default());
        assert_eq!(a.trace_hash, b.trace_hash, "seed {seed} ({profile})");
        assert_eq!(a.failures, b.failures, "seed {seed} ({profile})");
        assert_eq!(a.stats, b.stats, "seed {seed} ({profile})");
        if let Some(other) = seen.insert(a.trace_hash, seed) {
            panic!(
                "seeds {other} and {seed} share trace hash {:016x}",
                a.trace_hash
            );
        }
    }
}
