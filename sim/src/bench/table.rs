//! The human form of the benchmark: one aligned table per workload, a row
//! per switch setting, the ratios the bounds are stated in.

use std::fmt::Write as _;

use engine::Switches;

use super::job::Row;

/// How a row's switches read in the table's first column.
fn label(s: Switches) -> String {
    if s == Switches::ALL_ON {
        return "all on".into();
    }
    if s == Switches::ALL_OFF {
        return "all off".into();
    }
    let off: Vec<&str> = s.iter().filter(|(_, on)| !on).map(|(n, _)| n).collect();
    format!("-{}", off.join(" -"))
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

/// What each column of the table means, in column order: the key the
/// command line prints under the table.
pub const COLUMN_KEY: &[(&str, &str)] = &[
    (
        "switches",
        "the switch setting: all on, all off, or -NAME for each switch turned off",
    ),
    (
        "dev wr/guest wr",
        "device requests that change the image (writes, write_zeroes, discards) per guest write",
    ),
    (
        "dev B/guest B",
        "bytes written to the device (with zero buffers) per guest byte",
    ),
    ("dev flushes", "device flushes"),
    ("wr_zeroes", "write_zeroes requests sent to the device"),
    ("backing read", "bytes read from the backing file"),
    (
        "cow made",
        "COW areas created (head and tail of newly allocated clusters)",
    ),
    (
        "cancelled",
        "COW areas cancelled, wholly or in part, by later guest writes (delayed_cow)",
    ),
    ("performed", "COW areas copied or zeroed"),
    (
        "zeroing",
        "COW areas zeroed with write_zeroes instead of a buffer (zero_cow)",
    ),
    (
        "grows",
        "write_zeroes that grew the file ahead of allocation",
    ),
    (
        "extends",
        "writes that extended the file (each pays the latency model's extend cost)",
    ),
    ("joins", "guest writes that joined an in-flight allocation"),
    ("l2 wb", "L2 table writebacks"),
    ("rc wb", "refcount block writebacks"),
    (
        "ssd ms",
        "simulated time of the job on the SSD model, milliseconds",
    ),
    ("hdd ms", "the same on the rotating-disk model (--hdd: seeks cost with distance, write_zeroes are journal writes)"),
];

/// Render `rows` as one table per workload, in the order given.
pub fn render_table(rows: &[Row]) -> String {
    let mut header = vec![
        "switches",
        "dev wr/guest wr",
        "dev B/guest B",
        "dev flushes",
        "wr_zeroes",
        "backing read",
        "cow made",
        "cancelled",
        "performed",
        "zeroing",
        "grows",
        "extends",
        "joins",
        "l2 wb",
        "rc wb",
        "ssd ms",
    ];
    let hdd = rows.iter().any(|r| r.sim_time_hdd_ns.is_some());
    if hdd {
        header.push("hdd ms");
    }
    let mut out = String::new();
    let mut start = 0;
    while start < rows.len() {
        let w = rows[start].workload;
        let end = start + rows[start..].iter().take_while(|r| r.workload == w).count();
        let first = &rows[start];
        let _ = writeln!(
            out,
            "{}: {} guest writes, {} bytes, {} flush(es)",
            w.name(),
            first.guest_writes,
            first.guest_bytes,
            first.guest_flushes
        );
        let mut cells: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
        for r in &rows[start..end] {
            let mut c = vec![
                label(r.switches.0),
                ratio(r.device_write_requests, r.guest_writes),
                ratio(r.device_bytes_written, r.guest_bytes),
                r.device_flushes.to_string(),
                r.device_write_zeroes.to_string(),
                r.backing_bytes_read.to_string(),
                r.cow_created.to_string(),
                r.cow_cancelled.to_string(),
                r.cow_performed.to_string(),
                r.zeroing_requests.to_string(),
                r.grow_requests.to_string(),
                r.device_extends.to_string(),
                r.alloc_joins.to_string(),
                r.l2_writebacks.to_string(),
                r.refcount_writebacks.to_string(),
                ms(r.sim_time_ns),
            ];
            if hdd {
                c.push(r.sim_time_hdd_ns.map(ms).unwrap_or_else(|| "-".into()));
            }
            cells.push(c);
        }
        let widths: Vec<usize> = (0..header.len())
            .map(|i| cells.iter().map(|c| c[i].len()).max().unwrap_or(0))
            .collect();
        for c in &cells {
            let line: Vec<String> = c
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    if i == 0 {
                        format!("{s:<w$}", w = widths[i])
                    } else {
                        format!("{s:>w$}", w = widths[i])
                    }
                })
                .collect();
            let _ = writeln!(out, "  {}", line.join("  ").trim_end());
        }
        out.push('\n');
        start = end;
    }
    out
}
