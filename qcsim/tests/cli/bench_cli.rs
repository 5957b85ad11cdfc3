//! `qcsim bench --sim` as a user runs it: the JSON lines and the table
//! with its key, the JSON file beside it that a campaign report charts,
//! and clear refusals of bad arguments.

use std::path::Path;
use std::process::Command;

/// Run in a directory of its own: `bench --sim` writes
/// `reports/bench-sim.json` under the working directory.
fn qcsim(args: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    qcsim_in(args, dir.path())
}

fn qcsim_in(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("qcsim runs")
}

/// The table comes with a key to its columns and its rows as JSON lines
/// in `reports/bench-sim.json`, the same as `--json` prints; a campaign's
/// report then charts the ablation from that file.
#[test]
fn the_table_has_a_key_and_a_json_file_a_campaign_report_charts() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = ["bench", "--sim", "--size", "1M", "--workload", "seq4k"];
    let out = qcsim_in(&args, d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let key = text
        .split_once("key:\n")
        .map(|k| k.1)
        .unwrap_or_else(|| panic!("no key:\n{text}"));
    for column in [
        "dev wr/guest wr",
        "cow made",
        "cancelled",
        "zeroing",
        "ssd ms",
    ] {
        assert!(
            key.lines().any(|l| l.trim_start().starts_with(column)),
            "{column} not in the key:\n{key}"
        );
    }
    assert!(text.contains("json: reports/bench-sim.json"), "{text}");
    let file = std::fs::read_to_string(d.join("reports/bench-sim.json")).unwrap();
    let json = qcsim_in(
        &[
            "bench",
            "--sim",
            "--size",
            "1M",
            "--workload",
            "seq4k",
            "--json",
            "--json-out",
            "-",
        ],
        d,
    );
    assert_eq!(file, String::from_utf8(json.stdout).unwrap());
    assert_eq!(file.lines().count(), 7);

    let out = qcsim_in(
        &["campaign", "--seeds", "0..2", "--quiet", "--report", "rep"],
        d,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(d.join("rep/report.html")).unwrap();
    assert!(
        html.contains("bench seq4k: device writes per guest write"),
        "no ablation chart"
    );
    let md = std::fs::read_to_string(d.join("rep/report.md")).unwrap();
    assert!(
        md.contains("| seq4k | -delayed_cow |"),
        "no ablation rows:\n{md}"
    );
    // A file that is not bench output is refused before any case runs.
    std::fs::write(d.join("bad.json"), "{\"x\": 1}\n").unwrap();
    let out = qcsim_in(
        &[
            "campaign",
            "--seeds",
            "0..2",
            "--quiet",
            "--bench-json",
            "bad.json",
            "--report",
            "rep2",
        ],
        d,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json line 1"), "{err}");
    assert!(!d.join("rep2").exists());
}

#[test]
fn json_has_seven_rows_per_job() {
    let out = qcsim(&["bench", "--sim", "--json", "--size", "1M"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows.len(), 14);
    for (i, r) in rows.iter().enumerate() {
        let w = if i < 7 { "seq4k" } else { "seq4k-backing" };
        assert_eq!(r["workload"], w);
        assert_eq!(r["guest_writes"], 256);
        assert_eq!(r["guest_bytes"], 1 << 20);
        assert_eq!(r["guest_flushes"], 1);
    }
    // Row 0 all on, row 1 all off, then one switch off each.
    let offs = |r: &serde_json::Value| {
        r["switches"]
            .as_object()
            .unwrap()
            .values()
            .filter(|v| **v == false)
            .count()
    };
    assert_eq!(offs(&rows[0]), 0);
    assert_eq!(offs(&rows[1]), 5);
    assert!(rows[2..7].iter().all(|r| offs(r) == 1));
}

#[test]
fn table_names_each_row() {
    let out = qcsim(&["bench", "--sim", "--size", "1M", "--workload", "seq4k"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for label in [
        "all on",
        "all off",
        "-multi_cluster",
        "-delayed_metadata",
        "-zero_cow",
        "-merge_cow",
        "-delayed_cow",
    ] {
        assert!(text.contains(label), "{label} missing:\n{text}");
    }
    assert!(!text.contains("seq4k-backing"));
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["bench", "--sim", "--size", "1000"][..],
        &["bench", "--sim", "--size", "lots"],
        &["bench", "--size", "1M"],
    ] {
        let out = qcsim(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("qcsim: "), "{args:?}: {err}");
    }
}
