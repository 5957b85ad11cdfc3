//! The engine against an in-test model on the in-memory device, for every
//! combination of the five switches and a matrix of image options, with
//! concurrent requests; then `qemu-img check` and `qemu-img convert` judge
//! the image the engine left.

use std::path::Path;
use std::process::Command;

use engine::dev::MemDev;
use engine::{Backing, Compat, CreateOptions, EngineOptions, Image, Switches};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::YieldDev;

struct Params {
    cluster_size: u64,
    refcount_bits: u32,
    compat: Compat,
    lazy: bool,
    backing: bool,
    switches: Switches,
    size: u64,
    cache: usize,
}

fn qemu_img(args: &[&str]) -> std::process::Output {
    Command::new("qemu-img")
        .args(args)
        .output()
        .expect("qemu-img runs")
}

/// Run seeded random operations in concurrent batches, checking reads
/// against a model; return the final image bytes.
fn run_case(seed: u64, p: &Params, dir: &Path) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let backing_path = dir.join(format!("backing-{seed}.raw"));
    let mut model = vec![0u8; p.size as usize];
    let backing_data: Option<Vec<u8>> = p.backing.then(|| {
        let mut b = vec![0u8; (p.size - p.size / 4) as usize]; // shorter than the image
        rng.fill(&mut b[..]);
        std::fs::write(&backing_path, &b).unwrap();
        b
    });
    if let Some(b) = &backing_data {
        model[..b.len()].copy_from_slice(b);
    }
    let dev = YieldDev::new(MemDev::new(), seed ^ 0x5eed);
    let co = CreateOptions {
        size: p.size,
        cluster_size: p.cluster_size,
        refcount_bits: p.refcount_bits,
        compat: p.compat,
        lazy_refcounts: p.lazy,
        backing_file: p
            .backing
            .then(|| backing_path.to_str().unwrap().to_string()),
        backing_format: p.backing.then(|| "raw".to_string()),
        ..Default::default()
    };
    futures::executor::block_on(Image::create(&dev, &co)).expect("create");
    let opts = EngineOptions {
        switches: p.switches,
        l2_cache_tables: p.cache,
        refcount_cache_tables: p.cache,
        ..Default::default()
    };
    let mut img = futures::executor::block_on(Image::open(dev, opts)).expect("open");
    if let Some(b) = &backing_data {
        img.attach_backing(Backing::Raw(YieldDev::new(
            MemDev::from_bytes(b.clone()),
            seed,
        )));
    }
    let img = std::rc::Rc::new(img);
    let mut pool = LocalPool::new();
    let mut write_id = 0u8;
    for _batch in 0..40 {
        // A batch of non-overlapping concurrent writes, then reads.
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let n = rng.gen_range(1..8);
        for _ in 0..n {
            let len = match rng.gen_range(0..4) {
                0 => rng.gen_range(1..=512u64),
                1 => rng.gen_range(1..=p.cluster_size * 3),
                2 => p.cluster_size,
                _ => rng.gen_range(1..=4096u64),
            }
            .min(p.size);
            let off = rng.gen_range(0..=p.size - len);
            if taken.iter().any(|&(a, b)| a < off + len && off < b) {
                continue;
            }
            taken.push((off, off + len));
            write_id = write_id.wrapping_add(1);
            let kind = rng.gen_range(0..10);
            let img = img.clone();
            match kind {
                0 => {
                    model[off as usize..(off + len) as usize].fill(0);
                    pool.spawner()
                        .spawn_local(async move {
                            img.write_zeroes(off, len, true).await.expect("zeroes")
                        })
                        .unwrap();
                }
                _ => {
                    let data: Vec<u8> = (0..len)
                        .map(|i| write_id ^ (i as u8).wrapping_mul(31))
                        .collect();
                    model[off as usize..(off + len) as usize].copy_from_slice(&data);
                    pool.spawner()
                        .spawn_local(async move { img.write(off, &data).await.expect("write") })
                        .unwrap();
                }
            }
        }
        if rng.gen_range(0..4) == 0 {
            let img = img.clone();
            pool.spawner()
                .spawn_local(async move { img.flush().await.expect("flush") })
                .unwrap();
        }
        pool.run();
        for _ in 0..3 {
            let len = rng.gen_range(1..=p.cluster_size * 2).min(p.size);
            let off = rng.gen_range(0..=p.size - len);
            let mut buf = vec![0u8; len as usize];
            pool.run_until(img.read(off, &mut buf)).expect("read");
            assert_eq!(
                buf,
                &model[off as usize..(off + len) as usize],
                "seed {seed} read at {off}+{len}"
            );
        }
    }
    let mut all = vec![0u8; p.size as usize];
    pool.run_until(img.read(0, &mut all)).expect("read all");
    assert!(
        all == model,
        "seed {seed}: whole-disk read differs from the model"
    );
    let img = std::rc::Rc::try_unwrap(img).ok().expect("sole owner");
    let dev = pool.run_until(img.close()).expect("close");
    let bytes = dev.inner.into_bytes();
    // QEMU's judgement of the closed image.
    let path = dir.join(format!("img-{seed}.qcow2"));
    std::fs::write(&path, &bytes).unwrap();
    let out = qemu_img(&["check", "--output", "json", path.to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "seed {seed}: qemu-img check: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        json.get("corruptions")
            .and_then(|v| v.as_u64())
            .unwrap_or(0),
        0,
        "seed {seed}: {json}"
    );
    assert_eq!(
        json.get("leaks").and_then(|v| v.as_u64()).unwrap_or(0),
        0,
        "seed {seed}: {json}"
    );
    assert_eq!(out.status.code(), Some(0), "seed {seed}: {json}");
    let raw = dir.join(format!("img-{seed}.raw"));
    let out = qemu_img(&[
        "convert",
        "-O",
        "raw",
        path.to_str().unwrap(),
        raw.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "convert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let qemu_view = std::fs::read(&raw).unwrap();
    assert!(
        qemu_view == model,
        "seed {seed}: qemu-img reads different data than the model"
    );
    bytes
}

#[test]
fn every_switch_combination_matches_model_and_qemu() {
    let dir = tempfile::tempdir().unwrap();
    for mask in 0..32u8 {
        let p = Params {
            cluster_size: 4096,
            refcount_bits: 16,
            compat: Compat::V3,
            lazy: false,
            backing: mask % 3 == 0,
            switches: Switches::from_mask(mask),
            size: 1 << 20,
            cache: 4,
        };
        run_case(1000 + mask as u64, &p, dir.path());
    }
}

#[test]
fn image_option_matrix_matches_model_and_qemu() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0;
    for &cs in &[512u64, 4096, 65536, 2 << 20] {
        for &(rb, compat) in &[
            (1u32, Compat::V3),
            (8, Compat::V3),
            (16, Compat::V2),
            (64, Compat::V3),
        ] {
            for &backing in &[false, true] {
                seed += 1;
                let size = if cs >= 65536 { 8 << 20 } else { 1 << 20 };
                let p = Params {
                    cluster_size: cs,
                    refcount_bits: rb,
                    compat,
                    lazy: false,
                    backing,
                    switches: if seed % 2 == 0 {
                        Switches::ALL_ON
                    } else {
                        Switches::ALL_OFF
                    },
                    size,
                    cache: 2 + seed as usize % 3,
                };
                run_case(seed, &p, dir.path());
            }
        }
    }
}

#[test]
fn lazy_refcounts_close_clean() {
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        cluster_size: 65536,
        refcount_bits: 16,
        compat: Compat::V3,
        lazy: true,
        backing: false,
        switches: Switches::ALL_ON,
        size: 4 << 20,
        cache: 8,
    };
    run_case(77, &p, dir.path());
}
