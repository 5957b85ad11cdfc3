//! Measures the shrinker on the deliberately broken engine variants
//! (feature `broken`): for each variant, the first failing seeds of the
//! setting `tests/broken/verify_broken.rs` catches it with, each shrunk
//! with the default options; prints the original and shrunk sizes and the
//! runs spent, the figures docs/measured.md quotes.
//!
//! `cargo run --release -p sim --example shrink_broken
//! [SEEDS_PER_VARIANT] [VARIANT...]`

use engine::options::Broken;
use engine::Switches;
use sim::campaign::run_guarded;
use sim::case::Case;
use sim::shrink::{shrink_failing, CaseSize, ShrinkOptions};
use sim::workload::Profile;

const VARIANTS: [(Broken, Profile); 5] = [
    (Broken::LinkBeforeData, Profile::Random),
    (Broken::SkipRefcountFlush, Profile::Random),
    (Broken::DropPartialCow, Profile::Backing),
    (Broken::ReuseBeforeDurable, Profile::Random),
    (Broken::DoubleAlloc, Profile::Random),
];

fn main() {
    let mut args = std::env::args().skip(1);
    let per_variant: usize = args.next().map_or(1, |a| a.parse().expect("a count"));
    let only: Vec<String> = args.collect();
    // SHRINK_RESEEDS overrides the default reseeds, to measure the pass.
    let mut options = ShrinkOptions::default();
    if let Some(r) = std::env::var_os("SHRINK_RESEEDS") {
        options.reseeds = r.to_str().and_then(|r| r.parse().ok()).expect("a count");
    }
    for (broken, profile) in VARIANTS {
        if !only.is_empty() && !only.iter().any(|o| format!("{broken:?}") == *o) {
            continue;
        }
        let failing = (0..2000u64)
            .map(|seed| {
                let mut c = Case::generate(seed, profile);
                c.engine.switches = Switches::ALL_ON;
                c.engine.broken = Some(broken);
                c
            })
            .filter(|c| !run_guarded(c).passed())
            .take(per_variant);
        for case in failing {
            let (shrunk, kind) = shrink_failing(&case, &options, |_| {}).expect("it fails");
            println!(
                "{broken:?} seed {} ({profile}): {} -> {} [{kind}], {} runs{}",
                case.seed,
                CaseSize::of(&case),
                CaseSize::of(&shrunk.case),
                shrunk.runs,
                if shrunk.budget_exhausted {
                    " (budget exhausted)"
                } else {
                    ""
                }
            );
            if std::env::var_os("SHRINK_PRINT").is_some() {
                println!("{}", shrunk.case.to_json());
            }
        }
    }
}
