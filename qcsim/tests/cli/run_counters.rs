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

/// `qcsim run` and `qcsim campaign` print every rare-path count by its
/// stable name, and the campaign report carries them under those names,
/// summed and as the cases that reached each.
#[test]
fn run_and_campaign_print_the_rare_paths() {
    let names = engine::RarePaths::default().named().map(|(k, _)| k);
    let out = Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(["run", "--seed", "12"])
        .output()
        .expect("qcsim runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("rare paths: "))
        .unwrap_or_else(|| panic!("no rare paths line in:\n{text}"));
    for k in names {
        assert!(line.contains(&format!("{k} ")), "no {k} in {line:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(["campaign", "--seeds", "0..2", "--jobs", "1", "--quiet"])
        .args(["--reports", "r", "--corpus", "c"])
        .current_dir(dir.path())
        .output()
        .expect("qcsim runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("rare paths: "))
        .unwrap_or_else(|| panic!("no rare paths line in:\n{text}"));
    for k in names {
        assert!(line.contains(&format!("{k} ")), "no {k} in {line:?}");
    }
    assert!(text.contains("rare paths, cases reaching each: "), "{text}");
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("r/campaign-0-2/summary.json")).unwrap(),
    )
    .unwrap();
    let totals = &report["result"]["totals"];
    for k in names {
        assert!(totals["rare_paths"][k].is_u64(), "{k}: {totals}");
        assert!(totals["rare_path_cases"][k].as_u64().unwrap() <= 2, "{k}");
    }
}
