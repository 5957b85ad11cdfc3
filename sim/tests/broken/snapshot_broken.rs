//! A changed write order fails the post-crash snapshots with a readable
//! diff. For the first pinned seed of each profile (`post_crash_pins`),
//! the engine with a broken variant that reorders or drops an ordering
//! point of its writeback leaves a first crash image whose dump differs
//! from the committed snapshot; the comparison is the one insta makes
//! (the `.snap` file's contents against the fresh rendering), done here
//! directly so that it needs no panic catching, and its unified diff
//! (`similar`) names the lines that moved. The same run without the
//! variant matches the snapshot, so the difference is the variant's.

// Shared with the `sim` binary, which uses all of it; this one compares
// dumps only.
#[allow(dead_code)]
#[path = "../sim/post_crash_pins.rs"]
mod post_crash_pins;

use engine::options::Broken;
use post_crash_pins::{post_crash, same_text, snapshot_contents, snapshot_path, PINNED};
use sim::workload::Profile;

/// For each profile, the broken variant that moves its first pinned
/// seed's crash image (seeds 0..40 of each profile were run under
/// `skip-l2-flush`, `skip-refcount-flush`, `skip-data-flush-before-l2`,
/// `link-before-data`, `skip-reftable-flush` and
/// `header-before-reftable`; the last moves none of them: its window is
/// one refcount table growth, which no pinned seed's first crash meets).
const MOVED_BY: [(Profile, Broken); 7] = [
    (Profile::Mixed, Broken::SkipL2Flush),
    (Profile::Random, Broken::SkipL2Flush),
    (Profile::Sequential, Broken::LinkBeforeData),
    (Profile::Iozone, Broken::LinkBeforeData),
    (Profile::Bench, Broken::LinkBeforeData),
    (Profile::Mkfs, Broken::LinkBeforeData),
    (Profile::Backing, Broken::SkipL2Flush),
];

/// The committed dump snapshot of `seed` under `profile`.
fn pinned_dump(profile: Profile, seed: u64) -> String {
    let path = snapshot_path(profile, seed, "dump");
    let snap = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    snapshot_contents(&snap)
        .unwrap_or_else(|| panic!("{}: no metadata block", path.display()))
        .to_string()
}

#[test]
fn a_changed_write_order_fails_the_dump_snapshot_with_a_readable_diff() {
    for (profile, broken) in MOVED_BY {
        let (_, seeds) = PINNED
            .iter()
            .find(|(p, _)| *p == profile)
            .expect("every profile is pinned");
        let seed = seeds[0];
        let pinned = pinned_dump(profile, seed);
        let mut case = post_crash_pins::case(profile, seed);
        assert_eq!(case.engine.broken, None);
        let correct = post_crash(&case);
        assert!(
            same_text(&pinned, &correct.dump),
            "{profile} seed {seed}: the correct engine no longer matches its snapshot \
             (run `cargo insta test` first)"
        );

        case.engine.broken = Some(broken);
        case.engine.rule_checks = false;
        let moved = post_crash(&case);
        assert!(
            !same_text(&pinned, &moved.dump),
            "{profile} seed {seed}: {broken} left the crash image as pinned"
        );
        let name = snapshot_path(profile, seed, "dump");
        let name = name.file_name().unwrap().to_string_lossy();
        // Both ending in one newline, as insta compares them.
        let (a, b) = (
            format!("{}\n", pinned.trim_end()),
            format!("{}\n", moved.dump.trim_end()),
        );
        let diff = similar::TextDiff::from_lines(&a, &b)
            .unified_diff()
            .context_radius(2)
            .header(&format!("{name} (committed)"), &format!("with {broken}"))
            .to_string();
        eprintln!("{profile} seed {seed}, {broken}:\n{diff}");

        // Readable: file names, hunks that give their line numbers, and
        // changed lines that are dump lines of one side or the other.
        assert!(diff.starts_with(&format!("--- {name} (committed)\n+++ with {broken}\n")));
        let hunks: Vec<&str> = diff.lines().filter(|l| l.starts_with("@@ -")).collect();
        assert!(!hunks.is_empty(), "no hunk in:\n{diff}");
        for h in &hunks {
            let old_line: usize = h[4..]
                .split([',', ' '])
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("hunk header without a line number: {h}"));
            assert!(old_line <= pinned.lines().count() + 1, "{h}");
        }
        let changed: Vec<&str> = diff
            .lines()
            .skip(2)
            .filter(|l| l.starts_with('-') || l.starts_with('+'))
            .collect();
        assert!(!changed.is_empty());
        for l in changed {
            let (side, text) = l.split_at(1);
            let from = if side == "-" { &pinned } else { &moved.dump };
            assert!(
                from.lines().any(|x| x == text),
                "{l:?} is not a line of its side"
            );
        }
    }
}
