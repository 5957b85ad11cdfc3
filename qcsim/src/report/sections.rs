//! The tables a report shows, built once from `summary.json` for both
//! renderings: the campaign, its totals (every count the summary holds,
//! by its JSON name, so new counters need no change here), per profile,
//! per switch combination, fault coverage, the optimisations' counters,
//! the rare paths, the excused errors, and the wall-clock timing. Also
//! what both renderings open with: the campaign in a line, its verdict,
//! a line per failing case, and the anchors (`slug`, [`Anchors`]) their
//! links point at.

use std::collections::HashSet;

use serde_json::{Map, Value};

/// A titled table of cells.
pub struct Table {
    pub title: String,
    /// What the table shows, in a sentence.
    pub note: String,
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// A JSON scalar as a cell.
pub fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The switch combination `mask` in words: `all on`, `all off`, or the
/// switches turned off.
pub fn switches_label(mask: u8) -> String {
    let s = engine::Switches::from_mask(mask);
    if s == engine::Switches::ALL_ON {
        return "all on".into();
    }
    if s == engine::Switches::ALL_OFF {
        return "all off".into();
    }
    let off: Vec<&str> = s.iter().filter(|(_, on)| !on).map(|(n, _)| n).collect();
    format!("-{}", off.join(" -"))
}

/// The scalar fields of an object, in its order.
fn scalars(o: &Map<String, Value>) -> Vec<(&String, &Value)> {
    o.iter()
        .filter(|(_, v)| !v.is_object() && !v.is_array())
        .collect()
}

/// A two-column table of an object's scalar fields.
fn kv(title: &str, note: &str, v: &Value) -> Option<Table> {
    let o = v.as_object()?;
    Some(Table {
        title: title.into(),
        note: note.into(),
        header: vec!["counter".into(), "value".into()],
        rows: scalars(o)
            .into_iter()
            .map(|(k, v)| vec![k.clone(), cell(v)])
            .collect(),
    })
}

/// Slices (per profile, per switches) as rows: cases, verdicts, and every
/// scalar total.
fn slices(
    title: &str,
    note: &str,
    v: &Value,
    key_name: &str,
    label: &dyn Fn(&str) -> String,
) -> Option<Table> {
    let o = v.as_object()?;
    let first = o.values().next()?;
    let total_names: Vec<String> = first["totals"]
        .as_object()
        .map(|t| scalars(t).into_iter().map(|(k, _)| k.clone()).collect())
        .unwrap_or_default();
    let mut header = vec![
        key_name.to_string(),
        "cases".into(),
        "passed".into(),
        "failed".into(),
    ];
    header.extend(total_names.iter().cloned());
    let rows = o
        .iter()
        .map(|(k, s)| {
            let mut r = vec![
                label(k),
                cell(&s["cases"]),
                cell(&s["passed"]),
                cell(&s["failed"]),
            ];
            r.extend(total_names.iter().map(|n| cell(&s["totals"][n])));
            r
        })
        .collect();
    Some(Table {
        title: title.into(),
        note: note.into(),
        header,
        rows,
    })
}

/// Every table of the report, in order.
pub fn tables(summary: &Value) -> Vec<Table> {
    let c = &summary["campaign"];
    let r = &summary["result"];
    let t = &r["totals"];
    let mut out = Vec::new();
    out.push(Table {
        title: "Summary".into(),
        note: "What ran, and the verdicts. Two campaigns with the same trace hash ran every case alike.".into(),
        header: vec!["".into(), "".into()],
        rows: vec![
            vec!["revision".into(), cell(&summary["revision"])],
            vec!["seeds".into(), format!("{}..{}", cell(&c["seeds"][0]), cell(&c["seeds"][1]))],
            vec!["shard".into(), match c["shard"].as_array() {
                Some(s) => format!("{}/{}", cell(&s[0]), cell(&s[1])),
                None => format!("{} parts, not the whole range", c["parts"].as_array().map_or(0, Vec::len)),
            }],
            vec!["profile".into(), cell(&c["profile"])],
            vec!["switches".into(), cell(&c["switches"])],
            vec!["harsh".into(), cell(&c["harsh"])],
            vec!["broken variant".into(), cell(&c["broken"])],
            vec!["cases".into(), cell(&r["cases"])],
            vec!["passed".into(), cell(&r["passed"])],
            vec!["failed".into(), cell(&r["failed"])],
            vec!["trace hash".into(), cell(&r["trace_hash"])],
        ],
    });
    out.extend(kv(
        "Totals",
        "Counts summed over every case (`result.totals`).",
        t,
    ));
    out.extend(slices(
        "Per profile",
        "The same counts by the profile that generated each case.",
        &r["per_profile"],
        "profile",
        &|k| k.to_string(),
    ));
    out.extend(slices(
        "Per switch combination",
        "The same counts by switch combination (mask, then the switches turned off).",
        &r["per_switches"],
        "switches",
        &|k| match k.parse::<u8>() {
            Ok(m) => format!("{m} ({})", switches_label(m)),
            Err(_) => k.to_string(),
        },
    ));
    let fc = &r["fault_coverage"];
    if let (Some(by), Some(cases)) = (fc["by_kind"].as_object(), fc["cases_by_kind"].as_object()) {
        out.push(Table {
            title: "Fault coverage".into(),
            note: format!(
                "{} faults injected; by kind, and how many cases met each kind at least once.",
                cell(&fc["faults_injected"])
            ),
            header: vec!["fault kind".into(), "faults".into(), "cases".into()],
            rows: by
                .iter()
                .map(|(k, v)| {
                    vec![
                        k.clone(),
                        cell(v),
                        cell(cases.get(k).unwrap_or(&Value::Null)),
                    ]
                })
                .collect(),
        });
    }
    out.extend(kv(
        "Excused errors",
        "Guest operations that failed, each explained by a fault injected while it was in flight (by the request kind that met it) or by the image a failed metadata write poisoned.",
        &fc["excused_errors"],
    ));
    out.extend(kv(
        "Optimisations",
        "What the seeds' optimisations did, from each case's last epoch.",
        &r["optimisations"],
    ));
    if let (Some(runs), Some(cases)) = (
        t["rare_paths"].as_object(),
        t["rare_path_cases"].as_object(),
    ) {
        out.push(Table {
            title: "Rare paths".into(),
            note: "How often each of the engine's rare paths ran, and how many cases reached it: a bug planted there would be met that often.".into(),
            header: vec!["path".into(), "runs".into(), "cases".into()],
            rows: runs
                .iter()
                .map(|(k, v)| vec![k.clone(), cell(v), cell(cases.get(k).unwrap_or(&Value::Null))])
                .collect(),
        });
    }
    if let (Some(v2), Some(v3)) = (
        t["crash_points"]["v2"].as_object(),
        t["crash_points"]["v3"].as_object(),
    ) {
        // Each version lists only the steps its images can be in: the
        // rows are the operations' steps on either, in the operations'
        // order, with n/a where a version has no such step.
        let mut rows = Vec::new();
        for op in engine::MetaOp::ALL {
            for step in op.steps() {
                let (name, s) = (op.name(), step.name());
                let (n2, n3) = (&v2.get(name).map(|o| &o[s]), &v3.get(name).map(|o| &o[s]));
                let show = |n: &Option<&Value>| match n {
                    Some(v) if !v.is_null() => cell(v),
                    _ => "n/a".to_string(),
                };
                if n2.is_some_and(|v| !v.is_null()) || n3.is_some_and(|v| !v.is_null()) {
                    rows.push(vec![format!("{name}.{s}"), show(n2), show(n3)]);
                }
            }
        }
        out.push(Table {
            title: "Crash points".into(),
            note: "The crashes that cut a multi-step metadata operation, by the step it was in, on version 2 and version 3 images: a 0 is a boundary no crash tested; n/a is a step images of that version do not have (no dirty bit on version 2, so no rebuild there, and its applies are in place; an amend of the version is an upgrade there and a downgrade on version 3; lazy refcounts and refcount widths need version 3).".into(),
            header: vec!["operation.step".into(), "version 2".into(), "version 3".into()],
            rows,
        });
    }
    if let Some(runs) = summary["timing"]["runs"].as_array() {
        out.push(Table {
            title: "Timing".into(),
            note: "Wall-clock figures of each process that ran a part (not part of the comparable result).".into(),
            header: vec!["shard".into(), "jobs".into(), "seconds".into(), "cases/s".into()],
            rows: runs
                .iter()
                .map(|run| {
                    vec![
                        format!("{}/{}", cell(&run["shard"][0]), cell(&run["shard"][1])),
                        cell(&run["jobs"]),
                        cell(&run["wall_seconds"]),
                        cell(&run["cases_per_second"]),
                    ]
                })
                .collect(),
        });
    }
    out
}

/// The bench rows' switch settings in the table's words.
pub fn bench_label(row: &Value) -> String {
    let mut mask = 0u8;
    for (i, name) in engine::Switches::NAMES.iter().enumerate() {
        if row["switches"][*name] == true {
            mask |= 1 << i;
        }
    }
    switches_label(mask)
}

/// The campaign in one line, the report's first: its seeds, the shard when
/// it is one part of the range, the profile, the broken variant and the
/// revision when the summary names them.
pub fn identification(summary: &Value) -> String {
    let c = &summary["campaign"];
    let mut parts = vec![format!(
        "seeds {}..{}",
        cell(&c["seeds"][0]),
        cell(&c["seeds"][1])
    )];
    if let Some(s) = c["shard"].as_array().filter(|s| s[1].as_u64() > Some(1)) {
        parts.push(format!("shard {}/{}", cell(&s[0]), cell(&s[1])));
    }
    parts.push(format!("profile {}", cell(&c["profile"])));
    if let Some(b) = c["broken"].as_str() {
        parts.push(format!("broken variant {b}"));
    }
    if let Some(r) = summary["revision"].as_str().filter(|r| !r.is_empty()) {
        parts.push(format!("revision {r}"));
    }
    parts.join(", ")
}

/// What a report says first: did anything fail.
pub struct Verdict {
    pub cases: u64,
    /// `result.failed`, or the failures listed when it is missing.
    pub failed: u64,
    /// The broken variant the campaign ran, whose failures are expected.
    pub broken: Option<String>,
}

impl Verdict {
    pub fn of(summary: &Value) -> Verdict {
        let r = &summary["result"];
        let listed = r["failures"].as_array().map_or(0, Vec::len) as u64;
        Verdict {
            cases: r["cases"].as_u64().unwrap_or(0),
            // Never "all passed" while a failure is listed, whatever the
            // count says (a hand-edited or truncated summary).
            failed: r["failed"].as_u64().unwrap_or(0).max(listed),
            broken: summary["campaign"]["broken"].as_str().map(String::from),
        }
    }

