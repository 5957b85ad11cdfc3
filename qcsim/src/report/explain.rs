//! A failing case explained, from its entry in `summary.json` (so a merged
//! report explains its failures as a campaign does): the failure's text;
//! for a wrong read, each wrong sector's write ids, the device writes that
//! last touched it and a hex diff of what came back against what the
//! model allowed; for a failed check, the findings and the diff of
//! `qcsim dump` before and after the crash; always the replay command.

use serde_json::Value;

/// Wrong sectors shown with a hex diff, and allowed values diffed against
/// each: enough to see the pattern, not a page per sector.
const SECTORS_DIFFED: usize = 2;
const ALLOWED_DIFFED: usize = 2;

/// The explanation of one failing case (`result.failures[i]`).
pub fn explain(entry: &Value) -> String {
    let mut out = String::new();
    let seed = &entry["seed"];
    let nondet = if entry["deterministic"] == false {
        " (NOT DETERMINISTIC: a second run differed)"
    } else {
        ""
    };
    out.push_str(&format!("seed {seed}{nondet}\n"));
    for f in entry["failures"].as_array().into_iter().flatten().take(3) {
        out.push_str(&explain_failure(f));
    }
    if let Some(r) = entry["replay"].as_str() {
        out.push_str(&format!("replay: {r}\n"));
    }
    out
}

fn explain_failure(f: &Value) -> String {
    let s = |k: &str| f[k].as_str().unwrap_or("").to_string();
    let mut out = String::new();
    match f["kind"].as_str().unwrap_or("") {
        "model" => {
            out.push_str("model violation:\n");
            let sectors = f["sectors"].as_array().cloned().unwrap_or_default();
            if sectors.is_empty() {
                out.push_str(&indent(&s("text")));
            } else {
                // The wrong sectors in a line each; the first in detail
                // below (the text's indented lines say the same).
                let text = s("text");
                let headlines: Vec<&str> = text.lines().filter(|l| !l.starts_with(' ')).collect();
                out.push_str(&indent(&headlines.join("\n")));
                out.push_str("  the first wrong sectors in detail:\n");
            }
            out.push_str(&evidence(f));
        }
        "check" => {
            out.push_str(&format!("check of the {} image found:\n", s("label")));
            out.push_str(&indent(&s("summary")));
            out.push_str(&evidence(f));
        }
        "engine" => out.push_str(&format!("engine: {}\n", s("what"))),
        "hang" => out.push_str(&format!("group {}: {}\n", f["group"], s("message"))),
        "panic" => out.push_str(&format!("panic: {}\n", s("message"))),
        "driver" => out.push_str(&format!("{}: {}\n", s("driver"), s("what"))),
        "overlap" => {
            out.push_str(&format!(
                "{} overlapping writes in flight on {}:\n",
                f["count"],
                s("disk")
            ));
            for o in f["overlaps"].as_array().into_iter().flatten() {
                out.push_str(&format!("  {}\n", o.as_str().unwrap_or("")));
            }
        }
        other => out.push_str(&format!("{other}: {f}\n")),
    }
    out
}

/// What a failure carries beyond its text: a wrong read's first sectors
/// in detail (write ids, device writes, hex diff), a failed check's dump
/// diff; empty for the other kinds. `qcsim run` and `replay` print it
/// under the failure's own lines.
pub fn evidence(f: &Value) -> String {
    let mut out = String::new();
    match f["kind"].as_str().unwrap_or("") {
        "model" => {
            for sector in f["sectors"]
                .as_array()
                .into_iter()
                .flatten()
                .take(SECTORS_DIFFED)
            {
                out.push_str(&explain_sector(sector));
            }
        }
        "check" => {
            if let Some(d) = f["dump_diff"].as_str() {
                out.push_str("  qcsim dump before the crash (-) against the crash state (+):\n");
                out.push_str(&indent(d));
            }
        }
        _ => {}
    }
    out
}

