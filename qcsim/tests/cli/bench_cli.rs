//! `qcsim bench --sim` as a user runs it: the JSON lines and the table, and
//! clear refusals of bad arguments.

use std::process::Command;

fn qcsim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(args)
        .output()
        .expect("qcsim runs")
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
