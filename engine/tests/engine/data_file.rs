//! External data files (incompatible bit 2, autoclear bit 1): images QEMU
//! makes with `-o data_file=...` (with and without `data_file_raw`, with a
//! backing file, left dirty under lazy refcounts) read by the engine as
//! `qemu-img convert` reads them; images the engine creates and writes pass
//! `qemu-img check` with no leak and read back as an in-test model says;
//! a raw data file stays equal to the guest disk; the data device is
//! flushed before metadata that points at its data is written; and
//! entries the format forbids are corruption.

use std::path::{Path, PathBuf};
use std::process::Command;

use engine::dev::{BlockDev, IoOp, MemDev, Recorder, RequestLog};
use engine::{Backing, CreateOptions, EngineOptions, Error, Image, Switches};
use futures::executor::block_on;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{assert_clean, qemu_create, qemu_io, qemu_raw, tool_in};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The data file an image's header names, next to the image.
fn data_path(img: &Path) -> PathBuf {
    let h = block_on(Image::read_header(&MemDev::from_bytes(
        std::fs::read(img).unwrap(),
    )))
    .unwrap();
    img.parent()
        .unwrap()
        .join(h.data_file().expect("a data file name"))
}

/// Open an image file, its data file and its backing chain on in-memory
/// copies of the files.
fn open_files(path: &Path, opts: EngineOptions) -> Image<MemDev> {
    let dev = MemDev::from_bytes(std::fs::read(path).unwrap());
    let h = block_on(Image::read_header(&dev)).unwrap();
    let data = h
        .has_data_file()
        .then(|| MemDev::from_bytes(std::fs::read(data_path(path)).unwrap()));
    let mut img = block_on(Image::open_with_data(dev, data, opts)).expect("engine opens");
    if let Some((name, fmt)) = img.backing_spec() {
        let b = path.parent().unwrap().join(name);
        let b = if fmt.as_deref() == Some("raw") {
            Backing::Raw(MemDev::from_bytes(std::fs::read(&b).unwrap()))
        } else {
            let ro = EngineOptions {
                read_only: true,
                ..Default::default()
            };
            Backing::Qcow2(Box::new(open_files(&b, ro)))
        };
        img.attach_backing(b);
    }
    img
}

fn read_all(img: &Image<MemDev>) -> Vec<u8> {
    let mut buf = vec![0u8; img.virtual_size() as usize];
    block_on(img.read(0, &mut buf)).expect("engine reads the image");
    buf
}

/// Close the image and write its files (image and data file) back.
fn close_to_files(img: Image<MemDev>, path: &Path) {
    let (dev, data) = block_on(img.close_with_data()).unwrap();
    std::fs::write(path, dev.into_bytes()).unwrap();
    if let Some(d) = data {
        std::fs::write(data_path(path), d.into_bytes()).unwrap();
    }
}

/// Writes, zeroes and discards over the disk as qemu-io commands, guest
/// cluster 0 (host offset 0 in the data file) included.
fn scribble_cmds(size: u64, cs: u64) -> Vec<String> {
    let mut cmds = vec![format!("write -P 0x99 0 {}", cs + 512)];
    let mut off = cs * 2;
    let mut i = 0u64;
    while off + 3 * cs < size && i < 30 {
        cmds.push(match i % 5 {
            0 => format!("write -P {} {} {}", 0x11 + i, off + 512, cs + 1024),
            1 => format!("write -P {} {} {}", 0x40 + i, off, 2 * cs),
            2 => format!("write -z {} {}", off, cs),
            3 => format!("write -z -u {} {}", off, 2 * cs),
            _ => format!("discard {} {}", off, cs),
        });
        off += (size / 23).next_multiple_of(cs) + cs;
        i += 1;
    }
    cmds.push(format!("write -P 0xa5 {} {}", cs / 2, cs));
    cmds
}

