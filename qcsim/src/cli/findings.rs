//! `qcsim findings [ID...]`: every defect of the ledger
//! (`corpus/findings.json`, docs/findings.md) replayed on its driver, and
//! for each whether it is still present or gone. Not part of the default
//! test run (it needs QEMU and takes a while); the tests check the list
//! with `--dry-run` and replay its cases on the engine.
//!
//! The exit status says whether the command could run, never whether a
//! defect is still there: a driver that still has its defects is the
//! expected state, not an error.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use super::driver::DriverArg;
use crate::findings::{CaseCheck, Finding, Ledger, Replay, SCRIPT_GONE, SCRIPT_PRESENT};

use super::hint::CARGO_QCSIM;

#[derive(clap::Args)]
pub struct Args {
    /// The findings to replay (their ids); all when none is named.
    pub ids: Vec<String>,
    /// The ledger's machine-readable list.
    #[arg(long, default_value = "corpus/findings.json")]
    pub list: PathBuf,
    /// The repository its paths are relative to (default: the folder
    /// above the list's).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Runs of a crash case before it is called gone: the driver's own
    /// scheduling is not seeded, so one passing run may be luck.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Where a failing replay's evidence is kept, a folder per finding.
    #[arg(long, default_value = "corpus/failing/findings")]
    pub corpus: PathBuf,
    /// Check the list and print each finding's replay command; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print each replay's whole output, not only its verdict.
    #[arg(long)]
    pub verbose: bool,
}

/// What one replay said.
enum Verdict {
    Present(String),
    Gone(String),
    /// It fails, but not with the recorded symptom: another look is needed.
    Otherwise(String),
    CouldNotRun(String),
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root =
        args.root
            .clone()
            .unwrap_or_else(|| match args.list.parent().and_then(Path::parent) {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            });
    let ledger = Ledger::load(&args.list, &root)?;
    let chosen = ledger.select(&args.ids)?;
    println!(
        "findings: {} of {} in {} ({} cases kept beside them that are not defects)",
        chosen.len(),
        ledger.findings.len(),
        args.list.display(),
        ledger.not_defects.len()
    );
    if args.dry_run {
        for f in &chosen {
            println!("{} ({}): {}", f.id, f.driver, f.guest_sees);
            println!("  seen with: {}", f.seen_with);
            for c in replay_commands(f) {
                println!("  replay: {c}");
            }
        }
        return Ok(0);
    }
    if chosen.iter().any(|f| f.driver == "qemu") {
        println!("qemu: {}", qemu_img_version());
    }
    let (mut present, mut gone, mut otherwise, mut failed) = (0, 0, 0, 0);
    for f in &chosen {
        let (verdict, output) = replay(f, &root, &args);
        let (word, detail) = match &verdict {
            Verdict::Present(d) => {
                present += 1;
                ("still present", d)
            }
            Verdict::Gone(d) => {
                gone += 1;
                ("gone", d)
            }
            Verdict::Otherwise(d) => {
                otherwise += 1;
                ("fails, but not as recorded (look again)", d)
            }
            Verdict::CouldNotRun(d) => {
                failed += 1;
                ("COULD NOT RUN", d)
            }
        };
        println!("{} ({}): {word}", f.id, f.driver);
        for line in detail.lines() {
            println!("  {line}");
        }
        for c in replay_commands(f) {
            println!("  replay: {c}");
        }
        if args.verbose {
            for line in output.lines() {
                println!("  | {line}");
            }
        }
    }
    println!(
        "findings: {present} still present, {gone} gone, {otherwise} failing otherwise, {failed} could not run"
    );
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The commands a user types to replay one finding by hand.
fn replay_commands(f: &Finding) -> Vec<String> {
    match &f.replay {
        Replay::Cases { cases } => cases
            .iter()
            .map(|c| {
                format!(
                    "{CARGO_QCSIM} replay --driver {} {}",
                    f.driver,
                    c.case.display()
                )
            })
            .collect(),
        Replay::Script { script } => vec![script.display().to_string()],
    }
}

/// `qemu-img --version`'s first line, or why there is none.
fn qemu_img_version() -> String {
    match Command::new("qemu-img").arg("--version").output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("qemu-img printed no version")
            .to_string(),
        Err(e) => format!("qemu-img not found ({e}): run .ci/setup"),
    }
}

