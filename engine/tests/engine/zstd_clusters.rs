//! zstd-compressed clusters (compression type 1): images QEMU compresses
//! with zstd, read by the engine exactly as `qemu-img convert -O raw` reads
//! them; overwrites of compressed clusters that `qemu-img check` finds
//! clean; and damaged zstd data refused as corruption.

use std::path::Path;

use engine::dev::MemDev;
use engine::format::header::CompressionType;
use engine::{CreateOptions, EngineOptions, Error, Image};
use futures::executor::block_on;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{assert_clean, qemu_create, qemu_raw, tool};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Guest data from a seed: per 4 KiB, zeroes, repeated text (compresses
/// well), a byte run, or random bytes (QEMU stores those uncompressed).
fn seeded_disk(seed: u64, size: usize) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut d = vec![0u8; size];
    for chunk in d.chunks_mut(4096) {
        match rng.gen_range(0..4) {
            0 => {}
            1 => {
                let word = format!("block {} of seed {seed}; ", rng.gen::<u16>());
                for (i, b) in chunk.iter_mut().enumerate() {
                    *b = word.as_bytes()[i % word.len()];
                }
            }
            2 => chunk.fill(rng.gen()),
            _ => rng.fill(chunk),
        }
    }
    d
}

/// How many guest bytes `qemu-img map` reports as compressed.
fn compressed_bytes(img: &Path) -> u64 {
    let out = tool("qemu-img", &["map", "--output", "json", p(img)]);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .filter(|e| e["compressed"] == true)
        .map(|e| e["length"].as_u64().unwrap())
        .sum()
}

fn open_mem(path: &Path, read_only: bool) -> Image<MemDev> {
    let dev = MemDev::from_bytes(std::fs::read(path).unwrap());
    let opts = EngineOptions {
        read_only,
        ..Default::default()
    };
    block_on(Image::open(dev, opts)).expect("engine opens the image")
}

fn engine_raw(path: &Path) -> Result<Vec<u8>, Error> {
    let img = open_mem(path, true);
    let mut buf = vec![0u8; img.virtual_size() as usize];
    block_on(img.read(0, &mut buf))?;
    Ok(buf)
}

/// `qemu-img convert -c` of seeded data into a zstd image.
fn qemu_zstd_image(dir: &Path, seed: u64, cluster_size: u64) -> std::path::PathBuf {
    let src = dir.join(format!("src{seed}.raw"));
    std::fs::write(&src, seeded_disk(seed, 3 << 20)).unwrap();
    let img = dir.join(format!("z{seed}-{cluster_size}.qcow2"));
    let o = format!("compression_type=zstd,cluster_size={cluster_size}");
    tool(
        "qemu-img",
        &["convert", "-c", "-O", "qcow2", "-o", &o, p(&src), p(&img)],
    );
    img
}

#[test]
fn qemu_zstd_images_read_like_qemu() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, cs) in [(1u64, 512u64), (2, 4096), (3, 65536), (4, 2 << 20)] {
        let img = qemu_zstd_image(dir.path(), seed, cs);
        assert!(
            compressed_bytes(&img) > 0,
            "cluster size {cs}: nothing compressed"
        );
        let h = open_mem(&img, true).header();
        assert_eq!(h.compression(), CompressionType::Zstd);
        let want = qemu_raw(&img);
        assert!(engine_raw(&img).unwrap() == want, "cluster size {cs}");
    }
}

#[test]
fn qemu_io_compressed_writes_into_a_zstd_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("w.qcow2");
    qemu_create(&img, "compression_type=zstd,cluster_size=4096", "1M", None);
    tool(
        "qemu-io",
        &[
            "-c",
            "write -c -P 0x5a 0 4k",
            "-c",
            "write -c -P 0x33 64k 8k",
            p(&img),
        ],
    );
    assert_eq!(compressed_bytes(&img), 12288);
    assert!(engine_raw(&img).unwrap() == qemu_raw(&img));
}

