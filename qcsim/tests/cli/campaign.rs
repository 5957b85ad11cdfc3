//! `qcsim campaign`'s report directory and `qcsim report merge`: the three
//! files and their stable fields, the fixed naming bugs (`--switches 31`
//! as a number, profiles as the CLI spells them, one directory per range
//! and shard), shards merging into the totals and trace hash of one
//! campaign, merge refusing bad input without touching its output, and
//! report.html rendering in headless Chromium with no console error,
//! opening with the failures (or that all passed) and a table of contents
//! whose links all land.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{exec, text, QCSIM};

/// Run a campaign in `dir`; it must pass. Returns its standard output.
fn campaign(dir: &Path, args: &[&str]) -> String {
    campaign_exiting(dir, args, 0)
}

/// Run a campaign in `dir`; it must exit with `code` (1: cases failed).
/// Returns its standard output.
fn campaign_exiting(dir: &Path, args: &[&str], code: i32) -> String {
    let mut all = vec!["campaign", "--jobs", "2", "--quiet", "--corpus", "c"];
    all.extend_from_slice(args);
    let out = exec(QCSIM, &all, dir);
    assert_eq!(out.status.code(), Some(code), "{all:?}: {}", text(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn summary(dir: &Path) -> Value {
    let path = dir.join("summary.json");
    serde_json::from_slice(
        &std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
    .unwrap()
}

/// The printed `trace hash: X`.
fn printed_hash(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("trace hash: "))
        .unwrap_or_else(|| panic!("no trace hash in:\n{stdout}"))
        .trim()
        .to_string()
}

#[test]
fn a_campaign_writes_summary_markdown_and_html() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let stdout = campaign(
        d,
        &["--seeds", "0..24", "--switches", "31", "--report", "rep"],
    );
    let rep = d.join("rep");
    let s = summary(&rep);
    assert_eq!(s["format"], "qcsim-campaign-report");
    assert_eq!(s["format_version"], 1);
    assert!(s["revision"].is_string(), "{s}");
    let c = &s["campaign"];
    // The mask as given, not the debug string of a Rust value.
    assert_eq!(c["switches"], "31", "{c}");
    assert_eq!(c["profile"], "mixed");
    assert_eq!(c["seeds"], serde_json::json!([0, 24]));
    let r = &s["result"];
    assert_eq!(r["cases"], 24);
    assert_eq!(
        r["passed"].as_u64().unwrap() + r["failed"].as_u64().unwrap(),
        24
    );
    assert_eq!(r["trace_hash"].as_str().unwrap(), printed_hash(&stdout));
    assert_eq!(r["case_hashes"].as_array().unwrap().len(), 24);
    for field in [
        "guest_ops",
        "crash_states_checked",
        "rare_paths",
        "rare_path_cases",
        "excused",
        "fault_kinds",
        "optimisations",
    ] {
        assert!(
            !r["totals"][field].is_null(),
            "totals.{field}: {}",
            r["totals"]
        );
    }
    // Profiles as the command line spells them, and their cases add up.
    let profiles = r["per_profile"].as_object().unwrap();
    let names = ["random", "sequential", "iozone", "bench", "mkfs", "backing"];
    assert!(
        profiles.keys().all(|k| names.contains(&k.as_str())),
        "{profiles:?}"
    );
    let cases: u64 = profiles
        .values()
        .map(|p| p["cases"].as_u64().unwrap())
        .sum();
    assert_eq!(cases, 24);
    // Every case ran with all switches on.
    let switches = r["per_switches"].as_object().unwrap();
    assert_eq!(switches.keys().collect::<Vec<_>>(), ["31"], "{switches:?}");
    assert_eq!(switches["31"]["cases"], 24);
    assert!(
        r["fault_coverage"]["cases_by_kind"]["eio_write"].is_u64(),
        "{}",
        r["fault_coverage"]
    );
    assert_eq!(
        r["optimisations"]["cow_created"],
        r["totals"]["optimisations"]["cow_created"]
    );
    // Timing apart from the result, one run of 24 cases.
    let run = &s["timing"]["runs"][0];
    assert_eq!(
        run["progress"].as_array().unwrap().last().unwrap()[1],
        24,
        "{run}"
    );
    assert!(r.get("timing").is_none() && r.get("wall_seconds").is_none());

    let md = std::fs::read_to_string(rep.join("report.md")).unwrap();
    for section in [
        "## Summary",
        "## Per profile",
        "## Fault coverage",
        "## Rare paths",
        "## Crash points",
        "## Excused errors",
        "## Optimisations",
    ] {
        assert!(md.contains(section), "no {section} in report.md");
    }
    // Every step of every operation has its row, crashed or not.
    assert!(
        md.contains("snapshot_create.copied_cleared") && md.contains("shrink.l1"),
        "no crash point rows in report.md"
    );
    let html = std::fs::read_to_string(rep.join("report.html")).unwrap();
    assert!(
        html.contains("<h2 id=\"summary\">Summary</h2>")
            && html.contains("<table id=\"summary-table\">"),
        "no summary table"
    );
    assert!(html.matches("<svg").count() >= 4, "too few charts");
    // Self-contained: nothing to run or fetch.
    for external in ["<script", " src=", "<link"] {
        assert!(!html.contains(external), "{external} in report.html");
    }
}

/// Without `--report`, each range and shard gets its own directory under
/// `--reports`, so shards of one range never overwrite each other.
#[test]
fn shards_of_one_range_write_separate_directories() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for shard in ["0/2", "1/2"] {
        campaign(d, &["--seeds", "0..4", "--shard", shard, "--reports", "r"]);
    }
    for name in ["campaign-0-4-shard-0-of-2", "campaign-0-4-shard-1-of-2"] {
        let s = summary(&d.join("r").join(name));
        assert_eq!(s["result"]["cases"], 2, "{name}");
    }
}

/// Merging `--shard 0/3`, `1/3` and `2/3` gives the totals, the
/// per-profile and per-switch counts and the combined trace hash of one
/// campaign over the range.
#[test]
fn merged_shards_equal_one_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let whole = campaign(
        d,
        &[
            "--seeds",
            "0..30",
            "--switches",
            "cycle",
            "--report",
            "whole",
        ],
    );
    for i in 0..3 {
        let shard = format!("{i}/3");
        let out = format!("s{i}");
        campaign(
            d,
            &[
                "--seeds",
                "0..30",
                "--switches",
                "cycle",
                "--shard",
                &shard,
                "--report",
                &out,
            ],
        );
        let cases = summary(&d.join(&out))["result"]["cases"].as_u64().unwrap();
        assert_eq!(cases, 10, "shard {shard}");
    }
    let out = exec(
        QCSIM,
        &["report", "merge", "s2", "s0", "s1", "-o", "merged"],
        d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let merged_stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let (m, w) = (summary(&d.join("merged")), summary(&d.join("whole")));
    for field in [
        "cases",
        "passed",
        "failed",
        "trace_hash",
        "totals",
        "per_profile",
        "per_switches",
        "fault_coverage",
        "optimisations",
        "case_hashes",
        "failing_seeds",
    ] {
        assert_eq!(m["result"][field], w["result"][field], "result.{field}");
    }
    assert_eq!(printed_hash(&merged_stdout), printed_hash(&whole));
    assert_eq!(m["campaign"]["complete"], true);
    assert_eq!(m["campaign"]["shard"], serde_json::json!([0, 1]));
    assert_eq!(m["campaign"]["parts"].as_array().unwrap().len(), 3);
    assert_eq!(m["timing"]["runs"].as_array().unwrap().len(), 3);
    assert!(d.join("merged/report.html").is_file() && d.join("merged/report.md").is_file());
    // A part missing: the hash is of the seeds present, and says so.
    let out = exec(QCSIM, &["report", "merge", "s0", "s1", "-o", "partial"], d);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let p = summary(&d.join("partial"));
    assert_eq!(p["campaign"]["complete"], false);
    assert_ne!(p["result"]["trace_hash"], w["result"]["trace_hash"]);
}

/// Merge refuses, naming the problem, a file that is not a summary, a
/// summary whose hash does not match its cases, shards that overlap, and
/// reports of different campaigns; the output directory's files are left
/// as they were.
#[test]
fn merge_refuses_bad_input_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    campaign(d, &["--seeds", "0..4", "--shard", "0/2", "--report", "a"]);
    campaign(d, &["--seeds", "0..4", "--shard", "1/2", "--report", "b"]);
    campaign(
        d,
        &[
            "--seeds",
            "0..4",
            "--shard",
            "1/2",
            "--profile",
            "random",
            "--report",
            "other",
        ],
    );
    std::fs::create_dir(d.join("junk")).unwrap();
    std::fs::write(d.join("junk/summary.json"), b"{ not json").unwrap();
    std::fs::create_dir(d.join("cut")).unwrap();
    let mut s = summary(&d.join("b"));
    s["result"]["case_hashes"].as_array_mut().unwrap().pop();
    s["result"]["cases"] = serde_json::json!(1);
    std::fs::write(d.join("cut/summary.json"), s.to_string()).unwrap();
    std::fs::create_dir(d.join("out")).unwrap();
    std::fs::write(d.join("out/summary.json"), b"keep me").unwrap();
    let cases: &[(&[&str], &[&str])] = &[
        (&["a", "junk"], &["junk/summary.json", "not JSON"]),
        (&["a", "cut"], &["cut/summary.json", "trace_hash"]),
        (&["a", "a"], &["overlap", "seed 0"]),
        (&["a", "b", "b"], &["overlap", "seed 1"]),
        (
            &["a", "other"],
            &["not parts of one campaign", "campaign.profile"],
        ),
        (&["a", "missing"], &["missing: no such report directory"]),
    ];
    for (inputs, expected) in cases {
        let mut args = vec!["report", "merge"];
        args.extend_from_slice(inputs);
        args.extend_from_slice(&["-o", "out"]);
        let out = exec(QCSIM, &args, d);
        assert_eq!(out.status.code(), Some(1), "{inputs:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        for e in *expected {
            assert!(err.contains(e), "{inputs:?}: {e:?} not in {err}");
        }
        assert_eq!(
            std::fs::read(d.join("out/summary.json")).unwrap(),
            b"keep me"
        );
        assert!(
            !d.join("out/report.html").exists(),
            "{inputs:?} wrote a report"
        );
    }
}

