//! `Image::block_status` on images QEMU makes agrees with `qemu-img map
//! --output=json`: data, zero clusters (written, discarded, unmapped),
//! compressed clusters, unallocated ranges, unallocated ranges over a
//! backing file (raw, shorter than the overlay; qcow2, asked in turn by
//! `block_status_deep`), and a seeded random mix of writes, zeroes and
//! discards made by `qemu-io`.
//!
//! How QEMU's answer maps onto ours: at depth 0, `present` and `data` mean
//! `Data`, `present` without `data` means `Zero`, not `present` means
//! `Unallocated`; at depth 1 or more the range comes from the backing file
//! (`Backing`). Through the chain (`block_status_deep`): `data` is `Data`,
//! `present` without it `Zero`, and not `present` `Unallocated`.

use std::path::{Path, PathBuf};

use engine::dev::MemDev;
use engine::{Backing, EngineOptions, Image, Status};
use futures::executor::block_on;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{qemu_create, tool};

fn qemu_io(fmt: &str, img: &Path, cmds: &[String]) {
    let mut args = vec!["-f".to_string(), fmt.to_string()];
    for c in cmds {
        args.push("-c".into());
        args.push(c.clone());
    }
    args.push(img.to_str().unwrap().into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    tool("qemu-io", &a);
}

/// Open an image and its backing chain through the engine, on in-memory
/// copies of the files.
fn open_chain(path: &Path) -> Image<MemDev> {
    let dev = MemDev::from_bytes(std::fs::read(path).unwrap());
    let ro = EngineOptions {
        read_only: true,
        ..EngineOptions::default()
    };
    let mut img = block_on(Image::open(dev, ro)).expect("engine opens the image");
    if let Some((name, fmt)) = img.backing_spec() {
        let p: PathBuf = path.parent().unwrap().join(name);
        let b = if fmt.as_deref() == Some("raw") {
            Backing::Raw(MemDev::from_bytes(std::fs::read(&p).unwrap()))
        } else {
            Backing::Qcow2(Box::new(open_chain(&p)))
        };
        img.attach_backing(b);
    }
    img
}

/// One entry of `qemu-img map --output=json`.
struct MapEntry {
    start: u64,
    length: u64,
    depth: u64,
    present: bool,
    data: bool,
}

fn qemu_map(path: &Path) -> Vec<MapEntry> {
    let out = tool(
        "qemu-img",
        &["map", "--output=json", path.to_str().unwrap()],
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| MapEntry {
            start: e["start"].as_u64().unwrap(),
            length: e["length"].as_u64().unwrap(),
            depth: e["depth"].as_u64().unwrap(),
            present: e["present"].as_bool().unwrap(),
            data: e["data"].as_bool().unwrap(),
        })
        .collect()
}

fn expected(e: &MapEntry, deep: bool) -> Status {
    if !deep && e.depth > 0 {
        return Status::Backing;
    }
    match (e.present, e.data) {
        (true, true) => Status::Data,
        (true, false) => Status::Zero,
        (false, _) => Status::Unallocated,
    }
}

/// Every byte of the image has the status QEMU's map implies; returns the
/// number of calls our side needed (a sanity bound on run merging).
fn assert_agrees(path: &Path, deep: bool) -> usize {
    let img = open_chain(path);
    let map = qemu_map(path);
    assert_eq!(
        map.iter().map(|e| e.length).sum::<u64>(),
        img.virtual_size(),
        "{}: map covers the disk",
        path.display()
    );
    let mut calls = 0;
    for e in &map {
        let want = expected(e, deep);
        let end = e.start + e.length;
        let mut pos = e.start;
        while pos < end {
            let (got, n) = if deep {
                block_on(img.block_status_deep(pos, end - pos)).unwrap()
            } else {
                block_on(img.block_status(pos, end - pos)).unwrap()
            };
            calls += 1;
            assert!(n > 0 && n <= end - pos, "{}: count {n}", path.display());
            assert_eq!(
                got,
                want,
                "{} (deep: {deep}): {pos}+{n} is {got:?}, qemu-img map says {want:?} for {}+{}",
                path.display(),
                e.start,
                e.length
            );
            pos += n;
        }
    }
    calls
}

#[test]
fn zero_discarded_compressed_and_unallocated_clusters() {
    let dir = tempfile::tempdir().unwrap();
    for (cs, compat) in [
        (65536u64, "1.1"),
        (4096, "1.1"),
        (512, "1.1"),
        (65536, "0.10"),
    ] {
        let path = dir.path().join(format!("img-{cs}-{compat}.qcow2"));
        qemu_create(
            &path,
            &format!("cluster_size={cs},compat={compat}"),
            "8M",
            None,
        );
        let c = |k: u64| k * cs;
        qemu_io(
            "qcow2",
            &path,
            &[
                format!("write -P 1 {} {}", c(1), c(3)),
                format!("write -z {} {}", c(2), c(1)),
                format!("write -z -u {} {}", c(5), c(2)),
                format!("write -P 2 {} {}", c(10), c(4)),
                format!("discard {} {}", c(11), c(2)),
                format!("write -c -P 3 {} {}", c(20), c(1)),
                format!("write -z {} {}", c(30), c(2)),
            ],
        );
        let calls = assert_agrees(&path, false);
        // Runs are reported whole, not cluster by cluster.
        assert!(calls < 40, "{}: {calls} calls", path.display());
    }
}

#[test]
fn overlay_on_a_short_raw_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.raw");
    std::fs::write(&base, vec![9u8; 2 << 20]).unwrap();
    let top = dir.path().join("top.qcow2");
    qemu_create(
        &top,
        "cluster_size=65536,backing_file=base.raw,backing_fmt=raw",
        "4M",
        None,
    );
    qemu_io(
        "qcow2",
        &top,
        &[
            "write -P 2 64k 64k".into(),
            "write -z 256k 128k".into(),
            "write -P 3 1M 128k".into(),
            "discard 1M 64k".into(),
            "write -z -u 3M 64k".into(),
        ],
    );
    assert_agrees(&top, false);
}

