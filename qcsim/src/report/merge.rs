//! `qcsim report merge`: the summaries of shards (or of adjacent seed
//! ranges) of one campaign merged into the summary of the whole, so that
//! its totals and trace hash equal those of one campaign over the union.
//!
//! Totals are added field by field over the JSON, whatever fields they
//! have (counts are sums); the trace hash is recomputed from every case's
//! hash with `sim::campaign::combined_trace_hash`. Inputs must agree on
//! what ran (revision, profile, switches, harsh mode, broken variant) and
//! hold no seed twice; each must be internally consistent (its trace hash
//! is its cases' hashes combined).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{json, Value};

use super::summary::{add_views, FORMAT, FORMAT_VERSION};

/// One input: where it came from and its parsed summary.
pub struct Input {
    pub path: PathBuf,
    pub summary: Value,
}

/// Read `DIR/summary.json` (or the file itself, if `path` is one) and
/// check its format.
pub fn read_input(path: &Path) -> anyhow::Result<Input> {
    if !path.exists() {
        bail!(
            "{}: no such report directory (a campaign's --report DIR, holding summary.json)",
            path.display()
        );
    }
    let file = if path.is_dir() {
        path.join(super::SUMMARY)
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("reading the campaign summary {}", file.display()))?;
    let summary: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
    let named = |what: &str| format!("{}: {what}", file.display());
    if summary["format"] != FORMAT {
        bail!(named(&format!(
            "not a campaign summary (\"format\" must be {FORMAT:?}, found {})",
            summary["format"]
        )));
    }
    if summary["format_version"] != FORMAT_VERSION {
        bail!(named(&format!(
            "format_version {} is not {FORMAT_VERSION}, the version this qcsim reads",
            summary["format_version"]
        )));
    }
    for field in ["cases", "passed", "failed"] {
        if !summary["result"][field].is_u64() {
            bail!(named(&format!("result.{field} is missing or not a count")));
        }
    }
    for field in ["totals", "per_profile", "per_switches"] {
        if !summary["result"][field].is_object() {
            bail!(named(&format!(
                "result.{field} is missing or not an object"
            )));
        }
    }
    for field in ["case_hashes", "failures", "failing_seeds"] {
        if !summary["result"][field].is_array() {
            bail!(named(&format!("result.{field} is missing or not a list")));
        }
    }
    let hashes = case_hashes(&summary)
        .map_err(|e| anyhow::anyhow!(named(&format!("result.case_hashes: {e}"))))?;
    if hashes.len() as u64 != summary["result"]["cases"].as_u64().unwrap_or(0) {
        bail!(named(&format!(
            "result.case_hashes holds {} cases but result.cases says {}",
            hashes.len(),
            summary["result"]["cases"]
        )));
    }
    let mut pairs: Vec<(u64, u64)> = hashes.into_iter().collect();
    let combined = format!("{:016x}", sim::campaign::combined_trace_hash(&mut pairs));
    if summary["result"]["trace_hash"] != Value::String(combined.clone()) {
        bail!(named(&format!(
            "result.trace_hash {} is not its cases' hashes combined ({combined}): the file was changed or cut",
            summary["result"]["trace_hash"]
        )));
    }
    Ok(Input {
        path: file,
        summary,
    })
}

/// `[[seed, "hex"], ...]` as a map; a seed listed twice is an error.
fn case_hashes(summary: &Value) -> Result<BTreeMap<u64, u64>, String> {
    let mut m = BTreeMap::new();
    for (i, e) in summary["result"]["case_hashes"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let seed = e[0].as_u64();
        let hash = e[1].as_str().and_then(|h| u64::from_str_radix(h, 16).ok());
        let (Some(seed), Some(hash)) = (seed, hash) else {
            return Err(format!("entry {i} is not [seed, \"hex hash\"]: {e}"));
        };
        if m.insert(seed, hash).is_some() {
            return Err(format!("seed {seed} is listed twice"));
        }
    }
    Ok(m)
}

/// The fields every input must agree on, with the path they are at.
const SAME: &[(&str, &str)] = &[
    ("revision", ""),
    ("profile", "campaign"),
    ("switches", "campaign"),
    ("harsh", "campaign"),
    ("broken", "campaign"),
];

