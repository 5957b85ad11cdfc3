//! `qcsim bench FILE` as a user runs it: every qemu-img bench flag parses,
//! bad ones are refused with a clear message, and tiny runs leave an image
//! that QEMU finds clean and holding the written pattern. Runs are tiny
//! (64 requests of 4 KiB) so the whole file takes well under a few seconds.

use std::path::Path;

use crate::support::{assert_clean, exec, QCSIM};

/// `support::run`'s standard output, as text.
fn run(program: &str, args: &[&str], dir: &Path) -> String {
    String::from_utf8(crate::support::run(program, args, dir).stdout).unwrap()
}

/// `qemu-io -c "read -P p off len"` succeeds (it fails on a mismatch).
fn assert_pattern(image: &str, fmt: &str, pattern: u8, off: u64, len: u64, dir: &Path) {
    let cmd = format!("read -P {pattern} {off} {len}");
    let out = exec("qemu-io", &["-f", fmt, "-c", &cmd, image], dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && !text.contains("Pattern verification failed"),
        "{image}: {cmd}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn fresh_qcow2(name: &str, size: &str, dir: &Path) {
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=64k",
            name,
            size,
        ],
        dir,
    );
}

#[test]
fn a_tiny_write_run_leaves_a_clean_image_with_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fresh_qcow2("w.qcow2", "4M", d);
    let out = run(
        QCSIM,
        &[
            "bench",
            "-c",
            "64",
            "-d",
            "8",
            "-s",
            "4k",
            "-w",
            "--pattern",
            "0x5a",
            "w.qcow2",
        ],
        d,
    );
    assert!(
        out.starts_with(
            "Sending 64 write requests, 4096 bytes each, 8 in parallel (starting at offset 0, step size 4096)\nRun completed in "
        ),
        "{out}"
    );
    assert!(out.contains("IOPS"), "{out}");
    // 64 guest writes of 4 KiB, and the device saw them all.
    assert!(out.contains(" 64 writes"), "{out}");
    assert_clean("w.qcow2", d);
    assert_pattern("w.qcow2", "qcow2", 0x5a, 0, 256 << 10, d);
    assert_pattern("w.qcow2", "qcow2", 0, 256 << 10, (4 << 20) - (256 << 10), d);
}

#[test]
fn a_tiny_read_run_checks_the_pattern_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fresh_qcow2("r.qcow2", "4M", d);
    run(
        "qemu-io",
        &["-f", "qcow2", "-c", "write -P 0x3c 0 1M", "r.qcow2"],
        d,
    );
    let before = std::fs::read(d.join("r.qcow2")).unwrap();
    let out = run(
        QCSIM,
        &[
            "bench",
            "-c",
            "64",
            "-d",
            "8",
            "-s",
            "4k",
            "-S",
            "8k",
            "--pattern",
            "0x3c",
            "r.qcow2",
        ],
        d,
    );
    assert!(
        out.starts_with("Sending 64 read requests, 4096 bytes each, 8 in parallel (starting at offset 0, step size 8192)"),
        "{out}"
    );
    assert!(out.contains(" 0 writes"), "{out}");
    assert_eq!(
        std::fs::read(d.join("r.qcow2")).unwrap(),
        before,
        "a read run wrote"
    );
    assert_clean("r.qcow2", d);
    // A read of anything but the pattern fails and says where.
    let out = exec(
        QCSIM,
        &["bench", "-c", "64", "-d", "8", "--pattern", "7", "r.qcow2"],
        d,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not the pattern 0x07"), "{err}");
}

#[test]
fn raw_files_are_benchmarked_directly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("disk.raw"), vec![0u8; 1 << 20]).unwrap();
    let out = run(
        QCSIM,
        &[
            "bench",
            "-f",
            "raw",
            "-c",
            "64",
            "-d",
            "8",
            "-w",
            "--pattern",
            "200",
            "-o",
            "64k",
            "disk.raw",
        ],
        d,
    );
    assert!(out.contains("(raw write, cache=writeback)"), "{out}");
    assert!(!out.contains("Engine"), "{out}");
    assert_pattern("disk.raw", "raw", 200, 64 << 10, 256 << 10, d);
    assert_pattern("disk.raw", "raw", 0, 0, 64 << 10, d);
    assert_eq!(
        std::fs::metadata(d.join("disk.raw")).unwrap().len(),
        1 << 20
    );
}

/// Flushes follow qemu-img bench's rule: when the requests not yet sent are
/// a multiple of the interval, drain and flush (or, with --no-drain, flush
/// on every such completion without waiting).
#[test]
fn flush_interval_counts_like_qemu_img() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (extra, flushes) in [(None, 4), (Some("--no-drain"), 11)] {
        fresh_qcow2("f.qcow2", "4M", d);
        let mut args = vec![
            "bench",
            "-c",
            "64",
            "-d",
            "8",
            "-w",
            "--flush-interval",
            "16",
            "-t",
            "none",
            "f.qcow2",
        ];
        args.extend(extra);
        let out = run(QCSIM, &args, d);
        assert!(out.contains("Sending flush every 16 requests"), "{out}");
        let want = format!("Engine during the run: {flushes} guest flushes");
        assert!(out.contains(&want), "{extra:?}: {out}");
        assert_clean("f.qcow2", d);
        assert_pattern("f.qcow2", "qcow2", 0, 0, 4 << 20, d);
    }
}

