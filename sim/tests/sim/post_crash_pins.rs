//! The post-crash images the snapshot tests pin, shared by the `sim` test
//! binary (`dump_snapshots`, which pins them with insta) and the `broken`
//! one (`snapshot_broken`, which shows a changed writeback order fails
//! the same comparison with a readable diff): which seeds of which
//! profile, how a case is made to depend on the engine alone, how its
//! first crash image and the checker's verdict are rendered, and where
//! the committed snapshot of each lives.

use std::path::PathBuf;

use sim::case::Case;
use sim::exec::SchedulePolicy;
use sim::runner::{run_case, RunOptions, RunReport};
use sim::workload::Profile;

/// The pinned seeds of each profile: two or three whose first crash image
/// dumps to tens to a few hundred lines (not an untouched image of a
/// dozen), across cluster sizes (512 B to 256 KiB are drawn). Chosen by
/// running seeds 0..40 of each profile; the first of each is one whose
/// image a broken write order changes (see `snapshot_broken`).
pub const PINNED: [(Profile, &[u64]); 7] = [
    (Profile::Mixed, &[15, 29]),
    (Profile::Random, &[0, 6, 29]),
    // 12 is the seed pinned before profiles were; 14 and 36 have 64 KiB
    // and 16 KiB clusters.
    (Profile::Sequential, &[14, 12, 36]),
    (Profile::Iozone, &[4, 7, 20]),
    (Profile::Bench, &[14, 12, 20]),
    (Profile::Mkfs, &[14, 5, 6]),
    (Profile::Backing, &[15, 0, 35]),
];

/// What is pinned of a case: the `qcsim dump` of its first crash image,
/// and the checker's report on it.
pub const WHATS: [&str; 2] = ["dump", "check"];

/// The case of `seed` under `profile`, run under the uniform schedule and
/// without latency outliers, so that only the engine's layout and write
/// order and the workload move its snapshots, not the scheduling policy
/// or outlier draws a generator change might bring.
pub fn case(profile: Profile, seed: u64) -> Case {
    let mut case = Case::generate(seed, profile);
    case.schedule = SchedulePolicy::Random;
    case.disk.latency.outliers = Default::default();
    case
}

/// A run's first crash image, rendered.
pub struct PostCrash {
    pub report: RunReport,
    /// `oracle::dump::dump` of the image (what `qcsim dump` prints).
    pub dump: String,
    /// The checker's verdict on it (see [`render_check`]).
    pub check: String,
}

impl PostCrash {
    /// The rendering pinned as `what` (one of [`WHATS`]).
    pub fn get(&self, what: &str) -> &str {
        match what {
            "dump" => &self.dump,
            "check" => &self.check,
            _ => panic!("no rendering named {what:?}"),
        }
    }
}

/// Run `case`, exporting its images, and render its first crash image
/// (`crash-1`, the image the runner judged after the first crash: after
/// the engine's repair on open when the crash left it dirty; or, when
/// the power went again inside that repair, the image judged after it,
/// `crash-2 (inside the rebuild after crash-1)`).
pub fn post_crash(case: &Case) -> PostCrash {
    let dir = tempfile::tempdir().expect("temporary directory");
    let report = run_case(
        case,
        &RunOptions {
            export: Some(dir.path().to_path_buf()),
        },
    );
    let seed_dir = dir.path().join(format!("seed-{}", case.seed));
    let first = seed_dir.join("crash-1.qcow2");
    let path = if first.exists() {
        first
    } else {
        seed_dir.join("crash-2 (inside the rebuild after crash-1).qcow2")
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        let names: Vec<_> = std::fs::read_dir(&seed_dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        panic!(
            "seed {}: no exported crash image: {e}; exported {names:?}",
            case.seed
        )
    });
    PostCrash {
        report,
        dump: oracle::dump::dump(&bytes),
        check: render_check(&oracle::check::check(&bytes)),
    }
}

/// The checker's report as a person reads it: `qemu-img check`'s human
/// output (what the runner prints for a failed check), then every finding
/// with its kind and host offset, and the exit code. No file name or
/// timing: the same bytes render the same everywhere.
pub fn render_check(r: &oracle::check::CheckReport) -> String {
    let mut s = r.human();
    if let Some(f) = &r.failure {
        s.push_str(&format!("the checker could not check the image: {f}\n"));
    }
    s.push_str(&format!("exit code {}\n", r.exit_code()));
    s.push_str(&format!("findings: {}\n", r.findings.len()));
    for f in &r.findings {
        let at = f.offset.map_or("-".to_string(), |o| format!("{o:#x}"));
        s.push_str(&format!("  {:?} at {at}: {}\n", f.kind, f.message));
    }
    s
}

/// The insta snapshot name of `what` of `seed` under `profile`.
pub fn snapshot_name(profile: Profile, seed: u64, what: &str) -> String {
    format!("post_crash_{profile}_seed_{seed}_{what}")
}

/// Where insta keeps that snapshot (`cargo insta review` shows changes to
/// it): the `sim` binary's `dump_snapshots` module's snapshot directory.
pub fn snapshot_path(profile: Profile, seed: u64, what: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sim/snapshots")
        .join(format!(
            "sim__dump_snapshots__{}.snap",
            snapshot_name(profile, seed, what)
        ))
}

/// The pinned text of a committed `.snap` file: what follows its metadata
/// block (between the first two `---` lines).
pub fn snapshot_contents(snap: &str) -> Option<&str> {
    let rest = snap.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    Some(&rest[end + "\n---\n".len()..])
}

/// Whether `fresh` is what `pinned` pins, as insta compares them: line by
/// line, trailing blank lines aside.
pub fn same_text(pinned: &str, fresh: &str) -> bool {
    pinned.trim_end() == fresh.trim_end()
}
