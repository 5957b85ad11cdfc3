//! A long command whose standard error is not a terminal (a log, CI,
//! `2>&1 | cat`) prints plain progress lines there, never into standard
//! output, and none with `--quiet`.

use std::process::{Command, Stdio};

use super::support::QCSIM;

fn campaign(extra: &[&str], every: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(QCSIM)
        .args([
            "campaign", "--seeds", "0..6", "--jobs", "1", "--report", "r",
        ])
        .args(extra)
        .env("QCSIM_PROGRESS_EVERY", every)
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_campaign_logs_progress_lines_to_standard_error_only() {
    // A line at every step: each case's, then the last.
    let (stdout, stderr) = campaign(&[], "0");
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines.len() >= 6,
        "a line per case and a last one:\n{stderr}"
    );
    assert!(
        lines[0].starts_with("qcsim campaign: 1/6 cases (16%), ") && lines[0].contains(" so far"),
        "{stderr}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("qcsim campaign: done, 6/6 cases in "),
        "{stderr}"
    );
    assert!(!stdout.contains("qcsim campaign:"), "{stdout}");
    // At the default pace a six-case run may print none; with --quiet,
    // never one, however fast the pace.
    let (_, quiet) = campaign(&["--quiet"], "0");
    assert_eq!(quiet, "", "--quiet prints no progress");
}
