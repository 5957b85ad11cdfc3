//! The file commands on images with an external data file and with zstd
//! compression, with QEMU as the oracle:
//! - `qcsim create -o data_file=...[,data_file_raw=on][,compression_type=zstd]`
//!   prints qemu-img's line, and `qcsim info` of the result equals
//!   `qemu-img info` (JSON and human);
//! - `qcsim io` writes into such images; `qemu-img check` finds them clean
//!   and `qemu-img convert` reads what an in-test model says, as does
//!   `qcsim convert -O raw`; a raw data file is the disk itself;
//! - images QEMU makes with a data file read through `qcsim convert`;
//! - `qcsim convert -O qcow2 -o data_file=...` output checks clean;
//! - a missing data file is an error naming it, except for `info`, which
//!   describes the image anyway, as `qemu-img info` does.
//!
//! QEMU opens a relative data file name from the working directory, so
//! every command runs in the test's directory, where the files are.

use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{assert_clean, exec, qcsim, run, QCSIM};

fn raw_of(tool: &str, image: &str, dir: &Path) -> Vec<u8> {
    let out = format!("{image}.{tool}.raw");
    match tool {
        "qemu-img" => run("qemu-img", &["convert", "-O", "raw", image, &out], dir),
        _ => run(QCSIM, &["convert", "-O", "raw", image, &out], dir),
    };
    std::fs::read(dir.join(out)).unwrap()
}

#[test]
fn create_and_info_match_qemu_img() {
    let mine = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    for opts in [
        "data_file=d.raw",
        "data_file=d.raw,data_file_raw=on,cluster_size=4k",
        "data_file=d.raw,data_file_raw=off,compression_type=zstd",
        "compression_type=zstd,cluster_size=16k",
    ] {
        let args = ["create", "-f", "qcow2", "-o", opts, "i.qcow2", "3M"];
        let ours = qcsim(&args, mine.path());
        let want = String::from_utf8(run("qemu-img", &args, theirs.path()).stdout).unwrap();
        assert_eq!(ours, want, "{opts}: the Formatting line");
        if opts.contains("data_file=") {
            let len = std::fs::metadata(mine.path().join("d.raw")).unwrap().len();
            assert_eq!(len, 3 << 20, "{opts}: data file sized to the disk");
        }
        // Both tools describe the image qcsim made alike.
        let d = mine.path();
        let ours: serde_json::Value =
            serde_json::from_str(&qcsim(&["info", "--output", "json", "i.qcow2"], d)).unwrap();
        let want: serde_json::Value = serde_json::from_slice(
            &run("qemu-img", &["info", "--output", "json", "i.qcow2"], d).stdout,
        )
        .unwrap();
        assert_eq!(ours, want, "{opts}");
        let ours = qcsim(&["info", "i.qcow2"], d);
        let want = String::from_utf8(run("qemu-img", &["info", "i.qcow2"], d).stdout).unwrap();
        assert_eq!(ours, want, "{opts}");
        assert_clean("i.qcow2", d);
    }
}

/// Seeded writes, zeroes and discards through `qcsim io`, applied to a
/// model of the disk too.
fn io_workload(image: &str, size: u64, cluster: u64, seed: u64, dir: &Path) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut model = vec![0u8; size as usize];
    let mut cmds = vec![format!("write -P 0x77 0 {}", cluster + 512)];
    model[..(cluster + 512) as usize].fill(0x77);
    for i in 0..30u64 {
        let len = rng.gen_range(1..=3 * cluster / 512) * 512;
        let off = rng.gen_range(0..(size - len) / 512) * 512;
        let r = off as usize..(off + len) as usize;
        match rng.gen_range(0..6) {
            0..=3 => {
                let pat = 0x10 + i as u8;
                cmds.push(format!("write -P {pat} {off} {len}"));
                model[r].fill(pat);
            }
            4 => {
                cmds.push(format!("write -z {off} {len}"));
                model[r].fill(0);
            }
            _ => {
                cmds.push(format!("discard {off} {len}"));
                let (s, e) = (
                    off.next_multiple_of(cluster),
                    (off + len) / cluster * cluster,
                );
                if s < e {
                    model[s as usize..e as usize].fill(0);
                }
            }
        }
    }
    cmds.push("flush".into());
    let mut args = vec!["io"];
    for c in &cmds {
        args.extend(["-c", c.as_str()]);
    }
    args.push(image);
    qcsim(&args, dir);
    model
}

