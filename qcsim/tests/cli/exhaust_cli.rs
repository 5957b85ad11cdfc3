//! `qcsim exhaust` from the command line: a narrow slice prints its counts
//! and passes; bad options are refused with a message.

use crate::support::{exec, QCSIM};

#[test]
fn a_narrow_exhaust_prints_its_counts() {
    let dir = tempfile::tempdir().unwrap();
    let out = exec(
        QCSIM,
        &[
            "exhaust",
            "--ops",
            "1",
            "--geometry",
            "4k,4k-backing",
            "--vocabulary",
            "W(A),U(AB)",
            "--jobs",
            "1",
        ],
        dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{}", crate::support::text(&out));
    // 2 geometries x 2 operations x a flush after or not.
    assert!(
        text.contains("workloads: 8, crash-free runs failed: 0"),
        "{text}"
    );
    assert!(text.contains("crash states: built "), "{text}");
    assert!(text.contains(", failed 0\n"), "{text}");
    assert!(text.contains("  4k-backing: 4 workloads"), "{text}");
    assert!(text.ends_with("PASS\n"), "{text}");
    // Nothing failed, so nothing was saved.
    assert!(!dir.path().join("corpus").exists());
}

#[test]
fn bad_exhaust_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (args, message) in [
        (&["exhaust", "--ops", "4"][..], "--ops 4"),
        (&["exhaust", "--geometry", "8k"][..], "--geometry \"8k\""),
        (
            &["exhaust", "--vocabulary", "W(C)"][..],
            "--vocabulary \"W(C)\"",
        ),
    ] {
        let out = exec(QCSIM, args, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}
