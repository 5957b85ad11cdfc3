//! No module of a crate imports, directly or through others, a module that
//! imports it back: each imports only from modules below it, so a reader
//! can take the crate in from the bottom up, and a change to a low module
//! never needs a high one.
//!
//! The graph is read from the source text: a file is a node, and it has an
//! edge to every module of its own crate it names, by a `use` (trees
//! expanded) or by a path in the code (`crate::a::b`, `super::x`, a child
//! module's name), a name re-exported by a module (`pub use`) counted as
//! the module it comes from (the re-export itself is the module's face, no
//! edge of its own). Declaring a child (`mod x;`) is no edge; an
//! inline `#[cfg(test)]` module at the end of a file is left out (tests
//! may reach anything). Circles found are compared with the ones still
//! known (issue 34 point 7): a new one fails, and so does a known one that
//! is gone, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose sources are read.
const CRATES: &[&str] = &[
    "blockdev", "engine", "oracle", "sim", "tools", "nbd", "qcsim", "testkit",
];

/// Circles that still stand, each as its files sorted and joined by ", ".
/// Remove a line when its circle is broken; never add one.
const KNOWN: &[&str] = &[];

/// A module: its crate and its path inside it (`["runner", "ops"]`).
type Module = (String, Vec<String>);

struct Crate {
    name: String,
    /// Module path to its file.
    files: BTreeMap<Vec<String>, PathBuf>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of file `f` under `src`.
fn module_of(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    let stem = last.trim_end_matches(".rs").to_string();
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem);
    }
    parts
}

fn read_crate(name: &str) -> Crate {
    let src = repo().join(name).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let files = files
        .into_iter()
        .map(|f| (module_of(&src, &f), f))
        .collect();
    Crate {
        name: name.to_string(),
        files,
    }
}

