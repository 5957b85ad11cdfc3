//! Images QEMU makes, read and written by the engine: every cluster size,
//! refcount width and compat level, backing chains, zero and discarded
//! clusters, compressed clusters, internal snapshots, and lazy-refcount
//! images left dirty by `qemu-io -c abort`. `qemu-img convert -O raw` is
//! the reference for what the guest sees, `qemu-img check` for consistency.

use std::path::{Path, PathBuf};
use std::process::Command;

use engine::dev::MemDev;
use engine::{Backing, EngineOptions, Image};
use futures::executor::block_on;

use crate::support::{assert_clean, qemu_create, qemu_io, qemu_raw, tool};

/// Open an image file and its backing chain through the engine, on
/// in-memory copies of the files.
fn open_chain(path: &Path, opts: EngineOptions) -> Image<MemDev> {
    let dev = MemDev::from_bytes(std::fs::read(path).unwrap());
    let mut img = block_on(Image::open(dev, opts)).expect("engine opens the image");
    if let Some((name, fmt)) = img.backing_spec() {
        let p = PathBuf::from(&name);
        let p = if p.is_absolute() {
            p
        } else {
            path.parent().unwrap().join(p)
        };
        let b = if fmt.as_deref() == Some("raw") {
            Backing::Raw(MemDev::from_bytes(std::fs::read(&p).unwrap()))
        } else {
            let ro = EngineOptions {
                read_only: true,
                ..Default::default()
            };
            Backing::Qcow2(Box::new(open_chain(&p, ro)))
        };
        img.attach_backing(b);
    }
    img
}

fn engine_raw(path: &Path) -> Vec<u8> {
    let img = open_chain(
        path,
        EngineOptions {
            read_only: true,
            ..Default::default()
        },
    );
    let mut buf = vec![0u8; img.virtual_size() as usize];
    block_on(img.read(0, &mut buf)).expect("engine reads the image");
    buf
}

/// Writes, zeroes and discards spread over the disk, as qemu-io commands.
fn scribble(img: &Path, size: u64, cs: u64) -> Vec<String> {
    let mut cmds = vec![];
    let mut off = 0u64;
    let mut i = 0u64;
    while off + 3 * cs < size && i < 40 {
        let c = match i % 5 {
            0 => format!("write -P {} {} {}", 0x11 + i, off + 512, cs + 1024),
            1 => format!("write -P {} {} {}", 0x40 + i, off, 2 * cs),
            2 => format!("write -z {} {}", off, cs),
            3 => format!("write -z -u {} {}", off, 2 * cs),
            _ => format!("discard {} {}", off, cs),
        };
        cmds.push(c);
        off += (size / 37).next_multiple_of(512) + cs;
        i += 1;
    }
    // Overwrite some of what was zeroed or discarded.
    cmds.push(format!("write -P 0xa5 {} {}", cs / 2, cs));
    qemu_io(img, &cmds);
    cmds
}

#[test]
fn engine_reads_what_qemu_wrote_across_the_option_matrix() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for cs in [512u64, 1024, 4096, 16384, 65536, 1 << 20, 2 << 20] {
        for (rb, compat) in [
            (1u32, "1.1"),
            (8, "1.1"),
            (16, "0.10"),
            (16, "1.1"),
            (64, "1.1"),
        ] {
            n += 1;
            let size = if cs >= 1 << 20 { 32u64 << 20 } else { 4 << 20 };
            let img = dir.path().join(format!("m{n}.qcow2"));
            qemu_create(
                &img,
                &format!("cluster_size={cs},refcount_bits={rb},compat={compat}"),
                &size.to_string(),
                None,
            );
            scribble(&img, size, cs);
            assert!(
                engine_raw(&img) == qemu_raw(&img),
                "cluster_size={cs} refcount_bits={rb} compat={compat}"
            );
        }
    }
}

#[test]
fn backing_chains_of_qcow2_and_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = d.join("base.raw");
    let size = 6u64 << 20;
    // A raw base shorter than the overlays: reads past its end are zero.
    let base_data: Vec<u8> = (0..(size - (1 << 20)))
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    std::fs::write(&base, &base_data).unwrap();
    let mid = d.join("mid.qcow2");
    qemu_create(
        &mid,
        "cluster_size=4096",
        &size.to_string(),
        Some(("base.raw", "raw")),
    );
    qemu_io(
        &mid,
        &[
            "write -P 0x33 1000 9000".into(),
            "write -z 65536 65536".into(),
            "discard 131072 4096".into(),
        ],
    );
    let top = d.join("top.qcow2");
    qemu_create(
        &top,
        "cluster_size=65536,compat=0.10",
        &size.to_string(),
        Some(("mid.qcow2", "qcow2")),
    );
    qemu_io(
        &top,
        &[
            "write -P 0x44 70000 100".into(),
            "write -P 0x45 5000000 200000".into(),
        ],
    );
    let top2 = d.join("top2.qcow2");
    qemu_create(&top2, "", &size.to_string(), Some(("top.qcow2", "qcow2")));
    for p in [&mid, &top, &top2] {
        assert!(engine_raw(p) == qemu_raw(p), "{}", p.display());
    }
    // The engine writes partial clusters over the chain: COW from backing.
    let img = open_chain(&top2, EngineOptions::default());
    let mut model = qemu_raw(&top2);
    for (i, (off, len)) in [
        (100u64, 5000u64),
        (65536 * 3 + 17, 70000),
        (size - 3000, 3000),
        (4_999_000, 9000),
    ]
    .into_iter()
    .enumerate()
    {
        let data = vec![0x70 + i as u8; len as usize];
        block_on(img.write(off, &data)).unwrap();
        model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }
    let mut all = vec![0u8; size as usize];
    block_on(img.read(0, &mut all)).unwrap();
    assert!(all == model);
    let dev = block_on(img.close()).unwrap();
    std::fs::write(&top2, dev.into_bytes()).unwrap();
    assert_clean(&top2, "top2");
    assert!(qemu_raw(&top2) == model);
}