    pub fn all_passed(&self) -> bool {
        self.failed == 0
    }

    /// The verdict in a sentence or two, with what a broken variant's
    /// campaign is expected to do: there, failures are the point, and a
    /// pass means the checks missed the planted bug.
    pub fn sentence(&self) -> String {
        let (n, f) = (self.cases, self.failed);
        match (&self.broken, f) {
            (None, 0) => format!("All {n} cases passed."),
            (None, _) => format!("{f} of {n} cases failed."),
            (Some(b), 0) => format!(
                "All {n} cases passed, though this campaign ran the broken variant {b}: its planted bug was expected to make cases fail, and none did."
            ),
            (Some(b), _) => format!(
                "{f} of {n} cases failed, as expected: this campaign ran the broken variant {b}, and its failures show the planted bug caught."
            ),
        }
    }
}

/// One failing case as a line of the list the report opens with.
pub struct FailureLine {
    pub seed: String,
    /// The id of the case's explanation further down (`seed-N`).
    pub anchor: String,
    /// The first failure's kind and first line, and how many more.
    pub headline: String,
    pub deterministic: String,
    pub replay: Option<String>,
}

/// Longest headline kept: the list is for scanning, the explanation below
/// has the whole text.
const HEADLINE_CHARS: usize = 160;

/// The failing cases (`result.failures`) as lines, each with an anchor
/// unique in `anchors`.
pub fn failure_lines(summary: &Value, anchors: &mut Anchors) -> Vec<FailureLine> {
    let entries = summary["result"]["failures"].as_array();
    let mut out = Vec::new();
    for e in entries.into_iter().flatten() {
        let seed = cell(&e["seed"]);
        let anchor = anchors.unique(&format!("seed {seed}"));
        let deterministic = match e["deterministic"].as_bool() {
            Some(true) => "yes".into(),
            Some(false) => "NO: a second run differed".into(),
            None => "-".into(),
        };
        out.push(FailureLine {
            seed,
            anchor,
            headline: headline(e),
            deterministic,
            replay: e["replay"].as_str().map(String::from),
        });
    }
    out
}

/// A failing case's first failure in a line: its kind and the first line
/// of its text, and how many failures follow.
pub fn headline(entry: &Value) -> String {
    let all = entry["failures"].as_array().map_or(&[][..], Vec::as_slice);
    let Some(f) = all.first() else {
        return "(no failure recorded)".into();
    };
    let first = |k: &str| first_line(f[k].as_str().unwrap_or(""));
    let kind = f["kind"].as_str().unwrap_or("?");
    let mut line = match kind {
        "model" => format!("model violation: {}", first("text")),
        "check" => format!(
            "check of the {} image: {}",
            first("label"),
            first("summary")
        ),
        "engine" => format!("engine: {}", first("what")),
        "hang" => format!("hang in group {}: {}", cell(&f["group"]), first("message")),
        "panic" => format!("panic: {}", first("message")),
        "overlap" => format!(
            "{} overlapping writes in flight on {}",
            cell(&f["count"]),
            first("disk")
        ),
        "driver" => format!("{}: {}", first("driver"), first("what")),
        other => other.to_string(),
    };
    if line.chars().count() > HEADLINE_CHARS {
        line = line.chars().take(HEADLINE_CHARS).collect::<String>() + "...";
    }
    if all.len() > 1 {
        line.push_str(&format!(" (and {} more)", all.len() - 1));
    }
    line
}

/// The first line of a failure's text that says something: a checker's
/// summary starts with a blank line, or with qemu-img's "No errors were
/// found" when what failed is that it could not check at all.
fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("No errors were found"))
        .unwrap_or("")
        .to_string()
}

