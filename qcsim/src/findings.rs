//! The ledger of defects the harness found in drivers other than ours
//! (`corpus/findings.json`, explained in `docs/findings.md`): loading it,
//! and checking it against the repository, so that the list, the cases it
//! names and the prose cannot drift apart without an error naming what
//! drifted. `cli::findings` replays it; the tests read it through
//! `qcsim findings --dry-run`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The list's format name and version, checked on load so that a file of
/// another kind (a case, a campaign summary) is refused by name.
pub const FORMAT: &str = "qcsim-findings";
pub const VERSION: u64 = 1;

/// The drivers a case can be replayed on, as `--driver` names them; a
/// `corpus/regressions/<driver>-*.json` case must be in the ledger.
pub const DRIVERS: &[&str] = &["qemu", "imago", "qcow2-rs", "qcow2-rs-defaults"];

/// The script exit statuses that are verdicts; any other status means the
/// script could not run (a missing tool, a step that failed), so that a
/// failed step is never read as "gone".
pub const SCRIPT_PRESENT: i32 = 10;
pub const SCRIPT_GONE: i32 = 11;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    pub format: String,
    pub version: u64,
    pub findings: Vec<Finding>,
    /// Cases kept under `corpus/regressions/<driver>-*` that are not a
    /// driver's defect (a contract the driver keeps, a harness mistake
    /// since mended): listed so that every such case is accounted for.
    #[serde(default)]
    pub not_defects: Vec<NotDefect>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// Also the heading of its entry in `docs/findings.md`.
    pub id: String,
    /// `qemu` or `imago`: what the replay runs on.
    pub driver: String,
    /// The driver's version the defect was seen with, as its tool prints it.
    pub seen_with: String,
    pub replay: Replay,
    /// What the guest (or the user) sees, in a line.
    pub guest_sees: String,
    /// Whether a fix exists upstream, and what was checked.
    pub upstream_fix: String,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Replay {
    /// Crash cases replayed with `qcsim replay --driver DRIVER`, more than
    /// one when the defect was found again in another shape.
    Cases { cases: Vec<CaseCheck> },
    /// A script beside the harness (not a crash case), its verdict its
    /// exit status (`SCRIPT_PRESENT`, `SCRIPT_GONE`).
    Script { script: PathBuf },
}

/// One crash case of a finding: the defect shows in it when the run fails
/// and its explanation holds `symptom`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaseCheck {
    pub case: PathBuf,
    pub symptom: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotDefect {
    pub case: PathBuf,
    pub why: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{}: cannot read the findings list: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a findings list: {source}", path.display())]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: format {format:?} version {version}, expected {FORMAT:?} version {VERSION}", path.display())]
    Format {
        path: PathBuf,
        format: String,
        version: u64,
    },
    #[error("finding {id:?}: {problem}")]
    Entry { id: String, problem: String },
    #[error("finding {0:?} is listed twice")]
    Duplicate(String),
    #[error(
        "{}: a case of a driver other than ours, in neither `findings` nor `not_defects` of the findings list",
        .0.display()
    )]
    Unlisted(PathBuf),
    #[error("{}: cannot list the regressions: {source}", path.display())]
    ListCases {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no finding with id {0:?}")]
    NoSuchId(String),
}

