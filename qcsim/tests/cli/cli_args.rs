//! The file commands' argument handling, through the real `qcsim` binary:
//! every bad flag, size, option or command gets a clear message and a
//! non-zero exit, and none of them touches the image.

use std::path::Path;
use std::process::{Command, Output};

fn qcsim(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run qcsim")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run, expect exit code 1, and return stdout + stderr for matching.
fn fails(args: &[&str], dir: &Path) -> String {
    let out = qcsim(args, dir);
    let (o, e) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}\nstdout: {o}\nstderr: {e}"
    );
    format!("{o}{e}")
}

fn raw_image(dir: &Path, name: &str, len: usize) {
    std::fs::write(dir.join(name), vec![0x5a; len]).unwrap();
}

#[test]
fn io_refuses_bad_commands_and_numbers() {
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "d.raw", 65536);
    let cases: [(&str, &str); 8] = [
        ("bogus 0 1", "command \"bogus\" not found"),
        ("read 0 12q", "unrecognized suffix -- 12q"),
        ("read 0x 1", "unrecognized suffix -- 0x"),
        ("write -P 300 0 1", "300 is not a valid pattern byte"),
        ("write -u 0 512", "-u requires -z"),
        ("read 0", "expected 2 arguments"),
        ("read -k 0 1", "invalid option -- 'k'"),
        ("write 0 3G", "length cannot exceed"),
    ];
    for (cmd, needle) in cases {
        let all = fails(&["io", "-f", "raw", "-c", cmd, "d.raw"], dir.path());
        assert!(all.contains(needle), "{cmd}: {all}");
    }
    // None of them changed the image.
    assert!(std::fs::read(dir.path().join("d.raw"))
        .unwrap()
        .iter()
        .all(|&b| b == 0x5a));
}

#[test]
fn io_bad_command_does_not_stop_the_next_ones() {
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "d.raw", 65536);
    let out = qcsim(
        &["io", "-c", "nope", "-c", "write -P 7 0 512", "d.raw"],
        dir.path(),
    );
    let (o, e) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(e.contains("command \"nope\" not found"), "{e}");
    assert_eq!(
        crate::support::untimed(&o),
        "wrote 512/512 bytes at offset 0\n512 bytes, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n"
    );
    assert_eq!(
        std::fs::read(dir.path().join("d.raw")).unwrap()[..512],
        [7; 512]
    );
}

#[test]
fn io_reads_commands_from_stdin_without_c() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "d.raw", 65536);
    let mut child = Command::new(env!("CARGO_BIN_EXE_qcsim"))
        .args(["io", "d.raw"])
        .current_dir(dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"write -P 0x33 1k 1k\n\nread -P 0x33 1k 1k\nflush\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    // A prompt before each line read, the blank one and the end of input
    // included, as qemu-io prints them whatever standard input is.
    assert_eq!(
        crate::support::untimed(&String::from_utf8_lossy(&out.stdout)),
        "qemu-io> wrote 1024/1024 bytes at offset 1024\n1 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n\
         qemu-io> qemu-io> read 1024/1024 bytes at offset 1024\n1 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n\
         qemu-io> qemu-io> \n"
    );
}

#[test]
fn io_reports_pattern_mismatch_like_qemu_io() {
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "d.raw", 65536);
    let out = qcsim(&["io", "-c", "read -P 0x5b 4k 8k", "d.raw"], dir.path());
    let (o, _) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        crate::support::untimed(&o),
        "Pattern verification failed at offset 4096, 8192 bytes\n\
         read 8192/8192 bytes at offset 4096\n8 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n"
    );
    let out = qcsim(&["io", "-c", "read -P 0x5a 4k 8k", "d.raw"], dir.path());
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        crate::support::untimed(&text(&out).0),
        "read 8192/8192 bytes at offset 4096\n8 KiB, X ops; XX:XX:XX.X (XXX YYY/sec and XXX ops/sec)\n"
    );
}

