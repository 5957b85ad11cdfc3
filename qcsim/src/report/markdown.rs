//! `report.md`: the report's tables as Markdown, then the failures, each
//! explained (`explain`), and the bench ablation's rows when given.

use serde_json::Value;

use super::explain::explain;
use super::sections::{bench_label, tables, Table};

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

pub fn render(summary: &Value, bench: Option<&[Value]>) -> String {
    let mut out = String::from("# qcsim campaign report\n\n");
    for t in tables(summary) {
        table(&t, &mut out);
    }
    let failures = summary["result"]["failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    out.push_str(&format!(
        "## Failures\n\n{} failing cases.\n\n",
        failures.len()
    ));
    for f in &failures {
        out.push_str(&format!(
            "### Seed {}\n\n```text\n{}```\n\n",
            f["seed"],
            explain(f)
        ));
    }
    if let Some(rows) = bench {
        out.push_str("## Bench ablation (`qcsim bench --sim`)\n\n");
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
