//! What the command-line test modules share: running `qcsim`, `qemu-img`
//! and `qemu-io` in a test's directory (from `testkit`), and the one
//! `assert_clean` every module holds an image to.
#![allow(dead_code)]

use std::path::Path;
use std::process::Output;

pub use testkit::{exec, run};

pub const QCSIM: &str = env!("CARGO_BIN_EXE_qcsim");

/// Run `qcsim` in `dir`; it must succeed. Returns its standard output.
pub fn qcsim(args: &[&str], dir: &Path) -> String {
    String::from_utf8(run(QCSIM, args, dir).stdout).unwrap()
}

/// `image` (relative to `dir`) is clean: `qemu-img check` finds no
/// corruption, leak or check error, and `qcsim check` agrees.
pub fn assert_clean(image: &str, dir: &Path) {
    testkit::assert_clean(&dir.join(image), image);
    let ours = exec(QCSIM, &["check", image], dir);
    assert_eq!(
        ours.status.code(),
        Some(0),
        "qcsim check {image}: {}{}",
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&ours.stderr)
    );
}

/// A finished command's exit status and output, for failure messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
