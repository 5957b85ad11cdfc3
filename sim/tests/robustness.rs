//! Robustness of the harness itself (issue 10): cases that validation
//! accepts must run to a verdict (no panic, no endless loop, bounded
//! memory), a livelock verdict must mean the engine is at fault, and what
//! cannot run must be refused with a message naming the field.

use sim::case::{Case, CaseError};

/// An error and its `source()` chain, as anyhow's `{:#}` prints it (and
/// so as the `qcsim` binary reports errors).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

#[test]
fn case_json_errors_name_their_cause_once() {
    let e = Case::from_json("?").unwrap_err();
    assert!(matches!(e, CaseError::Json(_)), "{e}");
    let text = chain(&e);
    assert_eq!(
        text.matches("expected value at line 1 column 1").count(),
        1,
        "{text}"
    );
    // What the binary prints.
    let printed = format!("{:#}", anyhow::Error::from(e));
    assert_eq!(printed, "case JSON: expected value at line 1 column 1");

    let dir = tempfile::tempdir().unwrap();
    let e = Case::load(&dir.path().join("none.json")).unwrap_err();
    assert!(matches!(e, CaseError::Io { .. }), "{e}");
    let text = chain(&e);
    assert!(text.contains("none.json"), "{text}");
    assert_eq!(text.matches("(os error 2)").count(), 1, "{text}");
}

#[test]
fn enumerate_errors_name_their_cause_once() {
    let e = sim::runner::EnumerateError::from(sim::disk::CrashError::NotTracked);
    let text = chain(&e);
    assert_eq!(text.matches("crash tracking").count(), 1, "{text}");
}
