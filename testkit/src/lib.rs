//! What every crate's tests share to use QEMU's tools as the independent
//! oracle: running a program in a directory, creating images with
//! `qemu-img`, driving `qemu-io`, reading an image's guest view with
//! `qemu-img convert`, and the one `assert_clean`.
//!
//! Every helper runs its tool in the image's directory: QEMU resolves a
//! relative backing file name against the image's directory and a relative
//! data file name against the working directory, and there both agree.
//! Tools that cannot be started fail the test with a hint to install
//! qemu-utils (`.ci/setup` does).

use std::path::Path;
use std::process::{Command, Output};

/// Run `program` with `args` in `dir`, whatever its exit status.
pub fn exec(program: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program} (install qemu-utils): {e}"))
}

/// [`exec`]; the program must succeed.
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

/// The directory of an image path (the working directory for its tools).
pub fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn utf8(path: &Path) -> &str {
    path.to_str().expect("test paths are UTF-8")
}

/// `qemu-img create -q -f qcow2 [-o OPTS] [-b NAME -F FORMAT] IMG SIZE`
/// (`opts` empty: no `-o`; `backing`: name and format).
pub fn qemu_create(img: &Path, opts: &str, size: &str, backing: Option<(&str, &str)>) {
    let mut args = vec!["create", "-q", "-f", "qcow2"];
    if !opts.is_empty() {
        args.extend(["-o", opts]);
    }
    if let Some((name, format)) = backing {
        args.extend(["-b", name, "-F", format]);
    }
    args.extend([utf8(img), size]);
    run("qemu-img", &args, dir_of(img));
}

/// `qemu-io [-f FMT] -c CMD ... IMG`; it must succeed (qemu-io exits 0
/// even when a command fails, so callers that need a verdict per command
/// use `qemu-io` through [`run`] and read its output).
pub fn qemu_io(fmt: Option<&str>, img: &Path, cmds: &[String]) -> Output {
    let mut args: Vec<&str> = vec![];
    if let Some(f) = fmt {
        args.extend(["-f", f]);
    }
    for c in cmds {
        args.extend(["-c", c.as_str()]);
    }
    args.push(utf8(img));
    run("qemu-io", &args, dir_of(img))
}

/// The guest disk as `qemu-img convert -O raw` reads it.
pub fn qemu_raw(img: &Path) -> Vec<u8> {
    let raw = img.with_extension("ref.raw");
    run(
        "qemu-img",
        &["convert", "-O", "raw", utf8(img), utf8(&raw)],
        dir_of(img),
    );
    let bytes = std::fs::read(&raw).expect("qemu-img convert wrote its output");
    let _ = std::fs::remove_file(&raw);
    bytes
}

/// `qemu-img check [-r MODE] --output json` on a qcow2 image: its exit code
/// and the parsed report (None when it printed none).
pub fn qemu_check(img: &Path, repair: Option<&str>) -> (i32, Option<serde_json::Value>) {
    let mut args = vec!["check", "-f", "qcow2", "--output", "json"];
    if let Some(r) = repair {
        args.extend(["-r", r]);
    }
    args.push(utf8(img));
    let out = exec("qemu-img", &args, dir_of(img));
    let json = serde_json::from_slice(&out.stdout).ok();
    (out.status.code().unwrap_or(-1), json)
}

/// `qemu-img check` finds the image clean: exit 0, and no corruption, leak
/// or check error in its report. `what` names the image in a failure. This
/// is the one strictness every test holds an image to; a test that allows
/// leaks (after a crash) says so with [`qemu_check`] instead.
pub fn assert_clean(img: &Path, what: &str) {
    let (code, report) = qemu_check(img, None);
    let report = report.unwrap_or_else(|| panic!("{what}: qemu-img check printed no report"));
    for field in ["corruptions", "leaks", "check-errors"] {
        assert_eq!(
            report.get(field).and_then(|v| v.as_u64()).unwrap_or(0),
            0,
            "{what}: qemu-img check: {field}: {report}"
        );
    }
    assert_eq!(code, 0, "{what}: qemu-img check exit code: {report}");
}

/// Run `program` in the working directory; it must succeed. Its stdout.
pub fn tool(program: &str, args: &[&str]) -> Vec<u8> {
    run(program, args, Path::new(".")).stdout
}

/// Run `program` in `dir`; it must succeed. Its stdout.
pub fn tool_in(dir: &Path, program: &str, args: &[&str]) -> Vec<u8> {
    run(program, args, dir).stdout
}
