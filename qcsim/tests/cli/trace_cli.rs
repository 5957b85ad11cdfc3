//! `qcsim trace import` and `qcsim trace run` from the command line: the
//! recorded fixtures imported, a trace replayed with crashes (what it
//! checked, its time and peak memory printed), the saved case replayed to
//! the same trace hash, and bad input refused with the line or limit named
//! and nothing destroyed.

use std::path::{Path, PathBuf};

use super::support::{exec, text, QCSIM};

/// A fixture of the importer's tests (sim/tests/sim/traces/).
fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sim/tests/sim/traces")
        .join(name);
    p.to_str().unwrap().to_string()
}

/// Run qcsim in `dir`: (exit code, stdout, stderr).
fn qcsim(args: &[&str], dir: &Path) -> (i32, String, String) {
    let out = exec(QCSIM, args, dir);
    let code = out.status.code().unwrap_or(-1);
    assert!(code == 0 || code == 1, "{}", text(&out));
    (
        code,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `qcsim trace import strace INPUT -o OUTPUT` in `dir`.
fn import_strace(input: &str, output: &str, dir: &Path) -> (i32, String, String) {
    qcsim(&["trace", "import", "strace", input, "-o", output], dir)
}

/// The `trace hash: ...` line of a run's output.
fn hash_line(out: &str) -> &str {
    out.lines()
        .find(|l| l.starts_with("trace hash: "))
        .unwrap_or_else(|| panic!("no trace hash in {out}"))
}

#[test]
fn import_strace_then_run_with_crashes_then_replay() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, out, err) = qcsim(
        &[
            "trace",
            "import",
            "strace",
            &fixture("mke2fs.strace"),
            "-o",
            "mke2fs.trace",
        ],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("165 requests written to mke2fs.trace"),
        "{out}"
    );
    let trace = std::fs::read_to_string(d.join("mke2fs.trace")).unwrap();
    assert!(
        trace.starts_with("# qcsim trace import strace mke2fs.strace: 166 lines, 165 requests\n")
    );
    assert_eq!(trace.lines().filter(|l| !l.starts_with('#')).count(), 165);
    assert!(trace.contains("\nd 0 16777216\n"), "{trace}");

    let run = [
        "trace",
        "run",
        "mke2fs.trace",
        "--size",
        "16M",
        "--seed",
        "4",
        "--crashes",
        "3",
        "--crash-after-flush",
        "--depth",
        "4",
        "-o",
        "cluster_size=16k",
        "--save",
        "case.json",
    ];
    let (code, out, err) = qcsim(&run, d);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("trace mke2fs.trace: 165 requests"), "{out}");
    assert!(out.contains("3 crashes drawn from seed 4"), "{out}");
    assert!(out.contains("seed 4 (custom): PASS"), "{out}");
    assert!(out.contains(" crash states ("), "{out}");
    assert!(out.contains("s wall; peak memory "), "{out}");
    assert!(out.contains("MiB (maxrss)"), "{out}");
    // No progress bar when standard error is not a terminal.
    assert!(err.is_empty(), "{err}");

    let (code, replayed, err) = qcsim(&["replay", "case.json"], d);
    assert_eq!(code, 0, "{replayed}{err}");
    assert_eq!(hash_line(&replayed), hash_line(&out));
    // And the run itself is a function of its arguments.
    let (_, again, _) = qcsim(&run, d);
    assert_eq!(hash_line(&again), hash_line(&out));
}

#[test]
fn compressed_input_is_read_by_its_magic_bytes_whatever_its_name() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A gzip-compressed recording, named as a plain one.
    let plain = std::fs::read(fixture("mke2fs.strace")).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    std::fs::write(d.join("rec.strace"), gz.finish().unwrap()).unwrap();
    let (code, out, err) = import_strace("rec.strace", "t", d);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("166 lines read, 165 requests written to t"),
        "{out}"
    );
    // A zstd trace named .txt runs.
    std::fs::copy(fixture("sqlite.trace.zst"), d.join("sqlite.txt")).unwrap();
    let (code, out, err) = qcsim(&["trace", "run", "sqlite.txt", "--size", "64M"], d);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("trace sqlite.txt: 14042 requests (13739 writes"),
        "{out}"
    );
    assert!(out.contains(": PASS"), "{out}");
    // A truncated one is refused, naming the file.
    let z = std::fs::read(fixture("sqlite.trace.zst")).unwrap();
    std::fs::write(d.join("cut.zst"), &z[..z.len() / 2]).unwrap();
    let (code, out, err) = qcsim(&["trace", "run", "cut.zst", "--size", "64M"], d);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("cut.zst: reading the input: zstd input does not decompress"),
        "{err}"
    );
}

