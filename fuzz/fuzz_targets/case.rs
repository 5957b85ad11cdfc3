//! Fuzz target `case`: bytes decoded into a whole simulated case
//! (`Case::from_arbitrary`, the decoder the seeded runs share), run under
//! the deterministic runner with the reference model and the checker. Any
//! failure the runner reports is a crash here, printed with the case's
//! JSON so it can be saved and replayed with `qcsim replay`.

#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use sim::case::Case;
use sim::runner::{run_case, RunOptions};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(case) = Case::from_arbitrary(&mut u) else {
        return;
    };
    let report = run_case(&case, &RunOptions::default());
    if !report.passed() {
        eprintln!("---- failing case (save as case.json, run `qcsim replay case.json`) ----");
        eprintln!("{}", case.to_json());
        for f in &report.failures {
            eprintln!("{f}");
        }
        panic!(
            "case failed: {} failure(s), trace hash {:016x}",
            report.failures.len(),
            report.trace_hash
        );
    }
});