#[test]
fn overlay_on_a_qcow2_backing_file_deep_and_shallow() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.qcow2");
    qemu_create(&base, "cluster_size=65536", "2M", None);
    qemu_io(
        "qcow2",
        &base,
        &[
            "write -P 1 0 128k".into(),
            "write -z 128k 64k".into(),
            "write -c -P 4 192k 64k".into(),
            "write -P 5 1M 64k".into(),
        ],
    );
    let top = dir.path().join("top.qcow2");
    qemu_create(
        &top,
        "cluster_size=65536,backing_file=base.qcow2,backing_fmt=qcow2",
        "4M",
        None,
    );
    qemu_io(
        "qcow2",
        &top,
        &[
            "write -P 2 64k 64k".into(),
            "write -z 1M 64k".into(),
            "write -P 6 3M 64k".into(),
        ],
    );
    assert_agrees(&top, false);
    assert_agrees(&top, true);
}

#[test]
fn seeded_random_mix_over_a_qcow2_backing_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(0x5747);
    let cs = 4096u64;
    let clusters = 64u64;
    let ops = |rng: &mut ChaCha8Rng, n: usize| -> Vec<String> {
        (0..n)
            .map(|_| {
                let start = rng.gen_range(0..clusters) * cs;
                let len = rng.gen_range(1..=4u64).min(clusters - start / cs) * cs;
                match rng.gen_range(0..5) {
                    0 | 1 => format!("write -P {} {start} {len}", rng.gen_range(1..255)),
                    2 => format!("write -z {start} {len}"),
                    3 => format!("write -z -u {start} {len}"),
                    _ => format!("discard {start} {len}"),
                }
            })
            .collect()
    };
    let base = dir.path().join("base.qcow2");
    qemu_create(
        &base,
        "cluster_size=4096",
        &(clusters * cs).to_string(),
        None,
    );
    let base_ops = ops(&mut rng, 30);
    qemu_io("qcow2", &base, &base_ops);
    assert_agrees(&base, false);
    let top = dir.path().join("top.qcow2");
    qemu_create(
        &top,
        "cluster_size=4096,backing_file=base.qcow2,backing_fmt=qcow2",
        &(clusters * cs).to_string(),
        None,
    );
    let top_ops = ops(&mut rng, 30);
    qemu_io("qcow2", &top, &top_ops);
    assert_agrees(&top, false);
    assert_agrees(&top, true);
}