/// The file's code: comments and string literals blanked (a path in a doc
/// comment or a message is not an import), the trailing `#[cfg(test)]`
/// module left out.
fn code_of(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]\nmod ") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '"' {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            // A char literal such as '"' or '{' (not a lifetime).
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                if rest.len() >= 2 && (rest.as_bytes()[1] == b'\'' || rest.starts_with('\\')) {
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                    }
                    out.push_str("' '");
                } else {
                    out.push(c);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Every `use` of `code` as whole paths (`a::{b, c::d}` gives `a::b` and
/// `a::c::d`; a glob ends in `*`), with whether it is a `pub use`.
fn use_paths(code: &str) -> Vec<(Vec<String>, bool)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = find_use(rest) {
        let public = rest[..i].trim_end().ends_with(')') || rest[..i].trim_end().ends_with("pub");
        let after = &rest[i + 4..];
        let end = after.find(';').unwrap_or(after.len());
        let tree: String = after[..end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        for p in expand(&tree) {
            out.push((p, public));
        }
        rest = &after[end..];
    }
    out
}

/// The next `use ` keyword at the start of a statement in `s`.
fn find_use(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(k) = s[from..].find("use ") {
        let i = from + k;
        let before = s[..i].chars().last();
        if before.is_none_or(|c| c == '\n' || c == ' ' || c == ';' || c == '{' || c == '}') {
            let line_start = s[..i].rfind('\n').map_or(0, |n| n + 1);
            let lead = s[line_start..i].trim();
            if lead.is_empty() || lead.starts_with("pub") {
                return Some(i);
            }
        }
        from = i + 4;
    }
    None
}

/// A use tree without blanks, as paths.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree);
        let path = path.split("as").next().unwrap_or(path);
        return vec![path
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()];
    };
    let prefix: Vec<String> = tree[..open]
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    let bytes = inner.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => depth -= 1,
            b',' if depth == 0 => {
                out.extend(expand_part(&prefix, &inner[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.extend(expand_part(&prefix, &inner[start..]));
    out
}

fn expand_part(prefix: &[String], part: &str) -> Vec<Vec<String>> {
    if part.is_empty() {
        return Vec::new();
    }
    expand(part)
        .into_iter()
        .map(|p| {
            let mut full = prefix.to_vec();
            full.extend(p.into_iter().filter(|s| s != "self"));
            full
        })
        .collect()
}

/// Paths written in the code outside `use`: `crate::a::b`, `super::x`,
/// `self::y`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let b = code.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let start_ok = i == 0 || !word(b[i - 1]) && b[i - 1] != b':';
        if start_ok && word(b[i]) {
            let mut j = i;
            let mut parts = Vec::new();
            loop {
                let s = j;
                while j < b.len() && word(b[j]) {
                    j += 1;
                }
                parts.push(code[s..j].to_string());
                if j + 2 < b.len() && &b[j..j + 2] == b"::" && word(b[j + 2]) {
                    j += 2;
                } else {
                    break;
                }
            }
            if parts.len() > 1 && matches!(parts[0].as_str(), "crate" | "super" | "self") {
                out.push(parts);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The module a path names, from file module `from` of crate `c`: the
/// longest prefix that is a module of the crate, and the name after it.
fn resolve(c: &Crate, from: &[String], path: &[String]) -> Option<(Vec<String>, Option<String>)> {
    let mut base: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "super" | "self" => from.to_vec(),
        // A child module of this file, named bare.
        first => {
            let mut child = from.to_vec();
            child.push(first.to_string());
            if !c.files.contains_key(&child) {
                return None;
            }
            from.to_vec()
        }
    };
    let mut rest = match path[0].as_str() {
        "crate" | "self" => &path[1..],
        _ => path,
    };
    while rest.first().map(String::as_str) == Some("super") {
        base.pop()?;
        rest = &rest[1..];
    }
    for (k, seg) in rest.iter().enumerate() {
        let mut next = base.clone();
        next.push(seg.clone());
        if c.files.contains_key(&next) {
            base = next;
        } else {
            return Some((base, rest.get(k).cloned()));
        }
    }
    Some((base, None))
}

/// The edges of every file of crate `c`, each with the names it takes.
fn edges(c: &Crate) -> BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> {
    let code: BTreeMap<&Vec<String>, String> = c
        .files
        .iter()
        .map(|(m, f)| (m, code_of(&std::fs::read_to_string(f).expect("readable"))))
        .collect();
    // What each module re-exports: name -> the module it comes from.
    let mut reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (m, text) in &code {
        for (p, public) in use_paths(text) {
            if !public {
                continue;
            }
            if let Some((target, Some(name))) = resolve(c, m, &p) {
                if &target != *m && name != "*" {
                    reexports
                        .entry((*m).clone())
                        .or_default()
                        .insert(name, target);
                }
            }
        }
    }
    let mut out: BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>> = BTreeMap::new();
    for (m, text) in &code {
        let node = (c.name.clone(), (*m).clone());
        out.entry(node.clone()).or_default();
        // A `pub use` is the module's face, not a dependency of its own:
        // whoever imports the name is counted as importing its source.
        let mut paths: Vec<Vec<String>> = use_paths(text)
            .into_iter()
            .filter(|(_, public)| !public)
            .map(|(p, _)| p)
            .collect();
        paths.extend(inline_paths(text));
        for p in paths {
            let Some((mut target, name)) = resolve(c, m, &p) else {
                continue;
            };
            // A re-exported name counts as the module it comes from.
            let mut seen = 0;
            while let Some(src) = name
                .as_ref()
                .and_then(|n| reexports.get(&target).and_then(|r| r.get(n)))
            {
                target = src.clone();
                seen += 1;
                if seen > 8 {
                    break;
                }
            }
            if &target == *m {
                continue;
            }
            out.entry(node.clone())
                .or_default()
                .entry((c.name.clone(), target))
                .or_default()
                .insert(name.unwrap_or_else(|| "(the module)".into()));
        }
    }
    out
}

/// The strongly connected components of more than one node (Tarjan).
fn circles(g: &BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>>) -> Vec<Vec<Module>> {
    struct State<'a> {
        g: &'a BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flat_map(|e| e.keys()) {
            let Some((w, _)) = s.g.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.index[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// A module as its file, relative to the repository.
fn file_name(crates: &[Crate], m: &Module) -> String {
    let c = crates.iter().find(|c| c.name == m.0).expect("its crate");
    let f = &c.files[&m.1];
    f.strip_prefix(repo()).unwrap_or(f).display().to_string()
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let crates: Vec<Crate> = CRATES.iter().map(|c| read_crate(c)).collect();
    let mut found = BTreeMap::new();
    for c in &crates {
        let g = edges(c);
        for comp in circles(&g) {
            let key = comp
                .iter()
                .map(|m| file_name(&crates, m))
                .collect::<Vec<_>>()
                .join(", ");
            let mut why = String::new();
            for a in &comp {
                for (b, names) in &g[a] {
                    if comp.contains(b) {
                        why.push_str(&format!(
                            "  {} -> {}: {}\n",
                            file_name(&crates, a),
                            file_name(&crates, b),
                            names.iter().cloned().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
            }
            found.insert(key, why);
        }
    }
    let new: Vec<String> = found
        .iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
        .map(|(k, why)| format!("circle: {k}\n{why}"))
        .collect();
    let gone: Vec<&&str> = KNOWN.iter().filter(|k| !found.contains_key(**k)).collect();
    assert!(
        new.is_empty(),
        "modules that import each other in a circle (make the shared part a \
         module of its own, below both):\n{}",
        new.join("\n")
    );
    assert!(
        gone.is_empty(),
        "circles broken: take them out of KNOWN in {}: {gone:?}",
        file!()
    );
}

/// The reader itself: trees expanded, re-exports followed, a circle
/// found, a parent's child declaration no edge.
#[test]
fn the_reader_finds_a_planted_circle() {
    assert_eq!(
        expand("crate::{a::B,c::{D,e::F}}"),
        vec![
            vec!["crate", "a", "B"],
            vec!["crate", "c", "D"],
            vec!["crate", "c", "e", "F"]
        ]
    );
    assert_eq!(
        inline_paths("let x = crate::runner::budget(y); super::z();"),
        vec![vec!["crate", "runner", "budget"], vec!["super", "z"]]
    );
    assert!(code_of("let s = \"crate::a::b\"; // crate::c\n").contains("\"\""));
    assert!(inline_paths(&code_of("let s = \"crate::a::b\"; // crate::c::d\n")).is_empty());
    let dir = tempfile_dir();
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use b::Thing;\n").unwrap();
    std::fs::write(src.join("a/mod.rs"), "mod c;\nuse crate::Thing;\n").unwrap();
    std::fs::write(src.join("a/c.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct Thing;\nfn g() { crate::a::c::f() }\n",
    )
    .unwrap();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let c = Crate {
        name: "planted".into(),
        files: files
            .into_iter()
            .map(|f| (module_of(&src, &f), f))
            .collect(),
    };
    let g = edges(&c);
    let m = |p: &[&str]| {
        (
            "planted".to_string(),
            p.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        )
    };
    // `use crate::Thing` reaches b through lib.rs's re-export.
    assert!(g[&m(&["a"])].contains_key(&m(&["b"])), "{g:?}");
    assert!(!g[&m(&[])].contains_key(&m(&["a"])), "`mod a;` is no edge");
    assert!(circles(&g).is_empty(), "{g:?}");
    std::fs::write(
        src.join("a/c.rs"),
        "pub fn f() { let _ = crate::b::Thing; }\n",
    )
    .unwrap();
    std::fs::write(
        src.join("b.rs"),
        "pub struct Thing;\nfn g() { crate::a::c::f() }\n",
    )
    .unwrap();
    let g = edges(&c);
    assert_eq!(circles(&g), vec![vec![m(&["a", "c"]), m(&["b"])]]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory for the planted crate (testkit has no tempfile).
fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("qcsim-import-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
