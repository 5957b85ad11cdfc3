//! The progress bar of every long command (`campaign`, `bench --sim`,
//! `enumerate`, `shrink`, `trace run`, `exhaust`): position, rate and time
//! left, on standard error, and nothing at all when standard error is not
//! a terminal (a log, CI, a pipe) or the command was asked to be quiet,
//! so output captured by a script holds only the command's figures.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// A bar over `len` units named `unit` ("cases", "jobs", "runs").
pub fn bar(len: u64, unit: &str, quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {unit}, {{rate}}, {{msg}} [{{elapsed_precise}}, {{eta}} left]"
        ))
        .expect("a valid template")
        // indicatif's own {per_sec} prints four decimals.
        .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(w, "{:.1}/s", s.per_sec());
        }),
    );
    b
}
