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

/// qemu-io's output as QEMU's iotests filter it: the timing part of each
/// report line ("4 KiB, 1 ops; 00.00 sec (1.190 MiB/sec and 304.7548
/// ops/sec)") becomes "4 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX
/// ops/sec)", the size kept. What qcsim and qemu-io print then compares
/// exactly.
pub fn untimed(out: &str) -> String {
    out.lines()
        .map(|l| {
            let timing = l.find(", ").filter(|_| l.ends_with(" ops/sec)"));
            match timing {
                Some(at) if l[at..].contains(" ops; ") => format!(
                    "{}, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n",
                    &l[..at]
                ),
                _ => format!("{l}\n"),
            }
        })
        .collect()
}

/// The number just before the first `what` in `out` (a count in a line
/// such as "3 writes (1 FUA), 2 flushes").
pub fn number_before(out: &str, what: &str) -> u64 {
    let at = out
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {out}"));
    out[..at]
        .trim_end()
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number before {what:?} in {out}"))
}
