//! Campaign reports: a directory per campaign holding `summary.json` (the
//! figures, under stable names), `report.md` and a self-contained
//! `report.html` with SVG charts. Everything but the summary's building is
//! done on the summary's JSON, not on Rust types, so a merged report
//! (`qcsim report merge`) renders as a campaign's does, and counters added
//! to the campaign's totals later appear without changes here.
//!
//! - `summary`: building `summary.json` from a finished campaign; its
//!   deterministic part (`result`) apart from the wall-clock `timing`.
//! - `merge`: shards' summaries into one, checked to be parts of one
//!   campaign.
//! - `explain`: a failure in words, with the hex diff of a wrong read and
//!   the replay command, for the terminal and the report.
//! - `sections`: the tables both renderings show, from the JSON.
//! - `markdown`, `html`, `svg`: the two renderings and the charts.
//! - `files`: writing the directory so that a failed command destroys no
//!   file.

pub mod explain;
pub mod files;
pub mod html;
pub mod markdown;
pub mod merge;
pub mod sections;
pub mod summary;
pub mod svg;

use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// The three files of a report directory.
pub const SUMMARY: &str = "summary.json";
pub const MARKDOWN: &str = "report.md";
pub const HTML: &str = "report.html";

/// Write `summary` and its two renderings into `dir` (created if need be);
/// `bench` is a `qcsim bench --sim --json` output to chart, if given.
pub fn write_report(dir: &Path, summary: &Value, bench: Option<&[Value]>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the report directory {}", dir.display()))?;
    let json = serde_json::to_string_pretty(summary)? + "\n";
    files::write_all(
        dir,
        &[
            (SUMMARY, json),
            (MARKDOWN, markdown::render(summary, bench)),
            (HTML, html::render(summary, bench)),
        ],
    )
}

/// Read a `qcsim bench --sim --json` output: one JSON object per line.
pub fn read_bench(path: &Path) -> anyhow::Result<Vec<Value>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the bench results {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).with_context(|| {
            format!(
                "{} line {}: not a JSON row of `qcsim bench --sim --json`",
                path.display(),
                i + 1
            )
        })?;
        if !v.get("workload").is_some_and(Value::is_string)
            || !v.get("switches").is_some_and(Value::is_object)
        {
            anyhow::bail!(
                "{} line {}: a bench row needs \"workload\" and \"switches\"",
                path.display(),
                i + 1
            );
        }
        rows.push(v);
    }
    if rows.is_empty() {
        anyhow::bail!("{}: no bench rows", path.display());
    }
    Ok(rows)
}