#[test]
fn import_strace_needs_the_descriptor_of_a_recording_of_two_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let args = [
        "trace",
        "import",
        "strace",
        &fixture("writer.strace"),
        "-o",
        "w.trace",
    ];
    let (code, _, err) = qcsim(&args, d);
    assert_eq!(code, 1);
    assert!(
        err.contains("file descriptors 3, 4: choose the image file's with --fd"),
        "{err}"
    );
    assert!(!d.join("w.trace").exists());
    let (code, out, err) = qcsim(&[&args[..], &["--fd", "3"]].concat(), d);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("left out: 1 failed calls"), "{out}");
    let (code, out, err) = qcsim(
        &["trace", "run", "w.trace", "--size", "4M", "--crashes", "2"],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn import_blkparse_queued_or_completed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let input = fixture("ext4-commit.blkparse");
    let (code, out, err) = qcsim(&["trace", "import", "blkparse", &input, "-o", "q.trace"], d);
    assert_eq!(code, 0, "{out}{err}");
    // 11: the FUA commit block (`FWFS`) is a flush and a FUA write (12
    // while FUA was read as a flush after its write).
    assert!(out.contains("11 requests written to q.trace"), "{out}");
    assert!(out.contains(", 2 flushes; 1 FUA requests"), "{out}");
    let (code, out, err) = qcsim(
        &[
            "trace", "import", "blkparse", &input, "--event", "c", "--device", "8,16", "-o",
            "c.trace",
        ],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("left out: 1 completions with an error"),
        "{out}"
    );
    let (code, out, err) = qcsim(
        &[
            "trace",
            "run",
            "q.trace",
            "--size",
            "16M",
            "--crashes",
            "2",
            "--switches",
            "0",
        ],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("PASS"), "{out}");
}

/// The number after `label` in `out` (`FUA requests: 12 returned`).
fn number_after(out: &str, label: &str) -> u64 {
    let at = out
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in {out}"));
    let digits: String = out[at + label.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in {out}"))
}

#[test]
fn blkparse_fua_requests_import_and_run_as_fua() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A journal's pattern, as blkparse prints it: data writes, then a
    // commit block with a preflush and FUA (`FWFS`), eight times, with a
    // FUA write without preflush (`WFS`) and a FUA discard (`DF`) among
    // them.
    let mut rec = String::new();
    let mut seq = 0;
    let mut event = |rwbs: &str, sector: u64, sectors: u64| {
        seq += 1;
        rec.push_str(&format!(
            "  8,16   1 {seq:8} {:5}.{:09} 4162  Q {rwbs:>3} {sector} + {sectors} [jbd2/sdb-8]\n",
            seq / 1000,
            seq % 1000
        ));
    };
    let journal = 2048;
    for commit in 0..8 {
        let base = journal + commit * 64;
        event("WS", base, 16);
        event("WS", base + 16, 16);
        event("FWFS", base + 32, 8);
    }
    event("WFS", 8192, 8);
    event("DF", 16384, 64);
    std::fs::write(d.join("journal.blkparse"), rec).unwrap();

    let (code, out, err) = qcsim(
        &[
            "trace",
            "import",
            "blkparse",
            "journal.blkparse",
            "-o",
            "j.trace",
        ],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
    // Every F after the operation letter is the request's FUA flag: 8
    // commit blocks, the WFS write and the discard; each FWFS also has
    // its preflush.
    assert!(out.contains("; 10 FUA requests"), "{out}");
    assert!(out.contains(", 8 flushes"), "{out}");
    let trace = std::fs::read_to_string(d.join("j.trace")).unwrap();
    assert_eq!(trace.lines().filter(|l| l.ends_with(" fua")).count(), 10);
    assert!(trace.contains("\nd 8388608 32768 fua\n"), "{trace}");

    let (code, out, err) = qcsim(
        &[
            "trace",
            "run",
            "j.trace",
            "--size",
            "16M",
            "--crashes",
            "8",
            "--seed",
            "2",
        ],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": PASS"), "{out}");
    assert!(out.contains("8 crashes drawn from seed 2"), "{out}");
    let returned = number_after(&out, "FUA requests: ");
    let planned = number_after(&out, " returned of ");
    assert_eq!(planned, 10, "{out}");
    // Crashes cut some windows short, so fewer may return, but FUA
    // requests ran and reached the disk as FUA writes.
    assert!(returned > 0 && returned <= planned, "{out}");
    assert!(number_after(&out, "the simulated disks saw ") > 0, "{out}");
}

