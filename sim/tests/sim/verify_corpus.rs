//! Every committed case under `corpus/` replays on the engine and passes:
//! the cases kept on purpose (`generated/`) and the regressions, failing
//! cases that have since been fixed (`regressions/`, QEMU's settled cases
//! among them: they must pass on the engine too).
//!
//! Only those folders are read. What campaigns write (`failing/`, git
//! ignored: cases that fail until their bug is fixed, cases of a broken
//! engine variant, `--driver qemu|imago` case directories) and the fuzz
//! corpus (`fuzz/`, fuzzer bytes, not case JSON) are never replayed here:
//! a user's campaign must not break the test command. A new folder under
//! `corpus/` fails the test until it is named in one list or the other.

use std::path::{Path, PathBuf};

use sim::case::Case;
use sim::runner::{run_case, RunOptions};

/// The committed folders of cases, each replayed and required to pass.
const REPLAYED: &[&str] = &["generated", "regressions"];

/// Folders that hold no committed case JSON: what campaigns write, and
/// the fuzzers' inputs.
const NOT_REPLAYED: &[&str] = &["failing", "fuzz"];

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

/// The committed cases of the corpus at `corpus`, in a stable order.
fn committed_cases(corpus: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for folder in REPLAYED {
        let dir = corpus.join(folder);
        if dir.is_dir() {
            cases_under(&dir, &mut paths);
        }
    }
    paths.sort();
    paths
}

#[test]
fn every_folder_of_the_corpus_is_replayed_or_named_as_not() {
    let entries = std::fs::read_dir(corpus_dir()).unwrap_or_else(|e| panic!("corpus/: {e}"));
    for e in entries {
        let e = e.expect("dir entry");
        if !e.path().is_dir() {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(
            REPLAYED.contains(&name.as_str()) || NOT_REPLAYED.contains(&name.as_str()),
            "corpus/{name}/ is neither replayed nor named as not replayed: add it to \
             REPLAYED or NOT_REPLAYED in sim/tests/sim/verify_corpus.rs"
        );
    }
}

/// A campaign's output under `corpus/failing/` (a case of a broken
/// variant, which this build cannot load; a `--driver qemu` case
/// directory) and the fuzzers' inputs are not read; the committed folders
/// are, at any depth.
#[test]
fn what_campaigns_write_is_not_replayed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path();
    let files = [
        "generated/random-seed-1.json",
        "regressions/deep/bug-seed-2.json",
        "failing/seed-1.json",
        "failing/qemu-seed-55/case.json",
        "fuzz/case/input.json",
    ];
    for f in files {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().expect("a folder")).expect("mkdir");
        std::fs::write(&p, "{}").expect("write");
    }
    let found: Vec<String> = committed_cases(root)
        .iter()
        .map(|p| {
            p.strip_prefix(root)
                .expect("under the root")
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(
        found,
        [
            "generated/random-seed-1.json",
            "regressions/deep/bug-seed-2.json"
        ]
    );
}

#[test]
fn every_corpus_case_passes() {
    let paths = committed_cases(&corpus_dir());
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