/// A shard that wrote no report (killed, or its node lost) is named by
/// the merge as the directory `deploy/run-shard.sh` would have written;
/// `--complete` refuses, writing nothing, until that shard alone is run
/// again, and then merges to one campaign's hash.
#[test]
fn merge_names_a_missing_shard_and_complete_waits_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let whole = campaign(d, &["--seeds", "0..6", "--report", "whole"]);
    let shard = |i: u32| {
        let (shard, out) = (format!("{i}/3"), format!("shard-{i}-of-3"));
        campaign(d, &["--seeds", "0..6", "--shard", &shard, "--report", &out]);
    };
    shard(0);
    shard(2);
    let merge = |complete: bool| {
        let mut args = vec!["report", "merge", "shard-0-of-3", "shard-2-of-3"];
        if d.join("shard-1-of-3").exists() {
            args.push("shard-1-of-3");
        }
        if complete {
            args.push("--complete");
        }
        args.extend_from_slice(&["-o", "merged"]);
        exec(QCSIM, &args, d)
    };
    let named = "shard-1-of-3 (seeds 0..6, --shard 1/3)";
    let out = merge(true);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("missing {named}")), "{err}");
    assert!(!d.join("merged").exists(), "--complete wrote a report");
    // Without --complete the partial merge is written, the shard named.
    let out = merge(false);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains(named));
    shard(1);
    let out = merge(true);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stderr.is_empty(), "{}", text(&out));
    assert_eq!(
        printed_hash(&String::from_utf8_lossy(&out.stdout)),
        printed_hash(&whole)
    );
}