#[test]
fn qemu_made_data_file_images_read_like_qemu() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.qcow2");
    qemu_create(&base, "cluster_size=4096", "4M", None);
    qemu_io(&base, &["write -P 0x3c 0 4M".into()]);
    let cases = [
        ("plain4k", "cluster_size=4096", None),
        ("plain64k", "cluster_size=65536", None),
        ("raw4k", "cluster_size=4096,data_file_raw=on", None),
        ("raw64k", "cluster_size=65536,data_file_raw=on", None),
        ("backing", "cluster_size=4096", Some("base.qcow2")),
        ("lazy", "cluster_size=4096,lazy_refcounts=on", None),
    ];
    for (name, opts, backing) in cases {
        let img = dir.path().join(format!("{name}.qcow2"));
        let opts = format!("{opts},data_file={name}.data");
        qemu_create(&img, &opts, "4M", backing.map(|b| (b, "qcow2")));
        let cs = if opts.contains("65536") { 65536 } else { 4096 };
        let mut cmds = scribble_cmds(4 << 20, cs);
        if name == "lazy" {
            // Leave the image dirty, refcounts not written.
            cmds.push("abort".into());
        }
        let mut args = vec![];
        for c in &cmds {
            args.extend(["-c".to_string(), c.clone()]);
        }
        args.push(p(&img).to_string());
        let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
        let _ = Command::new("qemu-io")
            .args(&a)
            .current_dir(dir.path())
            .output()
            .unwrap();

        if name == "lazy" {
            // A read-write open rebuilds refcounts; data clusters must
            // stay uncounted for the result to check clean.
            let image = open_files(&img, EngineOptions::default());
            close_to_files(image, &img);
            assert_clean(&img, "data-file image");
        }
        let want = qemu_raw(&img);
        let ro = EngineOptions {
            read_only: true,
            ..Default::default()
        };
        let got = read_all(&open_files(&img, ro));
        assert!(got == want, "{name}: engine and qemu-img convert differ");
        if opts.contains("data_file_raw=on") {
            let data = std::fs::read(data_path(&img)).unwrap();
            assert!(data == want, "{name}: the raw data file is the disk");
        }
    }
}

/// One seeded operation on the engine and the model.
fn step(img: &Image<MemDev>, model: &mut [u8], rng: &mut ChaCha8Rng, cs: u64, i: u64) {
    let size = model.len() as u64;
    let len = rng.gen_range(1..=3 * cs / 512) * 512;
    let off = if i == 0 {
        0
    } else {
        rng.gen_range(0..(size - len) / 512) * 512
    };
    let range = off as usize..(off + len) as usize;
    match rng.gen_range(0..10) {
        0..=5 => {
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            block_on(img.write(off, &data)).unwrap();
            model[range].copy_from_slice(&data);
        }
        6 | 7 => {
            block_on(img.write_zeroes(off, len, rng.gen())).unwrap();
            model[range].fill(0);
        }
        8 => {
            // Discard on version 3 makes whole clusters read as zeroes.
            block_on(img.discard(off, len)).unwrap();
            let start = off.next_multiple_of(cs);
            let end = (off + len) / cs * cs;
            if start < end {
                model[start as usize..end as usize].fill(0);
            }
        }
        _ => block_on(img.flush()).unwrap(),
    }
}

#[test]
fn engine_written_data_file_images_assert_clean_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0u64;
    for cs in [4096u64, 65536] {
        for raw in [false, true] {
            for switches in [Switches::ALL_ON, Switches::ALL_OFF] {
                seed += 1;
                let path = dir.path().join(format!("e{seed}.qcow2"));
                let size = 3u64 << 20;
                let o = CreateOptions {
                    size,
                    cluster_size: cs,
                    data_file: Some(format!("e{seed}.data")),
                    data_file_raw: raw,
                    ..Default::default()
                };
                let (dev, data) = (MemDev::new(), MemDev::new());
                block_on(Image::create_with_data(&dev, Some(&data), &o)).unwrap();
                let opts = EngineOptions {
                    switches,
                    ..Default::default()
                };
                let img = block_on(Image::open_with_data(dev, Some(data), opts)).unwrap();
                assert!(img.has_data_file());
                let mut model = vec![0u8; size as usize];
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                for i in 0..60 {
                    step(&img, &mut model, &mut rng, cs, i);
                }
                assert!(
                    read_all(&img) == model,
                    "seed {seed}: engine reads its model"
                );
                close_to_files(img, &path);
                assert_clean(&path, "data-file image");
                assert!(qemu_raw(&path) == model, "seed {seed}: qemu-img convert");
                let data = std::fs::read(data_path(&path)).unwrap();
                if raw {
                    assert!(data == model, "seed {seed}: the raw data file is the disk");
                    let info = tool_in(
                        dir.path(),
                        "qemu-img",
                        &["info", "--output", "json", p(&path)],
                    );
                    let v: serde_json::Value = serde_json::from_slice(&info).unwrap();
                    assert_eq!(v["format-specific"]["data"]["data-file-raw"], true);
                }
                // The image file holds metadata only.
                let image_len = std::fs::metadata(&path).unwrap().len();
                assert!(
                    image_len < size / 2,
                    "seed {seed}: image file {image_len} bytes"
                );
            }
        }
    }
}

