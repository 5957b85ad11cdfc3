//! The examples the README and the pages under `docs/` show are run, and
//! what they print must be what the page says, so a changed figure, flag
//! or message fails here instead of misleading a reader.
//!
//! An example is a fenced block whose info string is `console`: each line
//! `$ COMMAND` runs `COMMAND` (its first word `qcsim`, or `qemu-img` and
//! `qemu-io`, which run qcsim under that name as the drop-in does), and
//! the lines up to the next `$ ` are its standard output. In those lines,
//! `[..]` stands for any text within a line, and a line `...` for any
//! number of lines (shown where the output is long or machine-dependent);
//! a last line `[exit N]` says the command exits N (0 otherwise). The
//! commands of one block run in order in one fresh directory, in which
//! `corpus/` holds the repository's committed cases, so one command can
//! use what an earlier one wrote.
//!
//! The format is trycmd's markdown format, cut down to what the pages
//! use; a checker of about a hundred lines over `similar` costs the test
//! build nothing, where trycmd would add its dependency tree to every
//! fresh clone's build (issue 33's budget).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::support::QCSIM;

/// One `$ COMMAND` of a page and the output the page shows for it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Example {
    /// Where it stands: `README.md:42`.
    at: String,
    words: Vec<String>,
    expected: Vec<String>,
    exit: i32,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pages whose examples run: the README and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![repo().join("README.md")];
    if let Ok(entries) = std::fs::read_dir(repo().join("docs")) {
        let mut docs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        docs.sort();
        out.extend(docs);
    }
    out
}

/// The `console` blocks of `text` (page `name`), each a list of examples.
fn blocks(name: &str, text: &str) -> Vec<Vec<Example>> {
    let mut out = Vec::new();
    let mut block: Option<Vec<Example>> = None;
    for (i, line) in text.lines().enumerate() {
        let at = format!("{name}:{}", i + 1);
        match (&mut block, line.trim_end()) {
            (None, "```console") => block = Some(Vec::new()),
            (Some(_), "```") => out.push(block.take().expect("in a block")),
            (Some(b), l) if l.starts_with("$ ") => {
                let words = split_words(&l[2..]).unwrap_or_else(|e| panic!("{at}: {e}"));
                b.push(Example {
                    at,
                    words,
                    expected: Vec::new(),
                    exit: 0,
                })
            }
            (Some(b), l) => {
                let Some(e) = b.last_mut() else {
                    panic!("{at}: output before any `$ ` command");
                };
                match l.strip_prefix("[exit ").and_then(|r| r.strip_suffix(']')) {
                    Some(code) => {
                        e.exit = code.parse().unwrap_or_else(|_| panic!("{at}: {l}"));
                    }
                    None => e.expected.push(l.to_string()),
                }
            }
            (None, _) => {}
        }
    }
    assert!(block.is_none(), "{name}: a console block is not closed");
    out
}

/// A command line split as a shell splits words: blanks separate them,
/// single and double quotes group (no escapes, no expansion).
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("an unclosed quote in {line:?}"));
    }
    words.extend(word);
    Ok(words)
}

