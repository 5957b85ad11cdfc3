//! `qcsim exhaust` from the command line: a narrow slice prints its counts
//! and passes; bad options are refused with a message.

use crate::support::{exec, QCSIM};

/// Runs `qcsim exhaust --ops 1 --jobs 1` with `args` in a fresh directory,
/// which it returns with standard output; the run must pass.
fn exhaust_passing(args: &[&str]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let all: Vec<&str> = ["exhaust", "--ops", "1", "--jobs", "1"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    let out = exec(QCSIM, &all, dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", crate::support::text(&out));
    (dir, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_narrow_exhaust_prints_its_counts() {
    let (dir, text) =
        exhaust_passing(&["--geometry", "4k,4k-backing", "--vocabulary", "W(A),U(AB)"]);
    // The default's 3 switch sets x 2 geometries x 2 operations x a flush
    // after or not.
    assert!(
        text.contains("workloads: 24, crash-free runs failed: 0"),
        "{text}"
    );
    assert!(
        text.contains("switches 11111 (all on): 4k up to 1 ops, 4k-backing up to 1 ops\n"),
        "{text}"
    );
    assert!(
        text.contains("switches 11101 (all on but delayed_metadata): 4k up to 1 ops"),
        "{text}"
    );
    assert!(
        text.contains("switches 01111 (all on but delayed_cow): 4k up to 1 ops"),
        "{text}"
    );
    assert!(text.contains("crash states: built "), "{text}");
    assert!(text.contains(", failed 0\n"), "{text}");
    assert!(text.contains("  11111 4k-backing: 4 workloads"), "{text}");
    assert!(text.contains("  01111 4k-backing: 4 workloads"), "{text}");
    assert!(text.ends_with("PASS\n"), "{text}");
    // Nothing failed, so nothing was saved.
    assert!(!dir.path().join("corpus").exists());
}

#[test]
fn switch_sets_are_chosen_on_the_command_line() {
    let (_dir, text) = exhaust_passing(&[
        "--geometry",
        "64k-extl2",
        "--vocabulary",
        "W(A)",
        "--switches",
        "none,29",
    ]);
    // Each named set on the geometry, the default's sets not at all.
    assert!(
        text.contains("workloads: 4, crash-free runs failed: 0"),
        "{text}"
    );
    assert!(
        text.contains("switches 00000 (none): 64k-extl2 up to 1 ops\n"),
        "{text}"
    );
    assert!(text.contains("  11101 64k-extl2: 2 workloads"), "{text}");
    assert!(!text.contains("11111"), "{text}");
}

/// The FUA vocabulary: every workload of up to two FUA requests passes on
/// the engine, and each of the two FUA broken variants fails some (at
/// two requests).
#[test]
fn the_fua_vocabulary_passes_and_catches_the_fua_variants() {
    let (_dir, text) = exhaust_passing(&[
        "--geometry",
        "4k",
        "--vocabulary",
        "fua",
        "--switches",
        "all",
    ]);
    assert!(
        text.contains("9 operations (FW(A) FW(B) FW(AB) FU(A) FU(B) FU(AB) FZ(A) FZ(B) FZ(AB))"),
        "{text}"
    );
    assert!(
        text.contains("workloads: 18, crash-free runs failed: 0"),
        "{text}"
    );
    assert!(text.ends_with("PASS\n"), "{text}");
    for variant in ["fua-before-l2", "fua-without-preflush"] {
        let dir = tempfile::tempdir().unwrap();
        let args = [
            "exhaust",
            "--ops",
            "2",
            "--jobs",
            "1",
            "--geometry",
            "4k",
            "--vocabulary",
            "fua",
            "--switches",
            "all",
            "--broken",
            variant,
        ];
        let out = exec(QCSIM, &args, dir.path());
        let text = crate::support::text(&out);
        assert_eq!(out.status.code(), Some(1), "{variant}: {text}");
        // A debug build's rule assertion (engine/src/rules.rs) stops it
        // first; a release build's checker finds the lost write.
        assert!(
            text.contains("crash rule broken: ")
                || text.contains("held zeroes, but the model allowed only write #"),
            "{variant}: {text}"
        );
    }
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
        (
            &["exhaust", "--switches", "all,cycle"][..],
            "--switches \"cycle\"",
        ),
        (&["exhaust", "--switches", "32"][..], "--switches \"32\""),
    ] {
        let out = exec(QCSIM, args, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}