#[test]
fn every_flag_parses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fresh_qcow2("a.qcow2", "4M", d);
    run(
        QCSIM,
        &[
            "bench",
            "-c",
            "32",
            "-d",
            "4",
            "-f",
            "qcow2",
            "-n",
            "-i",
            "threads",
            "-o",
            "4k",
            "-s",
            "8k",
            "-S",
            "16k",
            "-t",
            "writeback",
            "-w",
            "--pattern",
            "0x11",
            "--flush-interval",
            "8",
            "--no-drain",
            "-U",
            "-q",
            "--off",
            "delayed_cow",
            "a.qcow2",
        ],
        d,
    );
    let out = run(
        QCSIM,
        &[
            "bench",
            "--count=32",
            "--depth=4",
            "--format=qcow2",
            "--native",
            "--aio=io_uring",
            "--offset=0",
            "--buffer-size=4096",
            "--step-size=0",
            "--cache=none",
            "--write",
            "--pattern=17",
            "--flush-interval=8",
            "--force-share",
            "a.qcow2",
        ],
        d,
    );
    assert!(out.contains("step size 4096"), "{out}");
    assert_clean("a.qcow2", d);
    // -q printed nothing in the first run; the data of both is there.
    assert_pattern("a.qcow2", "qcow2", 0x11, 0, 128 << 10, d);
}

#[test]
fn bad_flags_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fresh_qcow2("b.qcow2", "1M", d);
    std::fs::write(d.join("junk.qcow2"), b"not an image at all").unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["-c", "0", "b.qcow2"], "request count"),
        (&["-c", "lots", "b.qcow2"], "-c lots"),
        (&["-d", "0", "b.qcow2"], "queue depth"),
        (&["-s", "0", "b.qcow2"], "buffer size"),
        (&["-s", "4q", "b.qcow2"], "-s 4q"),
        (&["-t", "directsync", "b.qcow2"], "not supported"),
        (&["-t", "fast", "b.qcow2"], "invalid cache mode"),
        (&["-f", "vmdk", "b.qcow2"], "'vmdk'"),
        (&["-i", "posix", "b.qcow2"], "aio"),
        (&["-w", "--pattern", "256", "b.qcow2"], "pattern"),
        (
            &["--flush-interval", "4", "b.qcow2"],
            "only available in write",
        ),
        (&["-o", "1M", "b.qcow2"], "does not fit"),
        (&["-s", "2M", "b.qcow2"], "does not fit"),
        (&["--off", "turbo", "b.qcow2"], "unknown switch"),
        (
            &["-f", "raw", "--off", "zero_cow", "b.qcow2"],
            "qcow2 images only",
        ),
        (&["-d", "65536", "-s", "1M", "b.qcow2"], "limit"),
        (&[], "expecting one image file name"),
        (&["--sim", "b.qcow2"], "takes no file name"),
        (&["--json", "b.qcow2"], "--sim"),
        (&["missing.qcow2"], "no such file"),
        (&["-f", "qcow2", "junk.qcow2"], "junk.qcow2"),
    ];
    for (args, words) in cases {
        let mut all = vec!["bench"];
        all.extend_from_slice(args);
        let out = exec(QCSIM, &all, d);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with("qcsim: "), "{args:?}: {err}");
        assert!(err.contains(words), "{args:?}: wanted '{words}' in {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn compare_qemu_prints_both_and_leaves_no_copy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fresh_qcow2("c.qcow2", "4M", d);
    let out = run(
        QCSIM,
        &[
            "bench",
            "-c",
            "64",
            "-d",
            "8",
            "-w",
            "--pattern",
            "9",
            "--compare-qemu",
            "c.qcow2",
        ],
        d,
    );
    assert!(
        out.contains("qemu-img bench -f qcow2 -t writeback -c 64 -d 8"),
        "{out}"
    );
    assert_eq!(out.matches("Run completed in").count(), 2, "{out}");
    assert!(out.contains("speed ratio qcsim/qemu-img"), "{out}");
    let names: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["c.qcow2"]);
    assert_clean("c.qcow2", d);
    assert_pattern("c.qcow2", "qcow2", 9, 0, 256 << 10, d);
}

/// An overlay over a raw backing file of another pattern: every request
/// writes 4 KiB at the start of a 64 KiB cluster, so each allocation
/// copies the rest of its cluster from the backing file.
#[test]
fn overlays_are_written_through_with_copy_on_write_from_the_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run("qemu-img", &["create", "-q", "-f", "raw", "b.raw", "4M"], d);
    run(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 17 0 4M", "b.raw"],
        d,
    );
    run(
        "qemu-img",
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=64k",
            "-b",
            "b.raw",
            "-F",
            "raw",
            "o.qcow2",
        ],
        d,
    );
    let out = run(
        QCSIM,
        &[
            "bench",
            "-c",
            "16",
            "-d",
            "4",
            "-s",
            "4k",
            "-S",
            "64k",
            "-w",
            "--pattern",
            "0x5a",
            "o.qcow2",
        ],
        d,
    );
    assert!(
        out.contains(" 16 writes") || out.contains("writes"),
        "{out}"
    );
    assert_clean("o.qcow2", d);
    for c in 0..16u64 {
        assert_pattern("o.qcow2", "qcow2", 0x5a, c << 16, 4096, d);
        assert_pattern("o.qcow2", "qcow2", 17, (c << 16) + 4096, 60 << 10, d);
    }
    // Past the clusters written, the backing file shows through.
    assert_pattern("o.qcow2", "qcow2", 17, 1 << 20, 3 << 20, d);
    // The backing file itself is untouched.
    assert_pattern("b.raw", "raw", 17, 0, 4 << 20, d);
}

#[test]
fn an_overlay_whose_backing_file_is_missing_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &[
            "create", "-q", "-f", "qcow2", "-u", "-b", "gone.raw", "-F", "raw", "o.qcow2", "4M",
        ],
        d,
    );
    let out = exec(QCSIM, &["bench", "-c", "4", "-w", "o.qcow2"], d);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("o.qcow2: backing file gone.raw"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