impl Ledger {
    /// Read and check the list at `path`; its paths are relative to
    /// `root`, the repository.
    pub fn load(path: &Path, root: &Path) -> Result<Ledger, LedgerError> {
        let text = std::fs::read_to_string(path).map_err(|source| LedgerError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let ledger: Ledger = serde_json::from_str(&text).map_err(|source| LedgerError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        if ledger.format != FORMAT || ledger.version != VERSION {
            return Err(LedgerError::Format {
                path: path.to_path_buf(),
                format: ledger.format,
                version: ledger.version,
            });
        }
        ledger.check(root)?;
        Ok(ledger)
    }

    /// Every entry complete and its files present; every case of another
    /// driver under `corpus/regressions/` accounted for.
    fn check(&self, root: &Path) -> Result<(), LedgerError> {
        let mut ids = BTreeSet::new();
        let mut listed = BTreeSet::new();
        for f in &self.findings {
            let bad = |problem: String| LedgerError::Entry {
                id: f.id.clone(),
                problem,
            };
            if f.id.is_empty() || !f.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                return Err(bad("the id must be letters, digits and dashes".into()));
            }
            if !ids.insert(f.id.as_str()) {
                return Err(LedgerError::Duplicate(f.id.clone()));
            }
            if !DRIVERS.contains(&f.driver.as_str()) {
                return Err(bad(format!(
                    "driver {:?} is not one of {}",
                    f.driver,
                    DRIVERS.join(", ")
                )));
            }
            for (field, v) in [
                ("seen_with", &f.seen_with),
                ("guest_sees", &f.guest_sees),
                ("upstream_fix", &f.upstream_fix),
            ] {
                if v.trim().is_empty() {
                    return Err(bad(format!("{field} is empty")));
                }
            }
            match &f.replay {
                Replay::Cases { cases } => {
                    if cases.is_empty() {
                        return Err(bad("it lists no case".into()));
                    }
                    for CaseCheck { case, symptom } in cases {
                        let name = case.file_name().map(|n| n.to_string_lossy().into_owned());
                        let in_regressions = case.parent() == Some(Path::new("corpus/regressions"));
                        if !in_regressions
                            || !name.is_some_and(|n| {
                                n.starts_with(&format!("{}-", f.driver)) && n.ends_with(".json")
                            })
                        {
                            return Err(bad(format!(
                                "its case {} is not corpus/regressions/{}-....json (the default \
                                 tests replay that folder on the engine)",
                                case.display(),
                                f.driver
                            )));
                        }
                        if !root.join(case).is_file() {
                            return Err(bad(format!("its case {} does not exist", case.display())));
                        }
                        if symptom.trim().is_empty() {
                            return Err(bad(format!("the symptom of {} is empty", case.display())));
                        }
                        listed.insert(case.clone());
                    }
                }
                Replay::Script { script } => {
                    if !root.join(script).is_file() {
                        return Err(bad(format!(
                            "its script {} does not exist",
                            script.display()
                        )));
                    }
                }
            }
        }
        for n in &self.not_defects {
            if !root.join(&n.case).is_file() {
                return Err(LedgerError::Entry {
                    id: n.case.display().to_string(),
                    problem: "listed as not a defect, but the case does not exist".into(),
                });
            }
            if n.why.trim().is_empty() {
                return Err(LedgerError::Entry {
                    id: n.case.display().to_string(),
                    problem: "listed as not a defect without saying why".into(),
                });
            }
            listed.insert(n.case.clone());
        }
        let dir = Path::new("corpus/regressions");
        let entries =
            std::fs::read_dir(root.join(dir)).map_err(|source| LedgerError::ListCases {
                path: root.join(dir),
                source,
            })?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let of_other_driver = DRIVERS
                .iter()
                .any(|d| name.starts_with(&format!("{d}-")) && name.ends_with(".json"));
            if of_other_driver && !listed.contains(&dir.join(&name)) {
                return Err(LedgerError::Unlisted(dir.join(name)));
            }
        }
        Ok(())
    }

    /// The findings named by `ids`, in the list's order; all of them when
    /// `ids` is empty.
    pub fn select(&self, ids: &[String]) -> Result<Vec<&Finding>, LedgerError> {
        if let Some(unknown) = ids
            .iter()
            .find(|id| !self.findings.iter().any(|f| &f.id == *id))
        {
            return Err(LedgerError::NoSuchId(unknown.clone()));
        }
        Ok(self
            .findings
            .iter()
            .filter(|f| ids.is_empty() || ids.contains(&f.id))
            .collect())
    }
}
