//! What the command-line test files share: running `qcsim`, `qemu-img` and
//! `qemu-io` in a test's directory and failing with their output.
//! (Each test file uses part of it.)
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub const QCSIM: &str = env!("CARGO_BIN_EXE_qcsim");

/// Run `program` in `dir`, whatever its exit status.
pub fn exec(program: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (install qemu-utils): {e}"))
}

/// Run `program` in `dir`; it must succeed.
pub fn run(program: &str, args: &[&str], dir: &Path) -> Output {
    let out = exec(program, args, dir);
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({:?}):\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run `qcsim` in `dir`; it must succeed. Returns its standard output.
pub fn qcsim(args: &[&str], dir: &Path) -> String {
    String::from_utf8(run(QCSIM, args, dir).stdout).unwrap()
}
