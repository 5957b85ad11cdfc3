//! `--driver engine|qemu|imago|qcow2-rs` on `run`, `campaign`, `replay`
//! and `shrink`: which qcow2 driver a case runs on. `qemu` and `imago` run
//! it out of process over NBD (`crate::qemu`); `qcow2-rs` runs in process
//! on the simulated disks as the engine does (`drivers::qcow2rs`, through
//! `sim::driver`), so its cases replay bit for bit and shrink. This module
//! holds the flag, the run of one case out of process and what it prints,
//! and where a failing case is kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use sim::campaign::CampaignPlan;
use sim::case::Case;
use sim::driver::{DriverKind, EngineDriver};

use crate::qemu::run::{run_case_on, DiskTally, Engine, QemuReport};

use super::hint::CARGO_QCSIM;

/// Failing cases explained in the terminal, and lines of each, as the
/// engine's campaign explains its own.
const FAILURES_EXPLAINED: usize = 3;
const EXPLAIN_LINES: usize = 60;

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
    /// The Rust qcow2 library qcow2-rs (ublk's qcow2 target), in process
    /// on the simulated disk, deterministic like the engine; what it lacks
    /// is skipped and counted (docs/drivers.md).
    #[value(name = "qcow2-rs")]
    Qcow2Rs,
    /// qcow2-rs opened with its default parameters as they stand, even on
    /// images whose clusters are smaller than its 4 KiB cache slices
    /// (docs/findings.md, qcow2-rs-small-clusters: such runs may spin
    /// forever).
    #[value(name = "qcow2-rs-defaults")]
    Qcow2RsDefaults,
}

impl DriverArg {
    /// The driver to run a case on out of process, if it is one.
    pub fn external(self) -> Option<Engine> {
        match self {
            DriverArg::Engine | DriverArg::Qcow2Rs | DriverArg::Qcow2RsDefaults => None,
            DriverArg::Qemu => Some(Engine::Qemu),
            DriverArg::Imago => Some(Engine::Imago),
        }
    }