#[test]
fn engine_writes_qemu_made_data_file_images_with_backing() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.qcow2");
    qemu_create(&base, "cluster_size=65536", "2M", None);
    qemu_io(&base, &["write -P 0x3c 0 2M".into()]);
    let img_path = dir.path().join("top.qcow2");
    qemu_create(
        &img_path,
        "cluster_size=4096,data_file=top.data",
        "2M",
        Some(("base.qcow2", "qcow2")),
    );
    qemu_io(&img_path, &scribble_cmds(2 << 20, 4096));
    let mut model = qemu_raw(&img_path);
    let img = open_files(&img_path, EngineOptions::default());
    let mut rng = ChaCha8Rng::seed_from_u64(77);
    for i in 0..40 {
        // Partial-cluster writes over backing data need their COW.
        step(&img, &mut model, &mut rng, 4096, i);
    }
    assert!(read_all(&img) == model);
    close_to_files(img, &img_path);
    assert_clean(&img_path, "data-file image");
    assert!(qemu_raw(&img_path) == model);
}

#[test]
fn open_needs_the_data_file_exactly_when_the_header_asks() {
    let o = CreateOptions {
        size: 1 << 20,
        data_file: Some("disk.data".into()),
        ..Default::default()
    };
    let (dev, data) = (MemDev::new(), MemDev::new());
    block_on(Image::create_with_data(&dev, Some(&data), &o)).unwrap();
    assert_eq!(data.len(), 1 << 20, "the data file is sized to the disk");
    let bytes = dev.into_bytes();
    let image_bytes = bytes.clone();
    match block_on(Image::open(
        MemDev::from_bytes(bytes.clone()),
        Default::default(),
    )) {
        Err(e @ Error::DataFileRequired { .. }) => {
            assert_eq!(
                e,
                Error::DataFileRequired {
                    name: Some("disk.data".into())
                }
            );
            assert!(e.to_string().contains("'disk.data'"), "{e}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened without its data file"),
    }
    let img = block_on(Image::open_with_data(
        MemDev::from_bytes(bytes),
        Some(data),
        Default::default(),
    ))
    .unwrap();
    assert_eq!(img.data_file_name().as_deref(), Some("disk.data"));

    // Read-only, the image opens without it, to be described; guest reads
    // then fail naming the file.
    let ro = EngineOptions {
        read_only: true,
        ..Default::default()
    };
    let img = block_on(Image::open(MemDev::from_bytes(image_bytes.clone()), ro)).unwrap();
    assert_eq!(img.data_file_name().as_deref(), Some("disk.data"));
    let mut buf = [0u8; 512];
    assert!(matches!(
        block_on(img.read(0, &mut buf)),
        Err(Error::DataFileRequired { name: Some(_) })
    ));

    // Bit 2 without the name extension: the caller must name the file.
    let mut unnamed = block_on(Image::<MemDev>::read_header(&MemDev::from_bytes(
        image_bytes.clone(),
    )))
    .unwrap();
    unnamed
        .extensions
        .retain(|e| e.kind != engine::format::header::ext::EXTERNAL_DATA_FILE);
    let mut b = image_bytes.clone();
    let hdr = unnamed.serialize().unwrap();
    b[..hdr.len()].copy_from_slice(&hdr);
    assert!(matches!(
        block_on(Image::open(MemDev::from_bytes(b), Default::default())),
        Err(Error::DataFileRequired { name: None })
    ));

    // A plain image refuses a data device, and create checks its options.
    let plain = MemDev::new();
    block_on(Image::create(
        &plain,
        &CreateOptions {
            size: 1 << 20,
            ..Default::default()
        },
    ))
    .unwrap();
    assert!(matches!(
        block_on(Image::open_with_data(
            plain,
            Some(MemDev::new()),
            Default::default()
        )),
        Err(Error::InvalidOption { .. })
    ));
    let bad = [
        CreateOptions {
            data_file: Some("x".into()),
            ..o.clone()
        },
        CreateOptions {
            data_file: Some("x".into()),
            data_file_raw: true,
            backing_file: Some("b".into()),
            ..o.clone()
        },
        CreateOptions {
            data_file: None,
            data_file_raw: true,
            ..o.clone()
        },
        CreateOptions {
            compat: engine::Compat::V2,
            ..o.clone()
        },
    ];
    for (i, c) in bad.iter().enumerate() {
        // The first case lacks the data device, the others are refused for
        // their options whatever the device.
        let data = (i > 0).then(MemDev::new);
        let r = block_on(Image::create_with_data(&MemDev::new(), data.as_ref(), c));
        assert!(
            matches!(r, Err(Error::InvalidOption { .. })),
            "case {i}: {r:?}"
        );
    }
}

/// Write the raw L2 entry of guest cluster `idx` (first L2 table).
fn poke_l2_entry(image: &mut [u8], idx: usize, entry: u64) {
    let be = |o: usize| u64::from_be_bytes(image[o..o + 8].try_into().unwrap());
    let l1_off = be(40) as usize;
    let l2_off = (be(l1_off) & 0x00ff_ffff_ffff_fe00) as usize;
    let at = l2_off + idx * 8;
    image[at..at + 8].copy_from_slice(&entry.to_be_bytes());
}

#[test]
fn entries_a_data_file_forbids_are_corruption() {
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: 4096,
        data_file: Some("d".into()),
        data_file_raw: true,
        ..Default::default()
    };
    let (dev, data) = (MemDev::new(), MemDev::new());
    block_on(Image::create_with_data(&dev, Some(&data), &o)).unwrap();
    let image = dev.into_bytes();
    let data = data.into_bytes();
    let copied = 1u64 << 63;
    let cases = [
        // Compressed (the descriptor would be valid in a plain image).
        ("compressed", 3, (1u64 << 62) | 0x2000, "compressed"),
        // Mapped at another cluster's offset.
        ("shifted", 3, copied | 0x5000, "does not match"),
        ("zero, shifted", 3, copied | 0x5000 | 1, "does not match"),
    ];
    for (name, idx, entry, needle) in cases {
        let mut bad = image.clone();
        poke_l2_entry(&mut bad, idx, entry);
        let img = block_on(Image::open_with_data(
            MemDev::from_bytes(bad),
            Some(MemDev::from_bytes(data.clone())),
            Default::default(),
        ))
        .unwrap();
        let mut buf = vec![0u8; 4096];
        match block_on(img.read(idx as u64 * 4096, &mut buf)) {
            Err(Error::Corrupt { what, .. }) => assert!(what.contains(needle), "{name}: {what}"),
            other => panic!("{name}: expected corruption, got {other:?}"),
        }
        // Its neighbour still reads.
        block_on(img.read(0, &mut buf)).unwrap();
    }
    // Offset 0 with COPIED is guest cluster 0 at data file offset 0.
    let mut data0 = data.clone();
    data0[..4096].fill(0x42);
    let img = block_on(Image::open_with_data(
        MemDev::from_bytes(image),
        Some(MemDev::from_bytes(data0)),
        Default::default(),
    ))
    .unwrap();
    let mut buf = vec![0u8; 4096];
    block_on(img.read(0, &mut buf)).unwrap();
    assert!(buf.iter().all(|&b| b == 0x42));
}

