//! Fuzz target `check`: bytes taken as a qcow2 image and given to the
//! checker (`oracle::check::check`), then to `repair -r all` on a copy, and
//! the repaired copy checked again. None of it may panic; the checker's
//! verdicts are not judged here (the runner and the QEMU interop tests do
//! that), only its robustness against hostile images.

#![no_main]

use libfuzzer_sys::fuzz_target;
use oracle::check::{check, repair, RepairMode};

fuzz_target!(|data: &[u8]| {
    let image = data.to_vec();
    let report = check(&image);
    // The report's JSON and text forms must render for any image.
    let _ = report.to_qemu_json();
    let _ = report.human();
    for mode in [RepairMode::Leaks, RepairMode::All] {
        let mut copy = image.clone();
        if repair(&mut copy, mode).is_ok() {
            let _ = check(&copy);
        }
    }
});
