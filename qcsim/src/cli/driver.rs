//! `--driver engine|qemu` on `run`, `campaign` and `replay`: which qcow2
//! driver a case runs on. `qemu` runs it on QEMU's own driver over NBD
//! (`crate::qemu`); this module holds the flag, the run of one case there
//! and what it prints, and where a failing case is kept.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use sim::campaign::CampaignPlan;
use sim::case::Case;

use crate::qemu::run::{run_case_on, Engine, QemuReport};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverArg {
    /// qcsim's engine, in process, on the simulated disk.
    #[default]
    Engine,
    /// QEMU's qcow2 driver (qemu-nbd), its storage the simulated disk
    /// over NBD.
    Qemu,
    /// The Rust qcow2 library imago, its storage the simulated disk over
    /// NBD (see the README for what differs).
    Imago,
}

impl DriverArg {
    /// The driver to run a case on instead of the engine, if any.
    pub fn external(self) -> Option<Engine> {
        match self {
            DriverArg::Engine => None,
            DriverArg::Qemu => Some(Engine::Qemu),
            DriverArg::Imago => Some(Engine::Imago),
        }
    }
}

/// Where a QEMU run works: a fresh directory under the system's temporary
/// one, named for the process and the seed.
fn work_dir(seed: u64, engine: Engine) -> PathBuf {
    std::env::temp_dir().join(format!(
        "qcsim-{}-{}-{seed}",
        engine.name(),
        std::process::id()
    ))
}