/// Merge `inputs` (at least one) into one summary.
pub fn merge(inputs: &[Input]) -> anyhow::Result<Value> {
    let Some(first) = inputs.first() else {
        bail!("report merge: give at least one report directory");
    };
    for other in &inputs[1..] {
        for (field, under) in SAME {
            let get = |s: &Value| {
                if under.is_empty() {
                    s[*field].clone()
                } else {
                    s[*under][*field].clone()
                }
            };
            let (a, b) = (get(&first.summary), get(&other.summary));
            if a != b {
                let name = if under.is_empty() {
                    field.to_string()
                } else {
                    format!("{under}.{field}")
                };
                bail!(
                    "{} and {} are not parts of one campaign: {name} is {a} in one and {b} in the other",
                    first.path.display(),
                    other.path.display()
                );
            }
        }
    }
    // Every seed once.
    let mut owner: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        for (seed, hash) in case_hashes(&input.summary).map_err(anyhow::Error::msg)? {
            if let Some((j, _)) = owner.insert(seed, (i, hash)) {
                bail!(
                    "{} and {} overlap: both ran seed {seed} (merge shards of one range, or ranges that do not overlap)",
                    inputs[j].path.display(),
                    input.path.display()
                );
            }
        }
    }
    let mut result = json!({
        "cases": 0, "passed": 0, "failed": 0, "trace_hash": "",
        "totals": {}, "per_profile": {}, "per_switches": {},
    });
    let mut failures: Vec<Value> = Vec::new();
    let mut parts: Vec<Value> = Vec::new();
    let mut runs: Vec<Value> = Vec::new();
    for input in inputs {
        let r = &input.summary["result"];
        for field in [
            "cases",
            "passed",
            "failed",
            "totals",
            "per_profile",
            "per_switches",
        ] {
            add_into(&mut result[field], &r[field], &format!("result.{field}"))
                .with_context(|| format!("merging {}", input.path.display()))?;
        }
        failures.extend(r["failures"].as_array().into_iter().flatten().cloned());
        parts.extend(
            input.summary["campaign"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
        runs.extend(
            input.summary["timing"]["runs"]
                .as_array()
                .into_iter()
                .flatten()
                .cloned(),
        );
    }
    failures.sort_by_key(|f| f["seed"].as_u64());
    parts.sort_by_key(|p| (p["seeds"][0].as_u64(), p["shard"][0].as_u64()));
    let mut pairs: Vec<(u64, u64)> = owner.iter().map(|(&s, &(_, h))| (s, h)).collect();
    let hash = sim::campaign::combined_trace_hash(&mut pairs);
    result["trace_hash"] = json!(format!("{hash:016x}"));
    result["failing_seeds"] = json!(failures
        .iter()
        .filter_map(|f| f["seed"].as_u64())
        .collect::<Vec<_>>());
    result["failures"] = Value::Array(failures);
    result["case_hashes"] = json!(pairs
        .iter()
        .map(|&(s, h)| json!([s, format!("{h:016x}")]))
        .collect::<Vec<_>>());
    add_views(&mut result);

    let start = parts
        .iter()
        .filter_map(|p| p["seeds"][0].as_u64())
        .min()
        .unwrap_or(0);
    let end = parts
        .iter()
        .filter_map(|p| p["seeds"][1].as_u64())
        .max()
        .unwrap_or(0);
    // Complete: every seed of the span ran, as one campaign over it would.
    let complete = end.checked_sub(start) == Some(pairs.len() as u64);
    let mut campaign = first.summary["campaign"].clone();
    campaign["seeds"] = json!([start, end]);
    campaign["shard"] = if complete { json!([0, 1]) } else { Value::Null };
    campaign["complete"] = json!(complete);
    campaign["parts"] = Value::Array(parts);
    Ok(json!({
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "revision": first.summary["revision"],
        "campaign": campaign,
        "result": result,
        "timing": { "runs": runs },
    }))
}

/// The shards of a sharded range that no input holds and whose seeds did
/// not run, as `shard-I-of-N (seeds A..B, --shard I/N)` (the name
/// `deploy/run-shard.sh` gives its report directory): a shard killed
/// before it wrote its report leaves no directory, and the merge is only
/// given the directories there are. Shards are grouped by the start of
/// their range and their count (the ends of a timed campaign's shards
/// differ); a shard is missing only if one of its seeds did not run, so
/// a range split two ways by some inputs and four ways by others can
/// still be whole. Works on a merged summary ([`merge`]'s).
pub fn missing_shards(merged: &Value) -> Vec<String> {
    let ran: BTreeSet<u64> = case_hashes(merged)
        .unwrap_or_default()
        .into_keys()
        .collect();
    // (start, count) -> (the largest end, the indices present)
    let mut groups: BTreeMap<(u64, u64), (u64, BTreeSet<u64>)> = BTreeMap::new();
    for part in merged["campaign"]["parts"].as_array().into_iter().flatten() {
        let (Some(start), Some(end), Some(index), Some(count)) = (
            part["seeds"][0].as_u64(),
            part["seeds"][1].as_u64(),
            part["shard"][0].as_u64(),
            part["shard"][1].as_u64(),
        ) else {
            continue;
        };
        let group = groups.entry((start, count)).or_default();
        group.0 = group.0.max(end);
        group.1.insert(index);
    }
    let mut missing = Vec::new();
    for ((start, count), (end, present)) in groups {
        for index in (0..count).filter(|i| !present.contains(i)) {
            // The shard's seeds: those of the range with seed % count == index.
            let first = start.saturating_add((index + count - start % count) % count);
            let mut seeds = (first..end).step_by(usize::try_from(count).unwrap_or(usize::MAX));
            if seeds.any(|s| !ran.contains(&s)) {
                missing.push(format!(
                    "shard-{index}-of-{count} (seeds {start}..{end}, --shard {index}/{count})"
                ));
            }
        }
    }
    missing
}

/// `acc += v`, field by field: counts are added, objects merged by key
/// (a key only one side has is kept, so summaries from builds that count
/// more merge), anything else must be equal.
pub fn add_into(acc: &mut Value, v: &Value, path: &str) -> anyhow::Result<()> {
    match (&mut *acc, v) {
        (Value::Number(a), Value::Number(b)) => {
            let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) else {
                bail!("{path}: {a} and {b} are not both counts");
            };
            let sum = x
                .checked_add(y)
                .with_context(|| format!("{path}: {x} + {y} overflows"))?;
            *acc = json!(sum);
        }
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                match a.get_mut(k) {
                    Some(av) => add_into(av, bv, &format!("{path}.{k}"))?,
                    None => {
                        a.insert(k.clone(), bv.clone());
                    }
                }
            }
        }
        (a, b) if *a == *b => {}
        (a, b) => bail!("{path}: cannot add {a} and {b}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{add_into, missing_shards};
    use serde_json::json;

    /// A merged summary's two fields `missing_shards` reads: the parts
    /// (`[start, end, index, count]`) and the seeds that ran.
    fn merged(parts: &[[u64; 4]], ran: impl Iterator<Item = u64>) -> serde_json::Value {
        let parts: Vec<_> = parts
            .iter()
            .map(|&[a, b, i, n]| json!({"seeds": [a, b], "shard": [i, n]}))
            .collect();
        let hashes: Vec<_> = ran.map(|s| json!([s, "00"])).collect();
        json!({"campaign": {"parts": parts}, "result": {"case_hashes": hashes}})
    }

    #[test]
    fn missing_shards_are_named_and_covered_seeds_are_not_missing() {
        // Shard 2 of 4 of 10..30 absent: its seeds (10 % 4 == 2: 10, 14, ...) did not run.
        let m = merged(
            &[[10, 30, 0, 4], [10, 30, 1, 4], [10, 30, 3, 4]],
            (10..30).filter(|s| s % 4 != 2),
        );
        assert_eq!(
            missing_shards(&m),
            ["shard-2-of-4 (seeds 10..30, --shard 2/4)"]
        );
        // Halves by 2 and quarters by 4: 0/2 with 1/4 and 3/4 is every seed.
        let m = merged(&[[0, 8, 0, 2], [0, 8, 1, 4], [0, 8, 3, 4]], 0..8);
        assert!(missing_shards(&m).is_empty());
        // A timed campaign's shards end at different seeds.
        let m = merged(&[[0, 9, 0, 2], [0, 8, 1, 2]], 0..9);
        assert!(missing_shards(&m).is_empty());
        // More shards than seeds: an empty shard is not missing.
        let m = merged(&[[0, 2, 0, 4], [0, 2, 1, 4]], 0..2);
        assert!(missing_shards(&m).is_empty());
    }

    #[test]
    fn counts_add_and_objects_merge_by_key() {
        let mut a = json!({"x": 1, "o": {"y": 2}, "only_a": 5});
        add_into(&mut a, &json!({"x": 10, "o": {"y": 3, "z": 4}}), "t").unwrap();
        assert_eq!(a, json!({"x": 11, "o": {"y": 5, "z": 4}, "only_a": 5}));
        let mut b = json!({"x": "s"});
        let e = add_into(&mut b, &json!({"x": 1}), "t").unwrap_err();
        assert!(e.to_string().contains("t.x"), "{e}");
        let mut c = json!({"x": u64::MAX});
        assert!(add_into(&mut c, &json!({"x": 1}), "t").is_err());
    }
}
