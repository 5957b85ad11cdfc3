//! Exhaustive crash states catch a broken engine: with the COW of partial
//! clusters dropped (`Broken::DropPartialCow`), some crash state of an
//! overlay written in partial clusters loses backing data; the correct
//! engine passes every state of the same workload.

use engine::options::Broken;
use sim::case::{Case, Op};
use sim::runner::{enumerate_crash_states, EnumerateOptions, Granularity};
use sim::workload::Profile;

fn overlay(seed: u64) -> Case {
    let mut c = Case::generate(seed, Profile::Backing);
    // Enumeration covers one disk: no external data file.
    c.image = c.image.without_data_file();
    c.disk.faults.enabled = false;
    let w = |sector, sectors| Op::Write {
        sector,
        sectors,
        fua: false,
    };
    c.workload = vec![
        vec![w(1, 2), w(37, 3)],
        vec![Op::Flush],
        vec![w(70, 1), w(5, 2), Op::Flush, Op::Crash],
    ];
    c.validate().expect("a valid case");
    assert!(c.image.backing.is_some());
    c
}

#[test]
fn drop_partial_cow_fails_some_state() {
    let opts = EnumerateOptions {
        granularity: Granularity::Auto,
        cap: 64,
    };
    let mut caught = 0;
    for seed in 0..4 {
        let good = enumerate_crash_states(&overlay(seed), &opts).unwrap();
        assert!(good.passed(), "seed {seed}: {good:#?}");
        let mut bad = overlay(seed);
        bad.engine.broken = Some(Broken::DropPartialCow);
        bad.engine.rule_checks = false;
        let r = enumerate_crash_states(&bad, &opts).unwrap();
        if !r.failing.is_empty() {
            caught += 1;
            assert!(r.failing.iter().all(|s| s.index < r.checked));
        }
    }
    assert!(caught > 0, "DropPartialCow caught by some enumerated state");
}