/// Run `case` on QEMU's driver. A failing case's directory (each epoch's
/// request log and crash states, and the case) is moved to
/// `corpus/qemu-seed-N`; a passing one is removed.
pub fn run_qemu(case: &Case, corpus: &Path, engine: Engine) -> anyhow::Result<QemuReport> {
    let dir = work_dir(case.seed, engine);
    let _ = std::fs::remove_dir_all(&dir);
    let mut report = run_case_on(case, &dir, engine);
    match &mut report {
        Ok(r) if r.passed() || r.skipped.is_some() => {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(r) => {
            std::fs::write(dir.join("case.json"), case.to_json())?;
            std::fs::create_dir_all(corpus)
                .with_context(|| format!("{}: cannot make the corpus", corpus.display()))?;
            let kept = corpus.join(format!("{}-seed-{}", engine.name(), case.seed));
            let _ = std::fs::remove_dir_all(&kept);
            if std::fs::rename(&dir, &kept).is_ok() {
                r.dir = kept;
            }
        }
        Err(_) => {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    report
}

/// One case's verdict, as `qcsim run --driver qemu` prints it.
pub fn print_qemu_report(r: &QemuReport, engine: Engine) {
    let name = engine.name();
    if let Some(why) = &r.skipped {
        println!(
            "seed {} ({name}): SKIPPED: the driver does not run cases with {why}",
            r.seed
        );
        return;
    }
    println!(
        "seed {} ({name}): {}",
        r.seed,
        if r.passed() { "PASS" } else { "FAIL" }
    );
    println!(
        "  checked: {} guest ops, {} read sectors, {} crash states, {} recovered sectors",
        r.guest_ops, r.read_sectors, r.crash_states, r.recovered_sectors
    );
    println!(
        "  the simulated {} saw {} writes ({} FUA) and {} flushes from {}",
        if r.data_file {
            "disks (image and data file)"
        } else {
            "disk"
        },
        r.device_writes,
        r.device_fua_writes,
        r.device_flushes,
        engine.who()
    );
    for f in &r.failures {
        // The first lines say what failed; the kept directory has the rest.
        let lines: Vec<&str> = f.lines().collect();
        println!(
            "  {}",
            lines
                .iter()
                .take(12)
                .copied()
                .collect::<Vec<_>>()
                .join("\n    ")
        );
        if lines.len() > 12 {
            println!("    ({} more lines)", lines.len() - 12);
        }
    }
    if !r.passed() {
        let samples = crate::qemu::run::SAMPLES;
        println!(
            "  kept in {}: case.json, and per epoch requests.log (replay its crash states without QEMU: qcsim disk-replay epoch-K/requests.log --samples {samples} --crash-seed SEED+K --crash-dir DIR)",
            r.dir.display(),
        );
        if r.data_file {
            // The data file's disk draws its samples from a crash stream
            // of its own, as in-process runs do.
            println!(
                "  and the data file's disk, epoch-K/data-requests.log (qcsim disk-replay epoch-K/data-requests.log --samples {samples} --crash-seed SEED+K --crash-stream {} --crash-dir DIR: its data-crash-K.raw as crash-K.raw)",
                sim::runner::DATA_CRASH_STREAM
            );
        }
    }
}

/// `qcsim campaign --driver qemu`: the plan's cases on QEMU's qcow2 driver,
/// `jobs` at a time, each failing case kept in the corpus; the totals.
pub fn run_qemu_campaign(
    engine: Engine,
    plan: &CampaignPlan,
    corpus: &Path,
    quiet: bool,
    time_limit: Option<Duration>,
) -> anyhow::Result<i32> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let started = std::time::Instant::now();
    let next = AtomicU64::new(plan.seeds.start);
    let reports = Mutex::new(Vec::new());
    let errors = Mutex::new(Vec::new());
    let (shard, of) = plan.shard;
    let bar = crate::progress::bar(
        (plan.seeds.end - plan.seeds.start).div_ceil(of.max(1)),
        "cases",
        quiet,
    );
    std::thread::scope(|s| {
        for _ in 0..plan.jobs {
            s.spawn(|| loop {
                if time_limit.is_some_and(|t| started.elapsed() >= t) {
                    return;
                }
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= plan.seeds.end || seed < plan.seeds.start {
                    return;
                }
                if of == 0 || seed % of != shard {
                    continue;
                }
                let case = sim::campaign::case_for(plan, seed);
                match run_qemu(&case, corpus, engine) {
                    Ok(r) => reports.lock().unwrap_or_else(|e| e.into_inner()).push(r),
                    Err(e) => errors
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("seed {seed}: {e:#}")),
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let mut reports = reports.into_inner().unwrap_or_else(|e| e.into_inner());
    reports.sort_by_key(|r| r.seed);
    let errors = errors.into_inner().unwrap_or_else(|e| e.into_inner());
    let run: Vec<_> = reports.iter().filter(|r| r.skipped.is_none()).collect();
    let failed: Vec<_> = run.iter().filter(|r| !r.passed()).collect();
    println!(
        "campaign ({}): {} cases, {} passed, {} failed, {} skipped ({} jobs, {:.1} s)",
        engine.name(),
        reports.len() + errors.len(),
        run.len() - failed.len(),
        failed.len() + errors.len(),
        reports.len() - run.len(),
        plan.jobs,
        started.elapsed().as_secs_f64()
    );
    let sum = |f: fn(&crate::qemu::run::QemuReport) -> u64| run.iter().map(|r| f(r)).sum::<u64>();
    println!(
        "checked: {} guest ops, {} read sectors, {} crash states, {} recovered sectors",
        sum(|r| r.guest_ops),
        sum(|r| r.read_sectors),
        sum(|r| r.crash_states),
        sum(|r| r.recovered_sectors)
    );
    println!(
        "the simulated disks saw {} writes ({} FUA) and {} flushes from {}",
        sum(|r| r.device_writes),
        sum(|r| r.device_fua_writes),
        sum(|r| r.device_flushes),
        engine.who()
    );
    let mut skipped: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for r in &reports {
        if let Some(why) = &r.skipped {
            *skipped.entry(why).or_default() += 1;
        }
    }
    for (why, n) in skipped {
        println!("skipped: {n} cases with {why} (not run on this driver)");
    }
    for r in &failed {
        let first = r.failures.first().map(String::as_str).unwrap_or("");
        println!(
            "FAIL seed {}: {} (kept in {})",
            r.seed,
            first.lines().next().unwrap_or(""),
            r.dir.display()
        );
    }
    for e in &errors {
        println!("ERROR {e}");
    }
    Ok(if failed.is_empty() && errors.is_empty() {
        0
    } else {
        1
    })
}