    /// The driver to run a case on in process, if it is one.
    pub fn in_process(self) -> Option<&'static (dyn DriverKind + Sync)> {
        match self {
            DriverArg::Engine => Some(&EngineDriver),
            DriverArg::Qcow2Rs => Some(&drivers::qcow2rs::Qcow2Rs::FITTED),
            DriverArg::Qcow2RsDefaults => Some(&drivers::qcow2rs::Qcow2Rs::DEFAULTS),
            DriverArg::Qemu | DriverArg::Imago => None,
        }
    }

    /// The name `--driver` takes.
    pub fn name(self) -> &'static str {
        match self {
            DriverArg::Engine => "engine",
            DriverArg::Qemu => "qemu",
            DriverArg::Imago => "imago",
            DriverArg::Qcow2Rs => drivers::qcow2rs::NAME,
            DriverArg::Qcow2RsDefaults => drivers::qcow2rs::NAME_DEFAULTS,
        }
    }

    /// ` --driver NAME` for a command line that runs a case again on this
    /// driver; empty for the engine, the default.
    pub fn flag(self) -> String {
        match self {
            DriverArg::Engine => String::new(),
            d => format!(" --driver {}", d.name()),
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

/// What each simulated disk saw from the driver, a line each (indented by
/// `indent`): kept apart, since a cause often shows in one disk's figures
/// only (a data file never flushed).
fn disk_lines(disks: &[DiskTally], who: &str, indent: &str) -> String {
    let mut out = String::new();
    let one = disks.len() <= 1;
    for (k, d) in disks.iter().enumerate() {
        let name = if one {
            "the simulated disk"
        } else {
            QemuReport::DISK_NAMES.get(k).copied().unwrap_or("a disk")
        };
        out.push_str(&format!(
            "{indent}{name} saw {} writes ({} FUA) and {} flushes from {who}\n",
            d.writes, d.fua_writes, d.flushes
        ));
    }
    out
}

/// The guest requests flagged FUA that reached the driver. Printed apart
/// from the disks' FUA writes, which can be none even when this is not
/// (QEMU's qcow2 meets FUA with a flush; imago's guest sends the request
/// then a flush), so that a run shows FUA was exercised at all.
fn fua_line(n: u64, engine: Engine) -> String {
    format!(
        "sent {n} guest FUA requests (writes, write zeroes, discards) to {}",
        engine.who()
    )
}

/// The operations run through `qemu-img` (snapshot operations, amends,
/// resizes) and those that did not run as they are, by what happened
/// instead, a line each.
fn op_lines(qemu_img: u64, counted: &BTreeMap<String, u64>, indent: &str) -> String {
    let mut out = format!(
        "{indent}{qemu_img} snapshot operations, amends and resizes run through qemu-img between the driver's close and its reopening\n"
    );
    for (what, n) in counted {
        out.push_str(&format!("{indent}{n} operations {what}\n"));
    }
    out
}

/// The command that runs a kept failing case on its driver again.
fn replay_command(r: &QemuReport, engine: Engine) -> String {
    format!(
        "{CARGO_QCSIM} replay --driver {} {}",
        engine.name(),
        r.dir.join("case.json").display()
    )
}

/// A failing case's explanation, as the engine's failures are explained
/// (`report::explain`): each failure in words, a wrong read's sectors
/// with the hex diff against what the model allowed, the replay command.
pub fn explanation(r: &QemuReport, engine: Engine) -> String {
    let entry = serde_json::json!({
        "seed": r.seed,
        "replay": replay_command(r, engine),
        "failures": serde_json::to_value(&r.failures).unwrap_or_default(),
    });
    crate::report::explain::explain(&entry)
}

/// Where a failing case's evidence was kept, and how to rebuild the
/// states its disks went through without the driver.
fn kept_lines(r: &QemuReport) -> String {
    let samples = crate::qemu::run::SAMPLES;
    let mut out = format!(
        "kept in {}: case.json, and per epoch K requests.log, what the driver sent the image's disk; its crash states again without the driver: qcsim disk-replay epoch-K/requests.log --samples {samples} --crash-seed S --crash-dir DIR, where S = {} + K\n",
        r.dir.display(),
        r.seed,
    );
    if r.data_file {
        // The data file's disk draws its samples from a crash stream of
        // its own, as in-process runs do.
        out.push_str(&format!(
            "and epoch-K/data-requests.log, the data file's disk: qcsim disk-replay epoch-K/data-requests.log --samples {samples} --crash-seed S --crash-stream {} --crash-dir DIR (its data-crash-N.raw as crash-N.raw)\n",
            sim::runner::DATA_CRASH_STREAM
        ));
    }
    out
}

/// One case's verdict, as `qcsim run|replay --driver qemu|imago` prints
/// it: the counts, each disk's requests, and a failure explained as the
/// engine's are.
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
    println!("  {}", fua_line(r.guest_fua, engine));
    print!("{}", disk_lines(&r.disks, engine.who(), "  "));
    print!("{}", op_lines(r.qemu_img_ops, &r.ops_counted, "  "));
    if !r.passed() {
        // The explanation's first line repeats the seed.
        for line in explanation(r, engine).lines().skip(1) {
            println!("  {line}");
        }
        for line in kept_lines(r).lines() {
            println!("  {line}");
        }
    }
}

/// `qcsim campaign --driver qemu`: the plan's cases on QEMU's qcow2 driver,
/// `jobs` at a time, each failing case kept in the corpus; the totals.
pub fn run_qemu_campaign(
    engine: Engine,
    plan: &CampaignPlan,
    corpus: &Path,
    report_dir: &Path,
    quiet: bool,
    time_limit: Option<Duration>,
) -> anyhow::Result<i32> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let started = std::time::Instant::now();
    let next = AtomicU64::new(plan.seeds.start);
    let failed_so_far = AtomicU64::new(0);
    let reports = Mutex::new(Vec::new());
    let errors = Mutex::new(Vec::new());
    let (shard, of) = plan.shard;
    let bar = crate::progress::bar(
        &format!("campaign --driver {}", engine.name()),
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
                    Ok(r) => {
                        if !r.passed() {
                            let n = failed_so_far.fetch_add(1, Ordering::SeqCst) + 1;
                            bar.set_message(format!("{n} failed"));
                        }
                        reports.lock().unwrap_or_else(|e| e.into_inner()).push(r)
                    }
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
    let sum = |f: fn(&QemuReport) -> u64| run.iter().map(|r| f(r)).sum::<u64>();
    println!(
        "checked: {} guest ops, {} read sectors, {} crash states, {} recovered sectors",
        sum(|r| r.guest_ops),
        sum(|r| r.read_sectors),
        sum(|r| r.crash_states),
        sum(|r| r.recovered_sectors)
    );
    println!("{}", fua_line(sum(|r| r.guest_fua), engine));
    let mut disks: Vec<DiskTally> = Vec::new();
    for r in &run {
        for (k, d) in r.disks.iter().enumerate() {
            if disks.len() <= k {
                disks.resize(k + 1, DiskTally::default());
            }
            disks[k].add(d);
        }
    }
    print!(
        "{}",
        disk_lines(&disks, engine.who(), "")
            .replace("the simulated disk saw", "the simulated disks saw")
    );
    print!(
        "{}",
        op_lines(sum(|r| r.qemu_img_ops), &op_totals(&run), "")
    );
    let mut skipped: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &reports {
        if let Some(why) = &r.skipped {
            *skipped.entry(why).or_default() += 1;
        }
    }
    for (why, n) in skipped {
        println!("skipped: {n} cases with {why} (not run on this driver)");
    }
    // Each failure as the engine's are printed: the replay command, then
    // the first few explained (what was read, what the model allowed).
    for (k, r) in failed.iter().enumerate() {
        println!(
            "FAIL seed {}: replay with: {}",
            r.seed,
            replay_command(r, engine)
        );
        if k < FAILURES_EXPLAINED {
            let text = explanation(r, engine);
            let lines: Vec<&str> = text.lines().skip(1).collect();
            for line in lines.iter().take(EXPLAIN_LINES) {
                println!("    {line}");
            }
            if lines.len() > EXPLAIN_LINES {
                println!(
                    "    ({} more lines: run the replay command)",
                    lines.len() - EXPLAIN_LINES
                );
            }
            for line in kept_lines(r).lines() {
                println!("    {line}");
            }
        } else if k == FAILURES_EXPLAINED {
            println!("    (later failures: run their replay commands)");
        }
    }
    for e in &errors {
        println!("ERROR {e}");
    }
    let summary = driver_summary(engine, plan, &reports, &errors, started.elapsed());
    crate::report::write_report(report_dir, &summary, None)?;
    println!("report: {}", report_dir.join(crate::report::HTML).display());
    Ok(if failed.is_empty() && errors.is_empty() {
        0
    } else {
        1
    })
}

/// The cases' [`QemuReport::ops_counted`] summed by key.
fn op_totals(run: &[&QemuReport]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in run {
        for (what, n) in &r.ops_counted {
            *out.entry(what.clone()).or_insert(0) += n;
        }
    }
    out
}

/// A driver campaign's `summary.json`, in the engine campaign's layout so
/// that its report renders alike: what ran, the verdicts, the totals
/// (each disk's requests apart, the skips by reason) and every failure
/// as the engine's are kept (its replay command among them). There is no
/// trace hash: the driver's own scheduling is not seeded.
fn driver_summary(
    engine: Engine,
    plan: &CampaignPlan,
    reports: &[QemuReport],
    errors: &[String],
    wall: Duration,
) -> serde_json::Value {
    use serde_json::json;
    let run: Vec<&QemuReport> = reports.iter().filter(|r| r.skipped.is_none()).collect();
    let failed: Vec<&&QemuReport> = run.iter().filter(|r| !r.passed()).collect();
    let sum = |f: fn(&QemuReport) -> u64| run.iter().map(|r| f(r)).sum::<u64>();
    let mut totals = serde_json::Map::new();
    totals.insert("guest_ops".into(), json!(sum(|r| r.guest_ops)));
    totals.insert("guest_fua_requests".into(), json!(sum(|r| r.guest_fua)));
    totals.insert(
        "read_sectors_checked".into(),
        json!(sum(|r| r.read_sectors)),
    );
    totals.insert(
        "crash_states_checked".into(),
        json!(sum(|r| r.crash_states)),
    );
    totals.insert(
        "recovered_sectors_checked".into(),
        json!(sum(|r| r.recovered_sectors)),
    );
    for (k, name) in ["image_disk", "data_file_disk"].iter().enumerate() {
        let of = |f: fn(&DiskTally) -> u64| {
            run.iter()
                .filter_map(|r| r.disks.get(k))
                .map(f)
                .sum::<u64>()
        };
        totals.insert(format!("{name}_writes"), json!(of(|d| d.writes)));
        totals.insert(format!("{name}_fua_writes"), json!(of(|d| d.fua_writes)));
        totals.insert(format!("{name}_flushes"), json!(of(|d| d.flushes)));
    }
    totals.insert("qemu_img_ops".into(), json!(sum(|r| r.qemu_img_ops)));
    for (what, n) in op_totals(&run) {
        totals.insert(format!("operations {what}"), json!(n));
    }
    let mut skipped = BTreeMap::new();
    for r in reports {
        if let Some(why) = &r.skipped {
            *skipped.entry(format!("skipped: {why}")).or_insert(0u64) += 1;
        }
    }
    for (why, n) in skipped {
        totals.insert(why, json!(n));
    }
    let failures: Vec<serde_json::Value> = failed
        .iter()
        .map(|r| {
            json!({
                "seed": r.seed,
                "replay": replay_command(r, engine),
                "failures": serde_json::to_value(&r.failures).unwrap_or_default(),
            })
        })
        .collect();
    let shard = json!([plan.shard.0, plan.shard.1]);
    let seeds = json!([plan.seeds.start, plan.seeds.end]);
    json!({
        "format": "qcsim-campaign-report",
        "format_version": 1,
        "revision": env!("QCSIM_REVISION"),
        "campaign": {
            "seeds": seeds,
            "driver": engine.name(),
            "profile": plan.profile.name(),
            "switches": "as generated",
            "harsh": false,
            "broken": null,
            "shard": shard,
            "parts": [ { "seeds": seeds, "shard": shard } ],
        },
        "result": {
            "cases": reports.len() + errors.len(),
            "passed": run.len() - failed.len(),
            "failed": failed.len() + errors.len(),
            "skipped": reports.len() - run.len(),
            "trace_hash": format!("none: {}'s scheduling is not seeded", engine.who()),
            "totals": totals,
            "failing_seeds": failed.iter().map(|r| r.seed).collect::<Vec<_>>(),
            "failures": failures,
            "errors": errors,
        },
        "timing": {
            "runs": [ { "shard": shard, "jobs": plan.jobs, "wall_seconds": wall.as_secs_f64(), "progress": [] } ],
        },
    })
}