/// One wrong sector: the write ids, the device writes, the hex diff.
fn explain_sector(v: &Value) -> String {
    let mut out = format!(
        "  sector {} ({}): came back as {}\n",
        v["sector"],
        v["when"].as_str().unwrap_or("?"),
        v["observed"].as_str().unwrap_or("?")
    );
    let ids: Vec<String> = v["write_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| format!("write {i}"))
        .collect();
    if !ids.is_empty() {
        out.push_str(&format!("    write ids involved: {}\n", ids.join(", ")));
    }
    match v["host_offset"].as_u64() {
        None if v["driver"].is_string() => out.push_str(&format!(
            "    read through {}, whose mapping is its own and not looked up \
             (the replay's disk-replay command rebuilds what it sent each disk)\n",
            v["driver"].as_str().unwrap_or("?")
        )),
        Some(h) => {
            out.push_str(&format!(
                "    maps to host offset {h:#x}; the device writes that last touched it:\n"
            ));
            let writes = v["last_device_writes"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for w in &writes {
                out.push_str(&format!("      {}\n", w.as_str().unwrap_or("?")));
            }
            if writes.is_empty() {
                out.push_str(&format!("      {}\n", sim::runner::NO_WRITES_LOGGED));
            }
        }
        None => out.push_str("    not mapped to a data cluster now\n"),
    }
    let got = v["got"].as_str().unwrap_or("");
    for a in v["allowed"]
        .as_array()
        .into_iter()
        .flatten()
        .take(ALLOWED_DIFFED)
    {
        let name = a["value"].as_str().unwrap_or("?");
        let Some(bytes) = a["bytes"].as_str().filter(|b| !b.is_empty()) else {
            out.push_str(&format!("    allowed {name} (no one byte value to diff)\n"));
            continue;
        };
        out.push_str(&format!(
            "    hex diff: allowed {name} (-) against what came back (+):\n"
        ));
        out.push_str(&indent_by(&hex_diff(bytes, got), "      "));
    }
    out
}

/// Most lines of one hex diff: a sector that differs whole (zeroes where
/// data should be) shows its first lines, not all 64.
const DIFF_LINES: usize = 16;

/// A line diff (`similar`) of two hex dumps: only lines that differ, each
/// expected line (-) followed by the line that came back (+), with one
/// line of context around each run, at most [`DIFF_LINES`] lines.
pub fn hex_diff(expected_hex: &str, got_hex: &str) -> String {
    let a = hex_dump(expected_hex);
    let b = hex_dump(got_hex);
    let (al, bl): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let diff = similar::TextDiff::from_lines(&a, &b);
    let mut lines: Vec<String> = Vec::new();
    let mut differing = 0;
    for group in diff.grouped_ops(1) {
        if !lines.is_empty() {
            lines.push("...".into());
        }
        for op in group {
            let (_, old, new) = op.as_tag_tuple();
            let (o, n): (Vec<&str>, Vec<&str>) =
                (al[old.clone()].to_vec(), bl[new.clone()].to_vec());
            if op.tag() == similar::DiffTag::Equal {
                lines.extend(o.iter().map(|l| format!(" {l}")));
                continue;
            }
            // A replaced run, pairwise: each expected line beside its
            // counterpart, which is how a reader compares bytes.
            for i in 0..o.len().max(n.len()) {
                differing += 1;
                if let Some(l) = o.get(i) {
                    lines.push(format!("-{l}"));
                }
                if let Some(l) = n.get(i) {
                    lines.push(format!("+{l}"));
                }
            }
        }
    }
    if lines.is_empty() {
        return "(identical bytes)\n".into();
    }
    let total = lines.len();
    let mut out: String = lines
        .iter()
        .take(DIFF_LINES)
        .map(|l| format!("{l}\n"))
        .collect();
    if total > DIFF_LINES {
        out.push_str(&format!(
            "... ({differing} of {} lines of 16 bytes differ; {} more diff lines left out)\n",
            al.len(),
            total - DIFF_LINES
        ));
    }
    out
}

/// `0000  00 11 22 ... ff  |..."3DU|`, 16 bytes a line.
fn hex_dump(hex: &str) -> String {
    let bytes: Vec<u8> = hex
        .as_bytes()
        .chunks(2)
        .filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect();
    let mut out = String::new();
    for (i, line) in bytes.chunks(16).enumerate() {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    b as char
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!("{:04x}  {}  |{ascii}|\n", i * 16, hex.join(" ")));
    }
    out
}

fn indent(s: &str) -> String {
    indent_by(s, "  ")
}

fn indent_by(s: &str, by: &str) -> String {
    s.lines().map(|l| format!("{by}{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::hex_diff;

    #[test]
    fn the_hex_diff_shows_the_lines_that_differ() {
        let a = "00".repeat(64);
        let mut b = "00".repeat(64);
        b.replace_range(66..68, "ab");
        let d = hex_diff(&a, &b);
        assert!(d.contains("-0020  00 00"), "{d}");
        assert!(d.contains("+0020  00 ab"), "{d}");
        assert!(!d.contains("0000  "), "line 0 is beyond the context: {d}");
        assert_eq!(hex_diff(&a, &a), "(identical bytes)\n");
    }

    /// A model failure's sectors come out with their write ids, the
    /// device writes and the diff against each allowed value; a failure
    /// of another kind has no evidence beyond its text.
    #[test]
    fn a_wrong_sector_is_shown_with_its_writes_and_diff() {
        let got = format!("ab{}", "00".repeat(511));
        let f = serde_json::json!({
            "kind": "model",
            "text": "read op 3: guest sector 7 ...\n  maps to ...\n",
            "sectors": [{
                "sector": 7, "when": "read op 3", "observed": "garbage",
                "got": got,
                "allowed": [
                    {"value": "zeroes", "write_id": null, "bytes": "00".repeat(512)},
                    {"value": "the garbage an earlier recovery found", "write_id": null, "bytes": ""}
                ],
                "write_ids": [12],
                "host_offset": 4096,
                "last_device_writes": ["#5 write 4096+512"]
            }]
        });
        let e = super::evidence(&f);
        assert!(e.contains("write ids involved: write 12"), "{e}");
        assert!(e.contains("host offset 0x1000"), "{e}");
        assert!(e.contains("#5 write 4096+512"), "{e}");
        assert!(e.contains("-0000  00 00"), "{e}");
        assert!(e.contains("+0000  ab 00"), "{e}");
        assert!(e.contains("no one byte value"), "{e}");
        let whole = super::explain(
            &serde_json::json!({"seed": 9, "replay": "qcsim replay x", "failures": [f]}),
        );
        assert!(
            whole.starts_with("seed 9\n") && whole.ends_with("replay: qcsim replay x\n"),
            "{whole}"
        );
        assert!(
            !whole.contains("maps to ..."),
            "the text's indented lines are not repeated: {whole}"
        );
        assert_eq!(
            super::evidence(&serde_json::json!({"kind": "panic", "message": "x"})),
            ""
        );
    }
}