#[test]
fn io_requests_past_the_end_fail() {
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "d.raw", 65536);
    let all = fails(&["io", "-c", "read 60k 8k", "d.raw"], dir.path());
    assert!(all.contains("read failed: Input/output error"), "{all}");
    let all = fails(&["io", "-c", "write 64k 1", "d.raw"], dir.path());
    assert!(all.contains("write failed"), "{all}");
    assert_eq!(
        std::fs::metadata(dir.path().join("d.raw")).unwrap().len(),
        65536
    );
}

#[test]
fn open_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let all = fails(&["io", "-c", "flush", "missing.img"], dir.path());
    assert!(all.contains("missing.img"), "{all}");
    std::fs::write(dir.path().join("v.vmdk"), b"KDMV\x01\0\0\0xxxx").unwrap();
    let all = fails(&["io", "-c", "flush", "v.vmdk"], dir.path());
    assert!(
        all.contains("vmdk") && all.contains("not supported"),
        "{all}"
    );
    let all = fails(&["info", "-f", "qcow3", "v.vmdk"], dir.path());
    assert!(all.contains("'qcow3'"), "{all}");
    raw_image(dir.path(), "d.raw", 512);
    let all = fails(&["info", "--output", "xml", "d.raw"], dir.path());
    assert!(all.contains("'xml'"), "{all}");
}

#[test]
fn create_refuses_bad_sizes_and_options() {
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "base.raw", 4096);
    let cases: [(&[&str], &str); 10] = [
        (&["create", "x.qcow2", "12q"], "'12q'"),
        (&["create", "x.qcow2"], "needs a size"),
        (&["create", "-o", "bogus=1", "x.qcow2", "1M"], "'bogus'"),
        (
            &["create", "-o", "cluster_size=3000", "x.qcow2", "1M"],
            "power of two",
        ),
        (
            &["create", "-o", "lazy_refcounts=maybe", "x.qcow2", "1M"],
            "'on' or 'off'",
        ),
        (
            &[
                "create",
                "-o",
                "compat=0.10,refcount_bits=8",
                "x.qcow2",
                "1M",
            ],
            "compatibility level 1.1",
        ),
        (
            &["create", "-b", "base.raw", "x.qcow2"],
            "detected format of base.raw: add -F raw",
        ),
        (
            &["create", "-b", "base.raw", "-F", "vdi", "x.qcow2"],
            "'vdi'",
        ),
        (
            &["create", "-f", "raw", "-b", "base.raw", "x.raw", "1M"],
            "raw images",
        ),
        (&["create", "-f", "vpc", "x.vhd", "1M"], "'vpc'"),
    ];
    for (args, needle) in cases {
        let all = fails(args, dir.path());
        assert!(all.contains(needle), "{args:?}: {all}");
    }
}

#[test]
fn create_raw_makes_a_sparse_file_of_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = qcsim(&["create", "-f", "raw", "r.raw", "1.5M"], dir.path());
    assert_eq!(out.status.code(), Some(0), "{:?}", text(&out));
    assert_eq!(text(&out).0, "Formatting 'r.raw', fmt=raw size=1572864\n");
    assert_eq!(
        std::fs::metadata(dir.path().join("r.raw")).unwrap().len(),
        1572864
    );
    let help = qcsim(&["create", "-o", "help"], dir.path());
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help).0.contains("refcount_bits"));
}

#[test]
fn convert_refuses_bad_arguments() {
    let dir = tempfile::tempdir().unwrap();
    raw_image(dir.path(), "d.raw", 4096);
    let cases: [(&[&str], &str); 5] = [
        (&["convert", "-O", "vmdk", "d.raw", "o"], "'vmdk'"),
        (&["convert", "-m", "0", "d.raw", "o"], "-m must be"),
        (
            &["convert", "-O", "qcow2", "-o", "size=1M", "d.raw", "o"],
            "cannot be given",
        ),
        (
            &["convert", "-o", "cluster_size=4k", "d.raw", "o"],
            "raw output",
        ),
        (&["convert", "d.raw", "d.raw"], "same file"),
    ];
    for (args, needle) in cases {
        let all = fails(args, dir.path());
        assert!(all.contains(needle), "{args:?}: {all}");
    }
}
