//! `report.html`: one self-contained page (inline CSS and SVG, no script,
//! nothing fetched) with the summary table first, the charts a reader
//! would rather look at than read (cases per second over the run, counters
//! per profile, fault kinds and the cases meeting each, rare paths, the
//! bench ablation), the other tables, and the failures explained.

use serde_json::Value;

use super::explain::explain;
use super::markdown::ratio;
use super::sections::{bench_label, tables, Table};
use super::svg::{bars, esc, lines};

const STYLE: &str = r#"
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.wide { overflow-x: auto; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
svg.chart { background: #fafafa; border: 1px solid #ddd; font-size: 11px; }
svg .title { font-weight: bold; font-size: 12px; }
svg .bar { fill: #4a7ab5; }
svg .axis { stroke: #888; }
svg .line { fill: none; stroke-width: 1.5; }
svg .s0 { stroke: #4a7ab5; } svg .s1 { stroke: #c0504d; } svg .s2 { stroke: #9bbb59; }
svg .s3 { stroke: #8064a2; } svg .s4 { stroke: #f79646; } svg .s5 { stroke: #4bacc6; }
pre { background: #f4f4f4; padding: .5em; overflow-x: auto; }
.fail { color: #a00; }
"#;

fn table(t: &Table, id: &str) -> String {
    let mut s = format!(
        "<h2>{}</h2><p>{}</p><div class=\"wide\"><table id=\"{id}\"><tr>",
        esc(&t.title),
        esc(&t.note)
    );
    for h in &t.header {
        s.push_str(&format!("<th>{}</th>", esc(h)));
    }
    s.push_str("</tr>");
    for r in &t.rows {
        s.push_str("<tr>");
        for c in r {
            s.push_str(&format!("<td>{}</td>", esc(c)));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table></div>\n");
    s
}

/// Cases per second over each run, from its progress samples: the rate
/// between consecutive samples.
fn rate_series(summary: &Value) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out = Vec::new();
    for run in summary["timing"]["runs"].as_array().into_iter().flatten() {
        let p: Vec<(f64, f64)> = run["progress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| Some((e[0].as_f64()?, e[1].as_f64()?)))
            .collect();
        let mut pts = vec![];
        let mut last = (0.0, 0.0);
        for &(t, n) in &p {
            if t > last.0 {
                pts.push((t, (n - last.1) / (t - last.0)));
                last = (t, n);
            }
        }
        let name = format!("shard {}/{}", run["shard"][0], run["shard"][1]);
        out.push((name, pts));
    }
    out
}

/// The per-profile counters charted, one chart each, when present.
const PROFILE_COUNTERS: &[&str] = &[
    "cases",
    "failed",
    "guest_ops",
    "crash_states_checked",
    "faults_injected",
    "leaked_clusters",
];

fn charts(summary: &Value, bench: Option<&[Value]>) -> String {
    let r = &summary["result"];
    let mut s = String::from("<h2>Charts</h2><div class=\"charts\">");
    s.push_str(&lines(
        "Cases per second over the run",
        "s",
        "cases/s",
        &rate_series(summary),
    ));
    if let Some(profiles) = r["per_profile"].as_object() {
        for counter in PROFILE_COUNTERS {
            let rows: Vec<(String, f64)> = profiles
                .iter()
                .filter_map(|(name, p)| {
                    let v = p.get(*counter).or_else(|| p["totals"].get(*counter))?;
                    Some((name.clone(), v.as_f64()?))
                })
                .collect();
            if !rows.is_empty() {
                s.push_str(&bars(&format!("{counter} per profile"), &rows));
            }
        }
    }
    let obj_bars = |title: &str, v: &Value| -> Option<String> {
        let rows: Vec<(String, f64)> = v
            .as_object()?
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect();
        Some(bars(title, &rows))
    };
    let fc = &r["fault_coverage"];
    s.extend(obj_bars(
        "Cases meeting each fault kind",
        &fc["cases_by_kind"],
    ));
    s.extend(obj_bars("Faults injected by kind", &fc["by_kind"]));
    s.extend(obj_bars(
        "Excused errors by request kind",
        &fc["excused_errors"],
    ));
    s.extend(obj_bars(
        "Cases reaching each rare path",
        &r["totals"]["rare_path_cases"],
    ));
    if let Some(rows) = bench {
        let mut workloads: Vec<&str> = Vec::new();
        for row in rows {
            let w = row["workload"].as_str().unwrap_or("?");
            if !workloads.contains(&w) {
                workloads.push(w);
            }
        }
        for w in workloads {
            let of: Vec<&Value> = rows.iter().filter(|r| r["workload"] == w).collect();
            let wr: Vec<(String, f64)> = of
                .iter()
                .map(|r| {
                    (
                        bench_label(r),
                        ratio(r, "device_write_requests", "guest_writes"),
                    )
                })
                .collect();
            let ms: Vec<(String, f64)> = of
                .iter()
                .map(|r| {
                    (
                        bench_label(r),
                        r["sim_time_ns"].as_f64().unwrap_or(0.0) / 1e6,
                    )
                })
                .collect();
            s.push_str(&bars(
                &format!("bench {w}: device writes per guest write"),
                &wr,
            ));
            s.push_str(&bars(&format!("bench {w}: simulated ms (SSD)"), &ms));
        }
    }
    s.push_str("</div>\n");
    s
}

pub fn render(summary: &Value, bench: Option<&[Value]>) -> String {
    let mut body = String::new();
    let all = tables(summary);
    let mut rest = all.iter();
    if let Some(first) = rest.next() {
        body.push_str(&table(first, "summary"));
    }
    body.push_str(&charts(summary, bench));
    for (i, t) in rest.enumerate() {
        body.push_str(&table(t, &format!("t{i}")));
    }
    let failures = summary["result"]["failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    body.push_str(&format!(
        "<h2 class=\"fail\">Failures</h2><p>{} failing cases.</p>",
        failures.len()
    ));
    for f in &failures {
        body.push_str(&format!(
            "<h3 id=\"seed-{s}\">Seed {s}</h3><pre>{}</pre>",
            esc(&explain(f)),
            s = f["seed"]
        ));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>qcsim campaign {}..{}</title><style>{STYLE}</style></head><body><h1>qcsim campaign report</h1>\n{body}</body></html>\n",
        summary["campaign"]["seeds"][0],
        summary["campaign"]["seeds"][1]
    )
}