/// A heading's anchor as GitHub makes it from the heading's text
/// (lowercase; letters, digits, `-` and `_` kept, spaces made `-`, the
/// rest dropped), so report.md's links work where it is most often read,
/// and report.html uses the same names.
pub fn slug(title: &str) -> String {
    let s: String = title
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect();
    if s.is_empty() {
        "section".into()
    } else {
        s
    }
}

/// The anchors a page has given out, so that each is unique: a second
/// heading of one slug gets `-1`, then `-2` (as GitHub numbers them).
#[derive(Default)]
pub struct Anchors(HashSet<String>);

impl Anchors {
    /// Anchors with `fixed` (the page's own sections) taken already.
    pub fn with<S: AsRef<str>>(fixed: &[S]) -> Anchors {
        Anchors(fixed.iter().map(|s| s.as_ref().to_string()).collect())
    }

    /// A new anchor for a heading titled `title`.
    pub fn unique(&mut self, title: &str) -> String {
        let base = slug(title);
        let mut id = base.clone();
        let mut n = 0;
        while !self.0.insert(id.clone()) {
            n += 1;
            id = format!("{base}-{n}");
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slugs_follow_github_and_anchors_are_unique() {
        assert_eq!(slug("Per switch combination"), "per-switch-combination");
        assert_eq!(slug("Seed 12"), "seed-12");
        assert_eq!(slug("Bench (`x --y`)"), "bench-x---y");
        assert_eq!(slug("!!"), "section");
        let mut a = Anchors::with(&["failures"]);
        assert_eq!(a.unique("Failures"), "failures-1");
        assert_eq!(a.unique("Failures"), "failures-2");
        assert_eq!(a.unique("Summary"), "summary");
    }

    #[test]
    fn a_failure_line_has_its_kind_first_line_and_replay() {
        let s = json!({"result": {"cases": 4, "failures": [
            {"seed": 3, "deterministic": false, "replay": "qcsim replay c/3.json",
             "failures": [{"kind": "check", "label": "crash", "summary": "\nNo errors were found on the image.\nleak\nmore"},
                          {"kind": "panic", "message": "x"}]},
            {"seed": 5, "failures": []}
        ]}});
        let lines = failure_lines(&s, &mut Anchors::default());
        assert_eq!(lines[0].anchor, "seed-3");
        assert_eq!(
            lines[0].headline,
            "check of the crash image: leak (and 1 more)"
        );
        assert!(lines[0].deterministic.starts_with("NO"));
        assert_eq!(lines[0].replay.as_deref(), Some("qcsim replay c/3.json"));
        assert_eq!(lines[1].headline, "(no failure recorded)");
        assert_eq!(lines[1].replay, None);
        let v = Verdict::of(&s);
        assert_eq!((v.failed, v.all_passed()), (2, false));
        assert_eq!(v.sentence(), "2 of 4 cases failed.");
    }
}