#[test]
fn dsync_writer_strace_imports_and_runs_its_fua_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, out, err) = import_strace(&fixture("dsync-writer.strace"), "ds.trace", d);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("descriptors opened with O_DSYNC or O_SYNC"),
        "{out}"
    );
    let fua = number_after(&out, " flushes; ");
    assert!(fua > 0, "{out}");
    let (code, out, err) = qcsim(
        &["trace", "run", "ds.trace", "--size", "4M", "--crashes", "2"],
        d,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(": PASS"), "{out}");
    assert_eq!(number_after(&out, " returned of "), fua, "{out}");
}

#[test]
fn bad_traces_name_the_line_or_the_limit_and_destroy_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("bad.trace"), "w 0 4096\n# fine\nw 0 x\n").unwrap();
    let (code, _, err) = qcsim(&["trace", "run", "bad.trace", "--size", "1M"], d);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "qcsim: bad.trace: line 3: length \"x\" is not a decimal number below 2^64"
    );
    let (code, _, err) = qcsim(
        &["trace", "run", &fixture("mke2fs.strace"), "--size", "16M"],
        d,
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("line 1: unknown request \"")
            && err.contains(
                "expected w, r, z, d or f (a recording? `qcsim trace import strace|blkparse` \
                 makes a trace of it)"
            ),
        "{err}"
    );
    std::fs::write(d.join("ok.trace"), "w 0 4096\nf\nw 1048576 512\n").unwrap();
    let (code, _, err) = qcsim(&["trace", "run", "ok.trace", "--size", "1M"], d);
    assert_eq!(code, 1);
    assert!(
        err.contains("line 3: `w 1048576 512` ends at byte 1049088, past the end"),
        "{err}"
    );
    let (code, _, err) = qcsim(&["trace", "run", "ok.trace", "--size", "2T"], d);
    assert_eq!(code, 1);
    assert!(
        err.contains(
            "at most 1099511627776 bytes, the harness's largest virtual disk (case::MAX_VIRTUAL_SIZE)"
        ),
        "{err}"
    );
    let (code, _, err) = qcsim(
        &["trace", "run", "ok.trace", "--size", "2M", "--depth", "65"],
        d,
    );
    assert_eq!(code, 1);
    assert!(err.contains("depth 65: must be 1 to 64"), "{err}");

    // A failed import leaves the trace already there as it was, and
    // leaves no temporary file.
    std::fs::write(d.join("keep.trace"), "f\n").unwrap();
    std::fs::write(d.join("junk.strace"), "pwrite64(3, \"a\", 1, x) = 1\n").unwrap();
    let (code, _, err) = import_strace("junk.strace", "keep.trace", d);
    assert_eq!(code, 1);
    assert!(
        err.contains("junk.strace: line 1: pwrite64 offset \"x\" is not a number"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("keep.trace")).unwrap(),
        "f\n"
    );
    let names: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    // Nor does a recording become its own trace.
    std::fs::write(d.join("ok.strace"), "fsync(3) = 0\n").unwrap();
    let (code, _, err) = import_strace("ok.strace", "./ok.strace", d);
    assert_eq!(code, 1);
    assert!(
        err.contains("-o ./ok.strace: that is the recording itself"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("ok.strace")).unwrap(),
        "fsync(3) = 0\n"
    );
}
