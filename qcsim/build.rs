//! Records the git revision the `qcsim` binary is built from, so that a
//! campaign report says which code produced its figures (`revision`).
//! Outside a git checkout (a source tarball) the revision is "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let revision = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(rev) => {
            // Uncommitted changes to tracked files make the figures
            // irreproducible from the revision alone: say so.
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{rev}-dirty")
            } else {
                rev
            }
        }
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=QCSIM_REVISION={revision}");
    // Rerun when HEAD moves or the index changes (a commit, a checkout, an
    // add); edits to sources rebuild the crate anyway.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head_ref}");
        }
    }
}