#[test]
fn qcsim_writes_data_file_images_that_qemu_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (n, opts) in [
        "cluster_size=4k,data_file=a.data",
        "cluster_size=64k,data_file=b.data,data_file_raw=on",
        "cluster_size=4k,data_file=c.data,compression_type=zstd",
    ]
    .iter()
    .enumerate()
    {
        let image = format!("w{n}.qcow2");
        let cluster = if opts.contains("64k") { 65536 } else { 4096 };
        qcsim(&["create", "-q", "-o", opts, &image, "4M"], d);
        let model = io_workload(&image, 4 << 20, cluster, n as u64, d);
        assert_clean(&image, d);
        assert!(raw_of("qemu-img", &image, d) == model, "{opts}: qemu-img");
        assert!(raw_of("qcsim", &image, d) == model, "{opts}: qcsim");
        if opts.contains("data_file_raw=on") {
            let data = std::fs::read(d.join("b.data")).unwrap();
            assert!(data == model, "{opts}: the raw data file is the disk");
        }
    }
}

#[test]
fn qemu_made_data_file_images_read_through_qcsim() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        "qemu-img",
        &[
            "create",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=4k",
            "base.qcow2",
            "4M",
        ],
        d,
    );
    run("qemu-io", &["-c", "write -P 0x5c 0 4M", "base.qcow2"], d);
    for (image, opts, backing) in [
        ("q1.qcow2", "data_file=q1.data", false),
        ("q2.qcow2", "data_file=q2.data,data_file_raw=on", false),
        ("q3.qcow2", "data_file=q3.data,cluster_size=4k", true),
    ] {
        let mut args = vec!["create", "-q", "-f", "qcow2", "-o", opts];
        if backing {
            args.extend(["-b", "base.qcow2", "-F", "qcow2"]);
        }
        args.extend([image, "4M"]);
        run("qemu-img", &args, d);
        run(
            "qemu-io",
            &[
                "-c",
                "write -P 0x21 0 70k",
                "-c",
                "write -z 8k 4k",
                "-c",
                "discard 64k 64k",
                "-c",
                "write -P 0x42 1000k 3k",
                image,
            ],
            d,
        );
        assert!(
            raw_of("qcsim", image, d) == raw_of("qemu-img", image, d),
            "{opts}"
        );
        // qcsim writes into it; QEMU still finds it clean.
        qcsim(&["io", "-c", "write -P 0x63 5k 10k", image], d);
        assert_clean(image, d);
        assert!(raw_of("qcsim", image, d) == raw_of("qemu-img", image, d));
    }
}

#[test]
fn convert_to_a_data_file_image() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "src.qcow2", "3M"], d);
    let model = io_workload("src.qcow2", 3 << 20, 65536, 9, d);
    qcsim(
        &[
            "convert",
            "-O",
            "qcow2",
            "-o",
            "data_file=dst.data,cluster_size=4k",
            "src.qcow2",
            "dst.qcow2",
        ],
        d,
    );
    assert_clean("dst.qcow2", d);
    assert!(raw_of("qemu-img", "dst.qcow2", d) == model);
    let meta = std::fs::metadata(d.join("dst.qcow2")).unwrap().len();
    assert!(
        meta < 1 << 20,
        "the image holds metadata only ({meta} bytes)"
    );
}

#[test]
fn a_missing_data_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(
        &["create", "-q", "-o", "data_file=gone.data", "m.qcow2", "1M"],
        d,
    );
    std::fs::remove_file(d.join("gone.data")).unwrap();
    for args in [
        vec!["io", "-c", "read 0 512", "m.qcow2"],
        vec!["convert", "-O", "raw", "m.qcow2", "m.raw"],
    ] {
        let out = exec(QCSIM, &args, d);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("'gone.data'"), "{args:?}: {err}");
    }
    let ours = qcsim(&["info", "--output", "json", "m.qcow2"], d);
    let want = run("qemu-img", &["info", "--output", "json", "m.qcow2"], d).stdout;
    let ours: serde_json::Value = serde_json::from_str(&ours).unwrap();
    let want: serde_json::Value = serde_json::from_slice(&want).unwrap();
    assert_eq!(ours, want);
}