/// Whether `got` matches the pattern line `want` (`[..]`: any text).
fn line_matches(want: &str, got: &str) -> bool {
    let parts: Vec<&str> = want.split("[..]").collect();
    if parts.len() == 1 {
        return want == got;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !got.starts_with(first) || got.len() < first.len() + last.len() || !got.ends_with(last) {
        return false;
    }
    let mut rest = &got[first.len()..got.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the lines `got` match the pattern lines `want` (`...`: any
/// number of lines), trying each place a `...` can end.
fn lines_match(want: &[String], got: &[&str]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w == "..." => (0..=got.len()).any(|k| lines_match(rest, &got[k..])),
        Some((w, rest)) => {
            !got.is_empty() && line_matches(w, got[0]) && lines_match(rest, &got[1..])
        }
    }
}

/// A directory for one block: `corpus/generated` and `corpus/regressions`
/// are the repository's, anything the commands write stays here.
fn sandbox() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::create_dir(dir.path().join("corpus")).expect("corpus/");
    for folder in ["generated", "regressions"] {
        std::os::unix::fs::symlink(
            repo().join("corpus").join(folder),
            dir.path().join("corpus").join(folder),
        )
        .expect("a link to the corpus");
    }
    dir
}

/// Run one example in `dir`; what differs from the page, if anything.
fn run(e: &Example, dir: &Path) -> Option<String> {
    let (program, args) = e.words.split_first().expect("a command");
    let mut cmd = match program.as_str() {
        "qcsim" => Command::new(QCSIM),
        // qcsim under the drop-in's name, as a symlink would run it.
        "qemu-img" | "qemu-io" => {
            let mut c = Command::new(QCSIM);
            c.arg0(program);
            c
        }
        other => panic!(
            "{}: runs {other}; only qcsim and its drop-in names run",
            e.at
        ),
    };
    let out = cmd
        .args(args)
        .current_dir(dir)
        // Progress goes to standard error, never into a page's output;
        // the pace a user set is not inherited.
        .env_remove("QCSIM_PROGRESS_EVERY")
        .stdin(Stdio::null())
        .output()
        .expect("qcsim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got: Vec<&str> = stdout.lines().collect();
    let code = out.status.code().unwrap_or(-1);
    if code == e.exit && lines_match(&e.expected, &got) {
        return None;
    }
    let want = e.expected.join("\n") + "\n";
    let diff = similar::TextDiff::from_lines(want.as_str(), &*stdout)
        .unified_diff()
        .header("the page shows", "the command printed")
        .to_string();
    Some(format!(
        "{}: `{}` exited {code} (the page says {}) and printed, against the page:\n{diff}\nstandard error:\n{}",
        e.at,
        e.words.join(" "),
        e.exit,
        String::from_utf8_lossy(&out.stderr)
    ))
}

#[test]
fn the_readme_and_docs_examples_print_what_they_show() {
    let mut ran = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        let name = page
            .strip_prefix(repo())
            .unwrap_or(&page)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{name}: {e}"));
        for block in blocks(&name, &text) {
            let dir = sandbox();
            for e in &block {
                ran += 1;
                wrong.extend(run(e, dir.path()));
            }
        }
    }
    assert!(ran >= 3, "only {ran} examples found: the README shows more");
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// The checker itself: what matches, what does not, how a page is read.
#[test]
fn the_example_checker_matches_and_refuses_as_documented() {
    assert!(line_matches("a [..] c", "a bb c"));
    assert!(line_matches("[..] jobs)", "50 cases (2 jobs)"));
    assert!(!line_matches("a [..] c", "a bb d"));
    assert!(!line_matches("exact", "exactly"));
    let pat = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(&pat(&["a", "...", "z"]), &["a", "b", "c", "z"]));
    assert!(lines_match(&pat(&["a", "...", "z"]), &["a", "z"]));
    assert!(!lines_match(&pat(&["a", "...", "z"]), &["a", "b"]));
    assert!(!lines_match(&pat(&["a"]), &["a", "b"]), "extra lines fail");
    assert_eq!(
        split_words("qemu-io -c 'write -P 0xab 0 64k' t.qcow2").unwrap(),
        ["qemu-io", "-c", "write -P 0xab 0 64k", "t.qcow2"]
    );
    assert!(split_words("a 'b").is_err());
    let page =
        "x\n```console\n$ qcsim run --seed 1\nseed 1: PASS\n...\n$ qcsim bad\n[exit 2]\n```\n";
    let b = blocks("P.md", page);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0][0].at, "P.md:3");
    assert_eq!(b[0][0].expected, ["seed 1: PASS", "..."]);
    assert_eq!((b[0][1].exit, b[0][1].expected.len()), (2, 0));
}