/// How long Chromium may take to load and dump one page.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// Chromium's dump of `page` and its log: the rendered DOM on standard
/// output, console messages on standard error (`--enable-logging=stderr
/// --v=0` logs each as `CONSOLE`).
fn chromium_dump(page: &Path, profile: &Path) -> (String, String) {
    let url = format!("file://{}", page.display());
    let child = Command::new("chromium")
        .args([
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=2000",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            &url,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("chromium does not start ({e}): .ci/setup installs it"));
    let id = child.id();
    let started = Instant::now();
    // Bounded: a watchdog thread kills a Chromium that hangs.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if rx.recv_timeout(CHROMIUM_TIMEOUT).is_err() {
            // SAFETY: kill(2) on the pid of the child this test started.
            unsafe {
                libc::kill(id as libc::pid_t, libc::SIGKILL);
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = tx.send(());
    assert!(
        started.elapsed() < CHROMIUM_TIMEOUT,
        "chromium took longer than {CHROMIUM_TIMEOUT:?}"
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Console messages in Chromium's log. It logs every one (console.error,
/// an uncaught exception, a resource that failed to load) as
/// `INFO:CONSOLE`; report.html runs no script, so any is an error.
fn console_errors(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(":CONSOLE")).collect()
}

/// The values of every `attr="..."` in a page (Chromium's DOM dump
/// quotes every attribute with `"`).
fn attr_values<'a>(page: &'a str, attr: &str) -> Vec<&'a str> {
    let open = format!(" {attr}=\"");
    page.match_indices(&open)
        .map(|(i, _)| {
            let v = &page[i + open.len()..];
            &v[..v.find('"').unwrap_or(v.len())]
        })
        .collect()
}

/// Where `needle` is in the rendered `dom`; it must be there.
fn position(dom: &str, needle: &str) -> usize {
    dom.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is not in the DOM:\n{dom:.4000}"))
}

/// The page has a `<nav>` whose links all land on an id in the DOM, and
/// no link in the page points anywhere else (nothing is fetched).
/// Returns the nav's link targets.
fn assert_contents_links_land(dom: &str) -> Vec<String> {
    let start = position(dom, "<nav");
    let end = start + position(&dom[start..], "</nav>");
    let ids = attr_values(dom, "id");
    let targets: Vec<String> = attr_values(&dom[start..end], "href")
        .iter()
        .map(|h| {
            h.strip_prefix('#')
                .unwrap_or_else(|| panic!("a contents link out of the page: {h}"))
                .to_string()
        })
        .collect();
    assert!(targets.len() >= 5, "too few contents links: {targets:?}");
    for href in attr_values(dom, "href") {
        let id = href
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("link out: {href}"));
        assert!(ids.contains(&id), "#{id} has no target; ids: {ids:?}");
    }
    targets
}

#[test]
fn report_html_renders_in_headless_chromium_without_console_errors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    campaign(d, &["--seeds", "0..12", "--report", "rep"]);
    let (dom, log) = chromium_dump(&d.join("rep/report.html"), &d.join("profile"));
    assert!(
        dom.contains("<table id=\"summary-table\">"),
        "the summary table is not in the DOM:\n{dom:.2000}\n{log}"
    );
    assert!(dom.contains("<td>trace hash</td>"), "{dom:.2000}");
    assert!(
        dom.contains("<svg") && dom.contains("<polyline"),
        "no chart rendered:\n{dom:.2000}"
    );
    assert!(dom.contains("<rect"), "no bars rendered");
    let errors = console_errors(&log);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    // All passed, said first: the banner above the contents and the
    // summary table, and no failure rows.
    let banner = position(&dom, "All 12 cases passed.");
    assert!(banner > position(&dom, "<h1") && banner < position(&dom, "<nav"));
    assert!(banner < position(&dom, "<h2 id=\"summary\">"));
    assert!(
        !dom.contains("href=\"#seed-"),
        "failure links on a passing page"
    );
    let targets = assert_contents_links_land(&dom);
    for id in ["failures", "summary", "charts", "totals", "timing"] {
        assert!(targets.iter().any(|t| t == id), "no #{id} in {targets:?}");
    }

    // The check sees console errors: a page that logs one is caught.
    std::fs::write(
        d.join("bad.html"),
        "<!DOCTYPE html><html><body><p>x</p><script>console.error('planted'); undefinedFunction();</script></body></html>",
    )
    .unwrap();
    let (dom, log) = chromium_dump(&d.join("bad.html"), &d.join("profile2"));
    assert!(dom.contains("<p>x</p>"), "{dom}");
    assert!(
        !console_errors(&log).is_empty(),
        "the planted console error was not seen:\n{log}"
    );
}