#[test]
fn engine_overwrites_zstd_clusters_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    for (seed, cs) in [(5u64, 4096u64), (6, 65536)] {
        let img = qemu_zstd_image(dir.path(), seed, cs);
        let mut model = qemu_raw(&img);
        let image = open_mem(&img, false);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for i in 0..24u64 {
            let sectors = rng.gen_range(1..=(2 * cs / 512));
            let off = rng.gen_range(0..(model.len() as u64 / 512 - sectors)) * 512;
            let data = vec![0x80 | i as u8; (sectors * 512) as usize];
            block_on(image.write(off, &data)).unwrap();
            model[off as usize..(off + sectors * 512) as usize].copy_from_slice(&data);
        }
        let mut back = vec![0u8; model.len()];
        block_on(image.read(0, &mut back)).unwrap();
        assert!(
            back == model,
            "engine reads its own writes (cluster size {cs})"
        );
        std::fs::write(&img, block_on(image.close()).unwrap().into_bytes()).unwrap();
        assert_clean(&img, "img");
        assert!(qemu_raw(&img) == model, "cluster size {cs}");
    }
}

#[test]
fn a_damaged_zstd_frame_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let img = qemu_zstd_image(dir.path(), 7, 65536);
    let mut bytes = std::fs::read(&img).unwrap();
    // Compressed clusters start with the zstd frame magic, at sector
    // granularity; break the first one found past the metadata.
    let magic = [0x28, 0xb5, 0x2f, 0xfd];
    let at = (65536..bytes.len() - 4)
        .find(|&i| bytes[i..i + 4] == magic)
        .expect("a zstd frame in the image");
    bytes[at..at + 4].fill(0);
    std::fs::write(&img, &bytes).unwrap();
    match engine_raw(&img) {
        Err(Error::Corrupt { what, .. }) => assert!(what.contains("zstd"), "{what}"),
        other => panic!("expected a corrupt-image error, got {other:?}"),
    }
}

#[test]
fn zstd_compression_type_in_the_header_is_checked() {
    let o = CreateOptions {
        size: 1 << 20,
        compression_type: CompressionType::Zstd,
        ..Default::default()
    };
    let dev = MemDev::new();
    block_on(Image::create(&dev, &o)).unwrap();
    let bytes = dev.into_bytes();
    assert_eq!(bytes[104], 1, "compression_type field");
    assert_eq!(bytes[79] & 8, 8, "incompatible bit 3");
    let img = block_on(Image::open(
        MemDev::from_bytes(bytes.clone()),
        Default::default(),
    ))
    .unwrap();
    assert_eq!(img.header().compression(), CompressionType::Zstd);

    // zstd without bit 3, an unknown type, and zlib with bit 3 are refused.
    let mut no_bit = bytes.clone();
    no_bit[79] &= !8;
    let mut unknown = bytes.clone();
    unknown[104] = 7;
    let mut zlib_bit = bytes;
    zlib_bit[104] = 0;
    for b in [no_bit, unknown, zlib_bit] {
        let r = block_on(Image::open(MemDev::from_bytes(b), Default::default()));
        match r {
            Err(Error::Format { field, .. }) => assert_eq!(field, "compression_type"),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("bad compression type accepted"),
        }
    }

    // Version 2 has no compression type field.
    let v2 = CreateOptions {
        compat: engine::Compat::V2,
        ..o
    };
    assert!(matches!(
        block_on(Image::create(&MemDev::new(), &v2)),
        Err(Error::InvalidOption { .. })
    ));
}

#[test]
fn engine_made_zstd_image_is_what_qemu_expects() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.qcow2");
    let o = CreateOptions {
        size: 4 << 20,
        compression_type: CompressionType::Zstd,
        ..Default::default()
    };
    let dev = MemDev::new();
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, Default::default())).unwrap();
    block_on(img.write(12345, &[0xab; 70000])).unwrap();
    std::fs::write(&path, block_on(img.close()).unwrap().into_bytes()).unwrap();
    assert_clean(&path, "path");
    let info = tool("qemu-img", &["info", "--output", "json", p(&path)]);
    let v: serde_json::Value = serde_json::from_slice(&info).unwrap();
    assert_eq!(v["format-specific"]["data"]["compression-type"], "zstd");
    let raw = qemu_raw(&path);
    assert!(raw[12345..82345].iter().all(|&b| b == 0xab));
    assert!(raw[..12345].iter().chain(&raw[82345..]).all(|&b| b == 0));
}
