//! The checker on images with an external data file (incompatible bit 2),
//! against `qemu-img check`: data clusters live in the data file and are
//! not refcounted in the image, guest cluster 0 maps at data offset 0
//! (offset 0 with COPIED), and compressed clusters are not allowed. Clean
//! images, leaks and corruptions must get the same exit code and counters
//! from both.

use std::path::Path;

use crate::check_support::{get64, project, put64, qemu_check, run_ok, Layout, Scratch};
use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

/// A QEMU-made image with its data file named by absolute path (QEMU
/// resolves relative data file names against the working directory).
fn qemu_image(s: &Scratch, name: &str, opts: &str, io: &[&str]) -> Vec<u8> {
    let img = s.path(&format!("{name}.qcow2"));
    let data = s.path(&format!("{name}.data"));
    let o = format!("{opts},data_file={}", data.display());
    let ip = img.to_str().expect("utf-8");
    run_ok(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "-o", &o, ip, "2M"],
    );
    let mut args = vec![];
    for c in io {
        args.extend(["-c", c]);
    }
    args.push(ip);
    run_ok("qemu-io", &args);
    std::fs::read(img).expect("read image")
}

/// An image the engine made and wrote, data file given by absolute path.
fn engine_image(s: &Scratch, name: &str, raw: bool) -> Vec<u8> {
    let data_path = s.path(&format!("{name}.data"));
    let o = CreateOptions {
        size: 2 << 20,
        cluster_size: 4096,
        data_file: Some(data_path.display().to_string()),
        data_file_raw: raw,
        ..Default::default()
    };
    let (dev, data) = (MemDev::new(), MemDev::new());
    block_on(Image::create_with_data(&dev, Some(&data), &o)).expect("create");
    let img = block_on(Image::open_with_data(
        dev,
        Some(data),
        EngineOptions::default(),
    ))
    .expect("open");
    block_on(img.write(0, &[1u8; 5000])).expect("write");
    block_on(img.write(1 << 20, &[2u8; 70000])).expect("write");
    block_on(img.write_zeroes(8192, 8192, true)).expect("zero");
    let (dev, data) = block_on(img.close_with_data()).expect("close");
    std::fs::write(&data_path, data.expect("data device").into_bytes()).expect("write data");
    dev.into_bytes()
}

/// Both checkers on `bytes`; returns a description when they disagree.
fn compare(s: &Scratch, name: &str, bytes: &[u8]) -> Option<String> {
    let path = s.path("case.qcow2");
    std::fs::write(&path, bytes).expect("write case");
    let (qrc, qjson) = qemu_check(Path::new(&path), None);
    let ours = oracle::check::check(&bytes.to_vec());
    let want = qjson.as_ref().map(project);
    let got = ours
        .failure
        .is_none()
        .then(|| project(&ours.to_qemu_json()));
    (qrc != ours.exit_code() || want != got).then(|| {
        format!(
            "{name}: qemu-img exit {qrc} {want:?}\n    checker exit {} {got:?} failure={:?}",
            ours.exit_code(),
            ours.failure
        )
    })
}

#[test]
fn checker_agrees_with_qemu_img_on_data_file_images() {
    let s = Scratch::new();
    let scribble = [
        "write -P 0x11 0 5k",
        "write -P 0x22 64k 20k",
        "write -z 128k 8k",
        "discard 64k 4k",
        "write -P 0x33 1M 100k",
    ];
    let bases = vec![
        (
            "qemu-plain",
            qemu_image(&s, "a", "cluster_size=4096", &scribble),
        ),
        (
            "qemu-raw",
            qemu_image(&s, "b", "cluster_size=4096,data_file_raw=on", &scribble),
        ),
        (
            "qemu-64k",
            qemu_image(&s, "c", "cluster_size=65536", &scribble),
        ),
        ("engine-plain", engine_image(&s, "d", false)),
        ("engine-raw", engine_image(&s, "e", true)),
    ];
    let mut failures = vec![];
    let mut verdicts = std::collections::BTreeSet::new();
    for (name, base) in &bases {
        let l = Layout::read(base);
        assert!(!l.l2_entries.is_empty(), "{name}: no data clusters");
        let mut cases: Vec<(String, Vec<u8>)> = vec![(format!("{name} clean"), base.clone())];
        // A data entry without COPIED: its refcount is 1 by definition.
        let (at, e) = l.l2_entries[l.l2_entries.len() / 2];
        let mut b = base.clone();
        put64(&mut b, at, e & !(1 << 63));
        cases.push((format!("{name} copied cleared"), b));
        // A compressed entry where a data entry was.
        let mut b = base.clone();
        put64(&mut b, at, (1 << 62) | 0x1000);
        cases.push((format!("{name} compressed"), b));
        // A leaked cluster at the end of the file: refcount 1, no
        // reference (the data clusters at the same offsets do not count).
        let mut b = base.clone();
        let free = b.len() as u64 >> l.cluster_bits;
        b.resize(b.len() + l.cluster_size() as usize, 0);
        assert!(
            l.refcount_slot(&b, free).is_some(),
            "{name}: refblock covers the end"
        );
        l.set_refcount(&mut b, free, 1);
        cases.push((format!("{name} leak"), b));
        // A metadata cluster (the L1 table) with refcount 0.
        let mut b = base.clone();
        l.set_refcount(&mut b, l.l1_offset >> l.cluster_bits, 0);
        cases.push((format!("{name} l1 unreferenced"), b));
        for (case, bytes) in cases {
            let ours = oracle::check::check(&bytes);
            verdicts.insert(ours.exit_code());
            failures.extend(compare(&s, &case, &bytes));
        }
        // Guest cluster 0 is mapped at data offset 0 (an entry of COPIED
        // alone), which must not read as unallocated.
        let l2 = get64(base, l.l1_offset) & 0x00ff_ffff_ffff_fe00;
        assert_eq!(get64(base, l2), 1 << 63, "{name}: guest cluster 0 entry");
    }
    for code in [0, 2, 3] {
        assert!(
            verdicts.contains(&code),
            "no case got exit {code}: {verdicts:?}"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