/// One finding replayed: its verdict and the replays' whole output.
fn replay(f: &Finding, root: &Path, args: &Args) -> (Verdict, String) {
    let cases = match &f.replay {
        Replay::Script { script } => return run_script(&root.join(script)),
        Replay::Cases { cases } => cases,
    };
    let Ok(driver) = <DriverArg as clap::ValueEnum>::from_str(&f.driver, false) else {
        return (
            Verdict::CouldNotRun(format!("no driver {:?}", f.driver)),
            String::new(),
        );
    };
    // Every case is replayed, so that the output says which shapes of the
    // defect remain: present if any case still shows its symptom, gone
    // only when every case passes every run.
    let (mut output, mut details) = (String::new(), Vec::new());
    let (mut present, mut otherwise, mut could_not) = (false, false, false);
    for check in cases {
        let name = check
            .case
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let corpus = args.corpus.join(&f.id);
        let d = match replay_case_runs(check, root, &corpus, driver, args.runs.max(1), &mut output)
        {
            Verdict::Present(d) => {
                present = true;
                d
            }
            Verdict::Otherwise(d) => {
                otherwise = true;
                d
            }
            Verdict::CouldNotRun(d) => {
                could_not = true;
                d
            }
            Verdict::Gone(d) => d,
        };
        details.push(format!("{name}: {d}"));
    }
    let details = details.join("\n");
    let verdict = if could_not {
        Verdict::CouldNotRun(details)
    } else if present {
        Verdict::Present(details)
    } else if otherwise {
        Verdict::Otherwise(details)
    } else {
        Verdict::Gone(details)
    };
    (verdict, output)
}

/// One case run up to `runs` times on `driver`, until it fails.
fn replay_case_runs(
    check: &CaseCheck,
    root: &Path,
    corpus: &Path,
    driver: DriverArg,
    runs: u32,
    output: &mut String,
) -> Verdict {
    let symptom = check.symptom.as_str();
    for run in 1..=runs {
        let (outcome, text) = match replay_case(&root.join(&check.case), corpus, driver) {
            Ok(r) => r,
            Err(e) => return Verdict::CouldNotRun(format!("{e:#}")),
        };
        output.push_str(&text);
        match outcome {
            CaseRun::Passed if run < runs => continue,
            CaseRun::Passed => {
                return Verdict::Gone(format!(
                    "passed {run} run{} of {run}",
                    if run == 1 { "" } else { "s" }
                ))
            }
            CaseRun::Skipped(why) => {
                return Verdict::CouldNotRun(format!("the driver skips it: {why}"))
            }
            CaseRun::Failed { kept } if text.contains(symptom) => {
                return Verdict::Present(format!(
                    "fails on run {run}: \"{symptom}\"{}",
                    evidence(&kept)
                ))
            }
            CaseRun::Failed { kept } => {
                return Verdict::Otherwise(format!(
                    "fails on run {run} without \"{symptom}\"{}",
                    evidence(&kept)
                ))
            }
        }
    }
    Verdict::CouldNotRun("no run".into())
}

/// Where a failing replay's evidence is, in words: an out-of-process
/// driver's run keeps a folder; an in-process one replays bit for bit, so
/// its replay command is the evidence.
fn evidence(kept: &Option<PathBuf>) -> String {
    match kept {
        Some(dir) => format!(" (evidence in {})", dir.display()),
        None => " (in process: its replay command shows it again)".to_string(),
    }
}

enum CaseRun {
    Passed,
    Skipped(String),
    /// The folder its evidence is kept in, for a driver run out of process.
    Failed {
        kept: Option<PathBuf>,
    },
}

/// A case on `driver`, as `qcsim replay --driver` runs it: how it ended
/// and its failure explained (empty when it passed).
fn replay_case(case: &Path, corpus: &Path, driver: DriverArg) -> anyhow::Result<(CaseRun, String)> {
    let loaded = super::run::load_case(case)?;
    let Some(engine) = driver.external() else {
        // In process (qcow2-rs): the run is guarded, a panic of the
        // driver is the case's failure.
        let r = super::run::run_in_process(&loaded, &Default::default(), driver);
        if let Some(why) = &r.skipped {
            return Ok((CaseRun::Skipped(why.clone()), String::new()));
        }
        if r.passed() {
            return Ok((CaseRun::Passed, String::new()));
        }
        return Ok((
            CaseRun::Failed { kept: None },
            super::run::failures_text(&r),
        ));
    };
    let r = super::driver::run_qemu(&loaded, corpus, engine)
        .with_context(|| format!("replaying {} on {}", case.display(), engine.who()))?;
    if let Some(why) = &r.skipped {
        return Ok((CaseRun::Skipped(why.clone()), String::new()));
    }
    if r.passed() {
        return Ok((CaseRun::Passed, String::new()));
    }
    Ok((
        CaseRun::Failed {
            kept: Some(r.dir.clone()),
        },
        super::driver::explanation(&r, engine),
    ))
}

/// A script's verdict is its exit status; anything but the two verdicts
/// means it could not run, and its last line says why.
fn run_script(script: &Path) -> (Verdict, String) {
    let out = match Command::new("bash").arg(script).output() {
        Ok(out) => out,
        Err(e) => return (Verdict::CouldNotRun(format!("bash: {e}")), String::new()),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let last = |prefix: &str| {
        text.lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim_start_matches(prefix).to_string())
            .unwrap_or_else(|| "no output".into())
    };
    let verdict = match out.status.code() {
        Some(SCRIPT_PRESENT) => Verdict::Present(last("verdict: still present: ")),
        Some(SCRIPT_GONE) => Verdict::Gone(last("verdict: gone: ")),
        code => Verdict::CouldNotRun(format!(
            "{} exited with {}: {}",
            script.display(),
            code.map_or("a signal".to_string(), |c| c.to_string()),
            last("")
        )),
    };
    (verdict, text)
}