/// Which device a request went to, and what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write(u64),
    Flush,
}

#[test]
fn data_is_flushed_before_the_l2_entry_that_points_at_it() {
    for switches in [Switches::ALL_ON, Switches::ALL_OFF] {
        // Both devices record into one log, each under its name.
        let log = RequestLog::default();
        let dev = |name| Recorder::sharing(MemDev::new(), name, log.clone());
        let (image, data) = (dev("image"), dev("data"));
        let o = CreateOptions {
            size: 4 << 20,
            cluster_size: 4096,
            data_file: Some("d".into()),
            ..Default::default()
        };
        block_on(Image::create_with_data(&image, Some(&data), &o)).unwrap();
        let opts = EngineOptions {
            switches,
            ..Default::default()
        };
        let img = block_on(Image::open_with_data(image, Some(data), opts)).unwrap();
        log.borrow_mut().clear();
        block_on(img.write(3 << 20, &[7u8; 6000])).unwrap();
        block_on(img.flush()).unwrap();
        let (image, _) = img.into_devices();
        // The L2 table mapping guest offset 3 MiB, and the L1 entry.
        let h = block_on(Image::read_header(&image)).unwrap();
        // 3 MiB is in the second L2 table's range (2 MiB per table).
        let mut l1 = [0u8; 8];
        block_on(image.read(h.l1_table_offset + 8, &mut l1)).unwrap();
        let l2 = u64::from_be_bytes(l1) & 0x00ff_ffff_ffff_fe00;
        assert_ne!(l2, 0);
        let log: Vec<(&str, Op)> = log
            .borrow()
            .iter()
            .filter_map(|r| match r.op {
                IoOp::Write | IoOp::WriteZeroes => Some((r.dev, Op::Write(r.offset))),
                IoOp::Flush => Some((r.dev, Op::Flush)),
                _ => None,
            })
            .collect();
        assert!(
            log.iter()
                .any(|(d, op)| *d == "data" && matches!(op, Op::Write(_))),
            "guest data went to the data device"
        );
        let mut links = 0;
        for (j, (d, op)) in log.iter().enumerate() {
            let points_at_data =
                *d == "image" && (*op == Op::Write(l2) || *op == Op::Write(h.l1_table_offset));
            if !points_at_data {
                continue;
            }
            links += 1;
            // Every data write before this metadata write has a data flush
            // after it and before this write.
            if let Some(i) = log[..j]
                .iter()
                .rposition(|(d, op)| *d == "data" && matches!(op, Op::Write(_)))
            {
                assert!(
                    log[i..j].contains(&("data", Op::Flush)),
                    "{switches:?}: metadata write {j} before the data is durable: {log:?}"
                );
            }
        }
        assert!(links >= 2, "{switches:?}: L2 and L1 written: {log:?}");
    }
}
