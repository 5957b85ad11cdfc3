//! `summary.json`: a campaign's figures under stable names.
//!
//! ```text
//! { "format": "qcsim-campaign-report", "format_version": 1, "revision",
//!   "campaign": { "seeds": [A, B], "profile", "switches", "harsh",
//!                 "broken", "shard": [I, N], "parts": [...] },
//!   "result":   { "cases", "passed", "failed", "trace_hash", "totals",
//!                 "per_profile", "per_switches", "fault_coverage",
//!                 "optimisations", "failing_seeds", "failures",
//!                 "case_hashes" },
//!   "timing":   { "runs": [ { "shard", "jobs", "wall_seconds",
//!                 "cases_per_second", "progress": [[seconds, cases]...] } ] } }
//! ```
//!
//! `result` is a pure function of the campaign (its seeds, profile,
//! switches, revision): two runs, or a merge of shards and one run, are
//! compared on it exactly. `timing` is the wall clock's and never
//! compared. `fault_coverage` and `optimisations` are views of `totals`
//! ([`views`]), recomputed after a merge.

use serde_json::{json, Map, Value};
use sim::campaign::{CampaignPlan, CampaignSummary};

/// The format's name and version: `merge` refuses anything else.
pub const FORMAT: &str = "qcsim-campaign-report";
pub const FORMAT_VERSION: u64 = 1;

/// Wall-clock progress of one process's run of a campaign.
#[derive(Debug, Clone, Default)]
pub struct Timing {
    pub jobs: usize,
    pub wall_seconds: f64,
    /// (seconds since the start, cases done), sampled as cases finish.
    pub progress: Vec<(f64, u64)>,
}

/// What a failing case's entry says beside its verdicts.
pub struct FailureEntry<'a> {
    pub failure: &'a sim::campaign::CaseFailure,
    /// The replay command, with the file the case was saved to.
    pub replay: String,
}

/// The campaign's description: what ran, in the CLI's words.
pub fn campaign_json(
    plan: &CampaignPlan,
    seeds: (u64, u64),
    switches: &str,
    broken: Option<&str>,
) -> Value {
    let shard = json!([plan.shard.0, plan.shard.1]);
    json!({
        "seeds": [seeds.0, seeds.1],
        "profile": plan.profile.name(),
        "switches": switches,
        "harsh": plan.harsh,
        "broken": broken,
        "shard": shard,
        "parts": [ { "seeds": [seeds.0, seeds.1], "shard": shard } ],
    })
}

/// The whole `summary.json` of a finished campaign.
pub fn build(
    campaign: Value,
    summary: &CampaignSummary,
    failures: &[FailureEntry<'_>],
    timing: &Timing,
) -> anyhow::Result<Value> {
    let shard = campaign["shard"].clone();
    let failures: Vec<Value> = failures
        .iter()
        .map(failure_json)
        .collect::<anyhow::Result<_>>()?;
    let mut result = json!({
        "cases": summary.cases,
        "passed": summary.passed,
        "failed": summary.failed,
        "trace_hash": format!("{:016x}", summary.trace_hash),
        "totals": serde_json::to_value(summary.totals)?,
        "per_profile": serde_json::to_value(&summary.per_profile)?,
        "per_switches": serde_json::to_value(&summary.per_switches)?,
        "failing_seeds": summary.failures.iter().map(|f| f.case.seed).collect::<Vec<_>>(),
        "failures": failures,
        "case_hashes": summary
            .case_hashes
            .iter()
            .map(|&(seed, h)| json!([seed, format!("{h:016x}")]))
            .collect::<Vec<_>>(),
    });
    add_views(&mut result);
    Ok(json!({
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "revision": env!("QCSIM_REVISION"),
        "campaign": campaign,
        "result": result,
        "timing": { "runs": [timing_json(&shard, timing)] },
    }))
}

/// A failing case's entry in `result.failures`.
pub fn failure_json(f: &FailureEntry<'_>) -> anyhow::Result<Value> {
    Ok(json!({
        "seed": f.failure.case.seed,
        "profile": f.failure.case.profile.map(|p| p.name()),
        "switches": f.failure.case.engine.switches.mask(),
        "deterministic": f.failure.deterministic,
        "replay": f.replay,
        "failures": serde_json::to_value(&f.failure.report.failures)?,
    }))
}

fn timing_json(shard: &Value, t: &Timing) -> Value {
    let cases = t.progress.last().map_or(0, |p| p.1);
    json!({
        "shard": shard,
        "jobs": t.jobs,
        "wall_seconds": round3(t.wall_seconds),
        "cases_per_second": if t.wall_seconds > 0.0 { round3(cases as f64 / t.wall_seconds) } else { 0.0 },
        "progress": t.progress.iter().map(|&(s, n)| json!([round3(s), n])).collect::<Vec<_>>(),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Put `fault_coverage` and `optimisations`, views of `totals`, into
/// `result` (replacing what was there).
pub fn add_views(result: &mut Value) {
    let (coverage, optimisations) = views(&result["totals"]);
    if let Some(o) = result.as_object_mut() {
        o.insert("fault_coverage".into(), coverage);
        o.insert("optimisations".into(), optimisations);
    }
}

/// The fault coverage (faults injected, by kind, and the cases that met
/// each kind, with the errors they excused) and the optimisations'
/// counters, taken from `totals`.
pub fn views(totals: &Value) -> (Value, Value) {
    let coverage = json!({
        "faults_injected": totals["faults_injected"],
        "by_kind": totals["fault_kinds"],
        "cases_by_kind": totals["fault_kind_cases"],
        "excused_errors": totals["excused"],
    });
    let mut optimisations = match &totals["optimisations"] {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    optimisations.insert("grow_requests".into(), totals["grow_requests"].clone());
    (coverage, Value::Object(optimisations))
}
