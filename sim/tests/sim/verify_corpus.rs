//! Every saved case under `corpus/` (any depth, `*.json`) replays and
//! passes: interesting cases kept on purpose, and failing cases a campaign
//! saved to `corpus/failing/` that have since been fixed (regression tests).

use std::path::{Path, PathBuf};

use sim::case::Case;
use sim::runner::{run_case, RunOptions};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus")
}

fn cases_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            cases_under(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

#[test]
fn every_corpus_case_passes() {
    let mut paths = Vec::new();
    cases_under(&corpus_dir(), &mut paths);
    paths.sort();
    assert!(!paths.is_empty(), "the corpus holds cases");
    let mut failed = Vec::new();
    for p in &paths {
        let case = Case::load(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let report = run_case(&case, &RunOptions::default());
        println!(
            "{}: {} (trace hash {:016x})",
            p.display(),
            if report.passed() { "pass" } else { "FAIL" },
            report.trace_hash
        );
        if !report.passed() {
            let first = report.failures[0].to_string();
            failed.push(format!("{}: {first}", p.display()));
        }
    }
    assert!(
        failed.is_empty(),
        "corpus cases failed:\n{}",
        failed.join("\n")
    );
}
