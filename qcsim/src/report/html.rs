//! `report.html`: one self-contained page (inline CSS and SVG, no script,
//! nothing fetched). It opens with what a reader comes for: the campaign
//! in a line and the failing cases, each linked to its explanation (or a
//! banner saying all passed), then a table of contents; below come the
//! summary table, the charts a reader would rather look at than read
//! (cases per second over the run, counters per profile, fault kinds and
//! the cases meeting each, rare paths, the bench ablation), the other
//! tables, and the failures explained, each with a link back up.

use serde_json::Value;

use super::explain::explain;
use super::markdown::ratio;
use super::sections::{
    bench_label, cell, failure_lines, identification, tables, Anchors, FailureLine, Table, Verdict,
};
use super::svg::{bars, esc, lines};

/// The page's own sections' ids, taken before any table's slug so that a
/// table titled alike gets a suffixed id instead of a duplicate.
const TOP: &str = "top";
const FAILURES: &str = "failures";
const CONTENTS: &str = "contents";
const CHARTS: &str = "charts";
const EXPLAINED: &str = "failures-explained";

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
.banner { padding: .5em 1em; font-weight: bold; border: 1px solid; border-radius: 4px; }
.banner.pass { background: #eaf6ea; color: #1a5e1a; border-color: #9c9; }
.banner.fail { background: #fbeaea; color: #a00; border-color: #d99; }
.ident { color: #555; }
table.list td { text-align: left; vertical-align: top; }
nav ul { margin: .2em 0 1.5em; }
"#;

/// A table under its heading; the heading carries the section's `id`
/// (the contents link to it), the table `{id}-table`.
fn table(t: &Table, id: &str) -> String {
    let mut s = format!(
        "<h2 id=\"{id}\">{}</h2><p>{}</p><div class=\"wide\"><table id=\"{id}-table\"><tr>",
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
    let mut s = format!("<h2 id=\"{CHARTS}\">Charts</h2><div class=\"charts\">");
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

/// The opening block: the verdict as a banner and, when cases failed, a
/// row per case (seed, first failure, determinism, replay command) whose
/// seed links to the case's explanation at the bottom of the page.
fn failures_block(verdict: &Verdict, failures: &[FailureLine]) -> String {
    let class = if verdict.all_passed() { "pass" } else { "fail" };
    let mut s = format!(
        "<h2 id=\"{FAILURES}\" class=\"{class}\">Failures</h2><p class=\"banner {class}\">{}</p>\n",
        esc(&verdict.sentence())
    );
    if failures.is_empty() {
        return s;
    }
    s.push_str("<div class=\"wide\"><table class=\"list\" id=\"failures-table\"><tr><th>seed</th><th>failure</th><th>deterministic</th><th>replay</th></tr>");
    for f in failures {
        let replay = f
            .replay
            .as_deref()
            .map_or("-".into(), |r| format!("<code>{}</code>", esc(r)));
        s.push_str(&format!(
            "<tr><td><a href=\"#{}\">seed {}</a></td><td>{}</td><td>{}</td><td>{replay}</td></tr>",
            esc(&f.anchor),
            esc(&f.seed),
            esc(&f.headline),
            esc(&f.deterministic),
        ));
    }
    s.push_str("</table></div>\n");
    s
}

/// The table of contents: a link to every section, `(id, title)`.
fn contents(sections: &[(String, String)]) -> String {
    let mut s =
        format!("<nav aria-labelledby=\"{CONTENTS}\"><h2 id=\"{CONTENTS}\">Contents</h2><ul>");
    for (id, title) in sections {
        s.push_str(&format!(
            "<li><a href=\"#{}\">{}</a></li>",
            esc(id),
            esc(title)
        ));
    }
    s.push_str("</ul></nav>\n");
    s
}

/// Every failing case explained (`explain`), under the id its row in the
/// opening block links to, with links back up: a reader who followed one
/// failure's link returns to the list for the next.
fn explanations(summary: &Value, failures: &[FailureLine]) -> String {
    let entries = summary["result"]["failures"].as_array();
    let mut s = format!("<h2 id=\"{EXPLAINED}\" class=\"fail\">Failures explained</h2>\n");
    for (f, entry) in failures.iter().zip(entries.into_iter().flatten()) {
        s.push_str(&format!(
            "<h3 id=\"{}\">Seed {}</h3><pre>{}</pre><p><a href=\"#{FAILURES}\">back to the failures</a> | <a href=\"#{TOP}\">back to the top</a></p>\n",
            esc(&f.anchor),
            esc(&f.seed),
            esc(&explain(entry))
        ));
    }
    s
}

/// The page: the campaign and its failures first, the contents, then the
/// summary table, charts, other tables and the failures explained.
pub fn render(summary: &Value, bench: Option<&[Value]>) -> String {
    let mut anchors = Anchors::with(&[TOP, FAILURES, CONTENTS, CHARTS, EXPLAINED]);
    // Seeds before tables: `seed-N` is the id the failure rows promise.
    let failures = failure_lines(summary, &mut anchors);
    let all = tables(summary);
    let ids: Vec<String> = all.iter().map(|t| anchors.unique(&t.title)).collect();
    let verdict = Verdict::of(summary);

    let mut sections = vec![(FAILURES.to_string(), "Failures".to_string())];
    let mut rest = String::new();
    for (i, (t, id)) in all.iter().zip(&ids).enumerate() {
        sections.push((id.clone(), t.title.clone()));
        rest.push_str(&table(t, id));
        // The charts right after the summary table, as they always were.
        if i == 0 {
            sections.push((CHARTS.into(), "Charts".into()));
            rest.push_str(&charts(summary, bench));
        }
    }
    if !failures.is_empty() {
        sections.push((EXPLAINED.into(), "Failures explained".into()));
        rest.push_str(&explanations(summary, &failures));
    }
    let c = &summary["campaign"];
    let title = if verdict.all_passed() {
        format!("all {} passed", verdict.cases)
    } else {
        format!("{} of {} failed", verdict.failed, verdict.cases)
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>qcsim campaign {}..{}: {title}</title><style>{STYLE}</style></head><body><h1 id=\"{TOP}\">qcsim campaign report</h1>\n<p class=\"ident\">{}</p>\n{}{}{rest}</body></html>\n",
        esc(&cell(&c["seeds"][0])),
        esc(&cell(&c["seeds"][1])),
        esc(&identification(summary)),
        failures_block(&verdict, &failures),
        contents(&sections),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    /// A summary as a campaign writes it, cut to what the page reads, with
    /// `failures` as `result.failures`.
    fn summary(failures: Value, broken: Option<&str>) -> Value {
        let failed = failures.as_array().unwrap().len();
        json!({
            "revision": "abc123",
            "campaign": {"seeds": [10, 20], "profile": "mixed", "shard": [0, 1], "broken": broken},
            "result": {"cases": 10, "passed": 10 - failed, "failed": failed,
                       "trace_hash": "00ff", "totals": {"guest_ops": 5}, "failures": failures},
            "timing": {"runs": [{"shard": [0, 1], "jobs": 2, "wall_seconds": 1.0,
                                 "cases_per_second": 10.0, "progress": [[0.5, 5], [1.0, 10]]}]}
        })
    }

    fn two_failures() -> Value {
        json!([
            {"seed": 13, "deterministic": true, "replay": "qcsim replay corpus/failing/13.json",
             "failures": [{"kind": "model", "text": "read op 4: guest sector 9 came back <zeroes>\n  more"}]},
            {"seed": 17, "deterministic": false, "replay": "qcsim replay corpus/failing/17.json",
             "failures": [{"kind": "panic", "message": "boom"}]}
        ])
    }

    /// The position of `needle` in `page`; it must be there.
    fn at(page: &str, needle: &str) -> usize {
        page.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} not in:\n{page}"))
    }

    /// The values of every `attr="..."` in `page`.
    fn values<'a>(page: &'a str, attr: &str) -> Vec<&'a str> {
        let open = format!("{attr}=\"");
        page.match_indices(&open)
            .map(|(i, _)| {
                let v = &page[i + open.len()..];
                &v[..v.find('"').unwrap()]
            })
            .collect()
    }

    /// Every in-page link points at an id the page has, every id is
    /// unique, and every section heading has one.
    fn assert_links_resolve(page: &str) {
        let ids = values(page, " id");
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len(), "duplicate ids: {ids:?}");
        let links: Vec<&str> = values(page, "href")
            .into_iter()
            .map(|h| h.strip_prefix('#').expect("only in-page links"))
            .collect();
        assert!(!links.is_empty());
        for l in &links {
            assert!(ids.contains(l), "#{l} has no target in {ids:?}");
        }
        for h in ["<h1", "<h2", "<h3"] {
            assert_eq!(
                page.matches(h).count(),
                page.matches(&format!("{h} id=")).count(),
                "a {h} without an id"
            );
        }
    }

    #[test]
    fn failures_come_first_each_linked_to_its_explanation() {
        let page = super::render(&summary(two_failures(), None), None);
        let ident = at(&page, "seeds 10..20, profile mixed, revision abc123");
        let list = at(&page, "<table class=\"list\" id=\"failures-table\">");
        let nav = at(&page, "<nav");
        let summary_table = at(&page, "<h2 id=\"summary\">Summary</h2>");
        let charts = at(&page, "<h2 id=\"charts\">");
        assert!(at(&page, "<h1") < ident && ident < list, "{page}");
        assert!(list < nav && nav < summary_table && summary_table < charts);
        assert!(page.contains("2 of 10 cases failed."));
        for seed in [13, 17] {
            let link = at(&page, &format!("<a href=\"#seed-{seed}\">seed {seed}</a>"));
            let target = at(&page, &format!("<h3 id=\"seed-{seed}\">"));
            assert!(
                list < link && link < nav,
                "seed {seed}'s row is not in the list"
            );
            assert!(charts < target, "seed {seed}'s explanation is not below");
        }
        // The row holds the first line, escaped; determinism; the replay.
        assert!(page.contains("<td>model violation: read op 4: guest sector 9 came back &lt;zeroes&gt;</td><td>yes</td><td><code>qcsim replay corpus/failing/13.json</code></td>"), "{page}");
        assert!(page.contains("<td>NO: a second run differed</td>"));
        assert_eq!(page.matches("back to the failures").count(), 2);
        assert!(page.contains("<a href=\"#failures-explained\">"));
        assert!(!page.contains("cases passed"));
        assert_links_resolve(&page);
        for external in ["<script", " src=", "<link", "http:", "https:"] {
            assert!(
                !page
                    .replace("http://www.w3.org/2000/svg", "")
                    .contains(external),
                "{external}"
            );
        }
    }

    #[test]
    fn a_passing_campaign_opens_with_the_all_passed_banner() {
        let page = super::render(&summary(json!([]), None), None);
        let banner = at(&page, "<p class=\"banner pass\">All 10 cases passed.</p>");
        assert!(banner < at(&page, "<nav") && banner < at(&page, "id=\"summary\""));
        assert!(!page.contains("failures-explained") && !page.contains("seed-"));
        // The contents link every table by its slug.
        for id in ["summary", "totals", "charts", "timing"] {
            assert!(page.contains(&format!("<li><a href=\"#{id}\">")), "{id}");
        }
        assert_links_resolve(&page);
    }

    #[test]
    fn a_broken_variant_says_its_failures_are_expected() {
        let page = super::render(&summary(two_failures(), Some("lose-flush")), None);
        assert!(page.contains("as expected: this campaign ran the broken variant lose-flush"));
        let page = super::render(&summary(json!([]), Some("lose-flush")), None);
        assert!(
            page.contains("expected to make cases fail, and none did"),
            "{page}"
        );
        assert!(page.contains("broken variant lose-flush, revision"));
    }
}
