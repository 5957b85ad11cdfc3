//! The recipes in deploy/: the shard each scheduler's index variables
//! make, run through the recipes' own scripts with a fake qcsim that
//! records its command line, so a renamed variable (JOB_COMPLETION_INDEX,
//! SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT, QCSIM_SHARDS, parallel's
//! `{}`) fails here. The Kubernetes Job's arguments are read from its
//! manifest, and must make the same campaign as the Slurm recipe's.
//! The recipes themselves run on a scheduler: deploy/slurm-local.sh and
//! deploy/parallel-local.sh, not part of the test run.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::text;

/// Every variable a recipe reads, removed from each run so that the
/// environment the tests run in (a CI job on Slurm, say) cannot leak in.
const SCHEDULER_VARS: &[&str] = &[
    "JOB_COMPLETION_INDEX",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_SUBMIT_DIR",
    "QCSIM_SHARDS",
    "QCSIM_OUT",
    "OUT",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// A directory with a fake `qcsim` (it appends its arguments to
/// `qcsim.log` and creates the `--report` directory, so the recipe's
/// merge finds it) and a fake `parallel` (it runs its command, the word
/// before `:::`, once per argument after it, with `{}` replaced: what GNU
/// parallel does with one local job slot).
struct Fakes {
    dir: tempfile::TempDir,
}

impl Fakes {
    fn new() -> Fakes {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, body).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(&path, mode).unwrap();
        };
        write(
            "qcsim",
            "#!/bin/sh\necho \"$*\" >> \"$(dirname \"$0\")/qcsim.log\"\n\
             while [ \"$#\" -gt 0 ]; do\n  [ \"$1\" = --report ] && mkdir -p \"$2\"\n  shift\ndone\n",
        );
        write(
            "parallel",
            "#!/bin/sh\ncmd=\"\"\nwhile [ \"$#\" -gt 0 ] && [ \"$1\" != ::: ]; do cmd=\"$1\"; shift; done\nshift\n\
             for i in \"$@\"; do\n  sh -c \"$(printf '%s' \"$cmd\" | sed \"s/{}/$i/g\")\" || exit 1\ndone\n",
        );
        Fakes { dir }
    }

    fn qcsim(&self) -> PathBuf {
        self.dir.path().join("qcsim")
    }

    /// Run `script` (under deploy/) with bash in `cwd`, the fakes first on
    /// PATH and QCSIM the fake, plus `env`; it must succeed. Returns the
    /// command lines the fake qcsim was given, and forgets them.
    fn run(&self, script: &str, args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Vec<String> {
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("deploy").join(script))
            .args(args)
            .current_dir(cwd);
        for var in SCHEDULER_VARS {
            cmd.env_remove(var);
        }
        let path = format!(
            "{}:{}",
            self.dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env("PATH", path)
            .env("QCSIM", self.qcsim())
            .envs(env.iter().copied());
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{script} {args:?} {env:?}: {}",
            text(&out)
        );
        let log = self.dir.path().join("qcsim.log");
        let lines = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        lines.lines().map(any_jobs).collect()
    }
}

/// A command line with `--jobs N` as `--jobs J`: run-shard.sh gives the
/// CPUs `nproc` counts, which is not for these tests to predict.
fn any_jobs(line: &str) -> String {
    let mut words: Vec<&str> = line.split(' ').collect();
    if let Some(at) = words.iter().position(|w| *w == "--jobs") {
        if at + 1 < words.len() {
            words[at + 1] = "J";
        }
    }
    words.join(" ")
}

/// The campaign command run-shard.sh makes of shard `i` of `n`.
fn campaign_line(seeds: &str, i: u32, n: u32, out: &Path) -> String {
    let out = out.display();
    format!(
        "campaign --seeds {seeds} --shard {i}/{n} --jobs J --quiet \
         --report {out}/shard-{i}-of-{n} --corpus {out}/corpus-{i}-of-{n}"
    )
}

/// `key: value` of the manifest's first line with that key, trimmed.
fn yaml_value<'a>(manifest: &'a str, key: &str) -> &'a str {
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {key}: in the manifest"))
        .trim()
}