#[test]
fn dirty_lazy_refcount_images_are_repaired_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("lazy.qcow2");
    qemu_create(&img, "lazy_refcounts=on,cluster_size=4096", "8M", None);
    // qemu-io dies of SIGABRT here, leaving the image dirty.
    let out = Command::new("qemu-io")
        .args([
            "-c",
            "write -P 0x5a 0 300000",
            "-c",
            "write -P 0x5b 4000000 8192",
            "-c",
            "abort",
            img.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let expect = qemu_raw(&img);
    let header = std::fs::read(&img).unwrap();
    let incompat = u64::from_be_bytes(header[72..80].try_into().unwrap());
    assert_eq!(incompat & 1, 1, "qemu-io abort left the dirty bit set");
    let image = open_chain(&img, EngineOptions::default());
    let dev = block_on(image.close()).unwrap();
    std::fs::write(&img, dev.into_bytes()).unwrap();
    assert_clean(&img, "img");
    assert!(qemu_raw(&img) == expect);
    let header = std::fs::read(&img).unwrap();
    assert_eq!(
        u64::from_be_bytes(header[72..80].try_into().unwrap()) & 1,
        0,
        "dirty bit cleared"
    );
}

#[test]
fn compressed_clusters_read_and_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.qcow2");
    qemu_create(&src, "", "4M", None);
    qemu_io(
        &src,
        &["write -P 0x61 0 1M".into(), "write -P 0x62 2M 100k".into()],
    );
    let comp = dir.path().join("comp.qcow2");
    tool(
        "qemu-img",
        &[
            "convert",
            "-c",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=65536",
            src.to_str().unwrap(),
            comp.to_str().unwrap(),
        ],
    );
    assert!(engine_raw(&comp) == qemu_raw(&comp));
    let mut model = qemu_raw(&comp);
    let img = open_chain(&comp, EngineOptions::default());
    for (off, len) in [(1000u64, 2000u64), (65536 * 2, 65536), (2 << 20, 10)] {
        let data = vec![0xc3u8; len as usize];
        block_on(img.write(off, &data)).unwrap();
        model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }
    let dev = block_on(img.close()).unwrap();
    std::fs::write(&comp, dev.into_bytes()).unwrap();
    assert_clean(&comp, "comp");
    assert!(qemu_raw(&comp) == model);
}

#[test]
fn writes_to_images_with_internal_snapshots_copy_shared_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("snap.qcow2");
    qemu_create(&img, "cluster_size=4096", "2M", None);
    qemu_io(&img, &["write -P 0x10 0 1M".into()]);
    tool("qemu-img", &["snapshot", "-c", "s1", img.to_str().unwrap()]);
    let before = qemu_raw(&img);
    let mut model = before.clone();
    let image = open_chain(&img, EngineOptions::default());
    for (off, len) in [
        (100u64, 200u64),
        (8192, 4096),
        (500_000, 300_000),
        (1_500_000, 4096),
    ] {
        let data = vec![0x99u8; len as usize];
        block_on(image.write(off, &data)).unwrap();
        model[off as usize..(off + len) as usize].copy_from_slice(&data);
    }
    block_on(image.discard(40960, 8192)).unwrap();
    model[40960..40960 + 8192].fill(0);
    let dev = block_on(image.close()).unwrap();
    std::fs::write(&img, dev.into_bytes()).unwrap();
    assert_clean(&img, "img");
    assert!(qemu_raw(&img) == model);
    // The snapshot still holds the old data.
    let snap_raw = dir.path().join("s1.raw");
    tool(
        "qemu-img",
        &[
            "convert",
            "-l",
            "snapshot.name=s1",
            "-O",
            "raw",
            img.to_str().unwrap(),
            snap_raw.to_str().unwrap(),
        ],
    );
    assert!(std::fs::read(snap_raw).unwrap() == before);
}
