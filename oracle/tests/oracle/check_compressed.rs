//! The checker on images the engine wrote with compressed clusters
//! (`Image::write_compressed`): host clusters shared by several
//! compressed clusters, compressed data running across host cluster
//! boundaries, small refcount widths (a host cluster at the largest
//! refcount takes no more), and compressed clusters replaced by normal
//! writes and discards. Every image must be clean for the checker (each
//! host cluster's refcount equals the compressed and other clusters that
//! use it) and `qemu-img check` must say the same.

use std::path::Path;

use crate::check_support::{project, qemu_check, Scratch};
use engine::dev::MemDev;
use engine::format::header::CompressionType;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CS: u64 = 4096;

/// A cluster of bytes drawn from 16 symbols: it compresses to about half
/// a cluster, so packed clusters run across host cluster boundaries.
fn half_compressible(rng: &mut ChaCha8Rng) -> Vec<u8> {
    (0..CS).map(|_| b'a' + rng.gen_range(0..16u8)).collect()
}

/// An engine image with compressed writes, some replaced; returns its
/// bytes and how many compressed clusters it still holds.
fn engine_image(kind: CompressionType, refcount_bits: u32, seed: u64) -> (Vec<u8>, u64) {
    let o = CreateOptions {
        size: 64 * CS,
        cluster_size: CS,
        refcount_bits,
        compression_type: kind,
        ..Default::default()
    };
    let dev = MemDev::new();
    block_on(Image::create(&dev, &o)).expect("create");
    let img = block_on(Image::open(dev, EngineOptions::default())).expect("open");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut compressed = 0;
    for c in 0..24u64 {
        let data = if c % 3 == 0 {
            // Compresses to a few dozen bytes: many share a host cluster.
            vec![c as u8 + 1; CS as usize]
        } else {
            half_compressible(&mut rng)
        };
        block_on(img.write_compressed(c * CS, &data)).expect("compressed write");
        compressed += 1;
    }
    block_on(img.flush()).expect("flush");
    // A normal write into a compressed cluster copies it out and frees
    // its bytes; a discard drops it; both only once durable.
    for c in [1u64, 2, 9, 16] {
        block_on(img.write(c * CS + 7, &[0xee; 100])).expect("write");
        compressed -= 1;
    }
    block_on(img.discard(5 * CS, CS)).expect("discard");
    compressed -= 1;
    block_on(img.flush()).expect("flush");
    // And compressed again into the discarded (now zero) cluster.
    block_on(img.write_compressed(5 * CS, &half_compressible(&mut rng))).expect("again");
    compressed += 1;
    let dev = block_on(img.close()).expect("close");
    (dev.into_bytes(), compressed)
}

#[test]
fn engine_compressed_images_check_clean_as_qemu_finds_them() {
    let s = Scratch::new();
    let mut failures = vec![];
    for kind in [CompressionType::Zlib, CompressionType::Zstd] {
        for bits in [1u32, 2, 16] {
            for seed in 0..3u64 {
                let name = format!("{}-rb{bits}-seed{seed}", kind.name());
                let (bytes, compressed) = engine_image(kind, bits, seed);
                let ours = oracle::check::check(&bytes);
                if ours.exit_code() != 0 || !ours.findings.is_empty() {
                    failures.push(format!("{name}: checker: {}", ours.human()));
                    continue;
                }
                if ours.compressed_clusters != compressed {
                    failures.push(format!(
                        "{name}: {} compressed clusters, wrote {compressed}",
                        ours.compressed_clusters
                    ));
                }
                let path = s.path(&format!("{name}.qcow2"));
                std::fs::write(&path, &bytes).unwrap();
                let (qrc, qjson) = qemu_check(Path::new(&path), None);
                let want = qjson.as_ref().map(project);
                let got = Some(project(&ours.to_qemu_json()));
                if qrc != 0 || want != got {
                    failures.push(format!(
                        "{name}: qemu-img exit {qrc} {want:?}, checker {got:?}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
