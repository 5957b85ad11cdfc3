//! `report.md`: what failed first (a line per failing case, linked to its
//! explanation, or that all passed), a short list of contents, then the
//! report's tables, the bench ablation's rows when given, and each
//! failure explained (`explain`). Links are to the anchors Markdown
//! renderers derive from the headings (`sections::slug`), since Markdown
//! has no ids of its own.

use serde_json::Value;

use super::explain::explain;
use super::sections::{
    bench_label, failure_lines, identification, slug, tables, Anchors, FailureLine, Table, Verdict,
};

/// Headings of the report's own, before any table's.
const FAILURES: &str = "Failures";
const CONTENTS: &str = "Contents";
const BENCH: &str = "Bench ablation";
const EXPLAINED: &str = "Failures explained";

/// A cell with the characters Markdown tables break on escaped.
fn md(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn table(t: &Table, out: &mut String) {
    out.push_str(&format!("## {}\n\n{}\n\n", t.title, t.note));
    out.push_str(&format!(
        "| {} |\n",
        t.header
            .iter()
            .map(|h| md(h))
            .collect::<Vec<_>>()
            .join(" | ")
    ));
    out.push_str(&format!("|{}\n", " --- |".repeat(t.header.len())));
    for r in &t.rows {
        out.push_str(&format!(
            "| {} |\n",
            r.iter().map(|c| md(c)).collect::<Vec<_>>().join(" | ")
        ));
    }
    out.push('\n');
}

/// The verdict and, when cases failed, a row per case whose seed links to
/// its explanation at the end.
fn failures_block(verdict: &Verdict, failures: &[FailureLine], out: &mut String) {
    out.push_str(&format!("## {FAILURES}\n\n**{}**\n\n", verdict.sentence()));
    if failures.is_empty() {
        return;
    }
    out.push_str("| seed | failure | deterministic | replay |\n| --- | --- | --- | --- |\n");
    for f in failures {
        let replay = f
            .replay
            .as_deref()
            .map_or("-".into(), |r| format!("`{}`", md(r)));
        out.push_str(&format!(
            "| [seed {}](#{}) | {} | {} | {replay} |\n",
            md(&f.seed),
            f.anchor,
            md(&f.headline),
            md(&f.deterministic),
        ));
    }
    out.push('\n');
}

fn bench_table(rows: &[Value], out: &mut String) {
    out.push_str(&format!(
        "## {BENCH}\n\nThe rows of `qcsim bench --sim` given with `--bench-json`.\n\n"
    ));
    out.push_str("| workload | switches | dev wr/guest wr | dev B/guest B | dev flushes | ssd ms |\n| --- | --- | --- | --- | --- | --- |\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {} | {:.1} |\n",
            md(r["workload"].as_str().unwrap_or("?")),
            bench_label(r),
            ratio(r, "device_write_requests", "guest_writes"),
            ratio(r, "device_bytes_written", "guest_bytes"),
            r["device_flushes"],
            r["sim_time_ns"].as_f64().unwrap_or(0.0) / 1e6,
        ));
    }
    out.push('\n');
}

/// The report: the campaign in a line, its failures, the contents, the
/// tables, the bench rows, the failures explained.
pub fn render(summary: &Value, bench: Option<&[Value]>) -> String {
    let fixed = [FAILURES, CONTENTS, BENCH, EXPLAINED].map(slug);
    let mut anchors = Anchors::with(&fixed);
    let failures = failure_lines(summary, &mut anchors);
    let all = tables(summary);
    let mut sections = vec![FAILURES.to_string()];
    sections.extend(all.iter().map(|t| t.title.clone()));
    if bench.is_some() {
        sections.push(BENCH.into());
    }
    if !failures.is_empty() {
        sections.push(EXPLAINED.into());
    }

    let mut out = format!("# qcsim campaign report\n\n{}\n\n", identification(summary));
    failures_block(&Verdict::of(summary), &failures, &mut out);
    out.push_str(&format!("## {CONTENTS}\n\n"));
    for title in &sections {
        // Renderers number a repeated heading's anchor; the tables'
        // titles are distinct, so the plain slug is the anchor.
        out.push_str(&format!("- [{title}](#{})\n", slug(title)));
    }
    out.push('\n');
    for t in &all {
        table(t, &mut out);
    }
    if let Some(rows) = bench {
        bench_table(rows, &mut out);
    }
    if !failures.is_empty() {
        out.push_str(&format!("## {EXPLAINED}\n\n"));
    }
    let entries = summary["result"]["failures"].as_array();
    for (f, entry) in failures.iter().zip(entries.into_iter().flatten()) {
        out.push_str(&format!(
            "### Seed {}\n\n```text\n{}```\n\n[back to the failures](#{})\n\n",
            f.seed,
            explain(entry),
            slug(FAILURES)
        ));
    }
    out
}

/// `row[a] / row[b]`, 0 when `b` is 0 or missing.
pub fn ratio(row: &Value, a: &str, b: &str) -> f64 {
    let (x, y) = (
        row[a].as_f64().unwrap_or(0.0),
        row[b].as_f64().unwrap_or(0.0),
    );
    if y == 0.0 {
        0.0
    } else {
        x / y
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn failures_and_contents_come_before_the_tables() {
        let s = json!({
            "campaign": {"seeds": [0, 4], "profile": "random"},
            "result": {"cases": 4, "failed": 1, "failures": [
                {"seed": 2, "deterministic": true, "replay": "qcsim replay c/2.json",
                 "failures": [{"kind": "engine", "what": "EIO | gone"}]}]}
        });
        let md = super::render(&s, None);
        let at = |n: &str| md.find(n).unwrap_or_else(|| panic!("{n:?} not in:\n{md}"));
        let row =
            at("| [seed 2](#seed-2) | engine: EIO \\| gone | yes | `qcsim replay c/2.json` |");
        assert!(at("seeds 0..4, profile random") < at("## Failures\n"));
        assert!(at("**1 of 4 cases failed.**") < row);
        assert!(row < at("## Contents") && at("## Contents") < at("## Summary"));
        assert!(at("- [Failures explained](#failures-explained)") < at("## Summary"));
        assert!(
            at("## Summary") < at("### Seed 2")
                && at("### Seed 2") < at("[back to the failures](#failures)")
        );

        let s = json!({"campaign": {"seeds": [0, 4]}, "result": {"cases": 4, "failed": 0}});
        let md = super::render(&s, None);
        assert!(md.find("**All 4 cases passed.**").unwrap() < md.find("## Summary").unwrap());
        assert!(!md.contains("Failures explained") && !md.contains("| seed |"));
    }
}
