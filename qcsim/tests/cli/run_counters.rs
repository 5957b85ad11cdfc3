//! The runner reports what the optimisations did: the engine's COW and join
//! counters and the disk's requests over the last epoch's guest requests,
//! and `qcsim run` prints them. On sequential cases, delayed COW cancels COW
//! areas and joins allocations; with it off, neither happens.

use std::process::Command;

use engine::Switches;
use sim::case::Case;
use sim::runner::{run_case, RunOptions};
use sim::workload::Profile;

#[test]
fn delayed_cow_counters_move_only_when_it_is_on() {
    let mut cancelled_on = 0;
    for seed in 0..12 {
        let mut case = Case::generate(seed, Profile::Sequential);
        case.engine.switches = Switches::ALL_ON;
        let on = run_case(&case, &RunOptions::default());
        assert!(on.passed(), "seed {seed}: {:?}", on.failures);
        cancelled_on += on.stats.engine.cow_cancelled_whole;
        let guest = on.stats.engine.guest_writes + on.stats.engine.guest_zero_writes;
        let d = on.stats.epoch_disk;
        assert!(
            guest == 0 || d.writes + d.write_zeroes > 0,
            "seed {seed}: guest writes but no device writes in the epoch"
        );
        case.engine.switches = Switches::ALL_ON.with("delayed_cow", false).unwrap();
        let off = run_case(&case, &RunOptions::default());
        assert!(off.passed(), "seed {seed}: {:?}", off.failures);
        let e = off.stats.engine;
        assert_eq!(
            (
                e.cow_cancelled_whole,
                e.cow_cancelled_partial,
                e.alloc_joins
            ),
            (0, 0, 0),
            "seed {seed}"
        );
    }
    assert!(cancelled_on > 0, "sequential cases cancel COW areas");
}

#[test]
fn qcsim_run_prints_the_optimisation_counters() {
    let out = Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(["run", "--seed", "12"])
        .output()
        .expect("qcsim runs");
    let text = String::from_utf8_lossy(&out.stdout);
    for what in [
        "device writes per guest write",
        "device bytes per guest byte",
        "device flushes per guest flush",
        "COW areas created",
        "cancelled whole",
        "cancelled in part",
        "performed",
        "zeroing requests",
        "joins",
    ] {
        assert!(text.contains(what), "no {what:?} in:\n{text}");
    }
}