#[test]
fn slurm_array_task_variables_make_the_shard() {
    let f = Fakes::new();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let root = repo();
    let base = [
        ("SLURM_SUBMIT_DIR", root.to_str().unwrap()),
        ("OUT", out.to_str().unwrap()),
    ];
    let task = |id: &'static str, count: &'static str| {
        let mut env = base.to_vec();
        env.extend([
            ("SLURM_ARRAY_TASK_ID", id),
            ("SLURM_ARRAY_TASK_COUNT", count),
        ]);
        env
    };
    let ran = f.run("slurm-array.sh", &["0..400"], &task("2", "4"), tmp.path());
    assert_eq!(ran, [campaign_line("0..400", 2, 4, &out)]);
    // The rerun of one task: an array of one, the count given.
    let mut env = task("2", "1");
    env.push(("QCSIM_SHARDS", "4"));
    let ran = f.run("slurm-array.sh", &["0..400"], &env, tmp.path());
    assert_eq!(ran, [campaign_line("0..400", 2, 4, &out)]);
}

/// The indexed Job's pod: the image's entrypoint is run-shard.sh, given
/// the manifest's arguments and the completion index; the campaign is the
/// one the Slurm recipe runs for the same task, and the merge Job reads
/// the directories the pods write.
#[test]
fn kubernetes_completion_index_makes_the_shard_slurm_makes() {
    let deploy = repo().join("deploy");
    let read = |name: &str| std::fs::read_to_string(deploy.join(name)).unwrap();
    let containerfile = read("Containerfile");
    assert!(
        containerfile.contains("COPY deploy/run-shard.sh /usr/local/bin/run-shard")
            && containerfile.contains("ENTRYPOINT [\"/usr/local/bin/run-shard\"]"),
        "the image's entrypoint is no longer deploy/run-shard.sh"
    );
    let job = read("k8s-indexed-job.yaml");
    assert_eq!(yaml_value(&job, "completionMode"), "Indexed");
    let completions: u32 = yaml_value(&job, "completions").parse().unwrap();
    // The pod's arguments, a flow sequence of quoted strings: JSON.
    let args: Vec<String> = serde_json::from_str(yaml_value(&job, "args")).unwrap();
    let arg = |name: &str| {
        let at = args.iter().position(|a| a == name).unwrap();
        args[at + 1].clone()
    };
    assert_eq!(arg("--shard-count"), completions.to_string());
    assert!(!args.iter().any(|a| a == "--shard-index"), "{args:?}");
    let seeds = arg("--seeds");
    let merge = read("k8s-merge-job.yaml");
    assert!(
        merge.contains(&format!("{}/shard-*-of-{completions} ", arg("--out"))),
        "the merge Job does not read the {completions} shards' directories"
    );

    let f = Fakes::new();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    // The manifest's volume, /out, here a temporary directory.
    let args: Vec<&str> = args
        .iter()
        .map(|a| {
            if a == "/out" {
                out.to_str().unwrap()
            } else {
                a.as_str()
            }
        })
        .collect();
    let last = (completions - 1).to_string();
    let pod = f.run(
        "run-shard.sh",
        &args,
        &[("JOB_COMPLETION_INDEX", last.as_str())],
        tmp.path(),
    );
    assert_eq!(
        pod,
        [campaign_line(&seeds, completions - 1, completions, &out)]
    );
    let root = repo();
    let slurm = f.run(
        "slurm-array.sh",
        &[&seeds],
        &[
            ("SLURM_SUBMIT_DIR", root.to_str().unwrap()),
            ("OUT", out.to_str().unwrap()),
            ("SLURM_ARRAY_TASK_ID", last.as_str()),
            ("SLURM_ARRAY_TASK_COUNT", &completions.to_string()),
        ],
        tmp.path(),
    );
    assert_eq!(pod, slurm);
}

/// parallel-ssh.sh: one job per shard, parallel's `{}` the index, then
/// the merge of every shard, refusing an incomplete set.
#[test]
fn parallel_replacement_string_makes_the_shards() {
    let f = Fakes::new();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("hosts"), "1/:\n").unwrap();
    let ran = f.run(
        "parallel-ssh.sh",
        &["hosts", "0..400", "4", "out"],
        &[],
        tmp.path(),
    );
    let mut expected: Vec<String> = (0..4)
        .map(|i| campaign_line("0..400", i, 4, Path::new(".")))
        .collect();
    expected.push(
        "report merge --complete shard-0-of-4 shard-1-of-4 shard-2-of-4 shard-3-of-4 -o merged"
            .into(),
    );
    assert_eq!(ran, expected);
}