/// A failing campaign's page lists every failing case before the summary
/// table, each row's link landing on that case's explanation below.
#[test]
fn report_html_of_a_failing_campaign_opens_with_its_failures() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    campaign_exiting(
        d,
        &[
            "--seeds",
            "0..12",
            "--disk-ignores-flush",
            "--report",
            "rep",
        ],
        1,
    );
    let seeds: Vec<u64> = summary(&d.join("rep"))["result"]["failing_seeds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert!(!seeds.is_empty(), "the broken disk failed no case");
    let (dom, log) = chromium_dump(&d.join("rep/report.html"), &d.join("profile"));
    let errors = console_errors(&log);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let list = position(&dom, "<table class=\"list\" id=\"failures-table\">");
    let summary_table = position(&dom, "<h2 id=\"summary\">");
    assert!(list < position(&dom, "<nav") && list < summary_table);
    assert!(position(&dom, &format!("{} of 12 cases failed.", seeds.len())) < list);
    assert!(
        !dom.contains("cases passed"),
        "a pass banner on a failing page"
    );
    for seed in &seeds {
        let link = position(&dom, &format!("<a href=\"#seed-{seed}\">seed {seed}</a>"));
        assert!(
            list < link && link < summary_table,
            "seed {seed}'s row is not first"
        );
        let target = position(&dom, &format!("<h3 id=\"seed-{seed}\">"));
        assert!(
            target > summary_table,
            "seed {seed}'s explanation is not below"
        );
    }
    assert_eq!(
        dom.matches("back to the failures").count(),
        seeds.len(),
        "a back link per explanation"
    );
    let targets = assert_contents_links_land(&dom);
    assert!(
        targets.iter().any(|t| t == "failures-explained"),
        "{targets:?}"
    );
}

/// `--disk-ignores-flush`: the same seeds that pass on a sound disk fail
/// on one whose flushes make nothing durable, and each failing case is
/// saved with the broken disk in it, so that its replay fails too.
#[test]
fn a_campaign_on_a_disk_that_ignores_flush_fails() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    campaign(d, &["--seeds", "0..8", "--report", "sound"]);
    let all = [
        "campaign",
        "--jobs",
        "2",
        "--quiet",
        "--corpus",
        "c",
        "--seeds",
        "0..8",
        "--report",
        "broken",
        "--disk-ignores-flush",
    ];
    let out = exec(QCSIM, &all, d);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(" 0 failed"), "{stdout}");
    let saved: Vec<_> = std::fs::read_dir(d.join("c")).unwrap().collect();
    assert!(!saved.is_empty(), "no failing case saved");
    let case = saved[0].as_ref().unwrap().path();
    let json = std::fs::read_to_string(&case).unwrap();
    assert!(json.contains("\"ignores_flush\": true"), "{json}");
    let replay = exec(QCSIM, &["replay", case.to_str().unwrap()], d);
    assert_eq!(replay.status.code(), Some(1), "{}", text(&replay));
}
