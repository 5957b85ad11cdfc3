//! The tables a report shows, built once from `summary.json` for both
//! renderings: the campaign, its totals (every count the summary holds,
//! by its JSON name, so new counters need no change here), per profile,
//! per switch combination, fault coverage, the optimisations' counters,
//! the rare paths, the excused errors, and the wall-clock timing.

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
