//! Compressed cluster writes (`Image::write_compressed`): what the engine
//! writes reads back through the engine and through QEMU (`qemu-io read
//! -P`, `qemu-img check` clean), for both compression types and several
//! cluster sizes; compressed clusters share host clusters; the disk's
//! partial last cluster; data that does not compress goes uncompressed;
//! a normal write over a compressed cluster frees its bytes; the requests
//! QEMU refuses are refused with the same reasons; and compressed writes
//! racing normal ones on a yielding device leave a clean image.

use std::path::Path;

use engine::dev::{MemDev, YieldDev};
use engine::format::header::CompressionType;
use engine::{CompressedWriteError, CreateOptions, EngineOptions, Error, Image};
use futures::executor::block_on;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{assert_clean, tool};

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn new_image(size: u64, cluster_size: u64, kind: CompressionType) -> Image<MemDev> {
    let o = CreateOptions {
        size,
        cluster_size,
        compression_type: kind,
        ..Default::default()
    };
    let dev = MemDev::new();
    block_on(Image::create(&dev, &o)).expect("create");
    block_on(Image::open(dev, EngineOptions::default())).expect("open")
}

/// A cluster that compresses well and says which it is: `byte`, then a
/// short text naming it, repeated.
fn cluster_data(len: usize, byte: u8) -> Vec<u8> {
    let text = format!("cluster of byte {byte:#04x}; ");
    let mut v = vec![byte; len];
    for (i, b) in v.iter_mut().enumerate().skip(len / 2) {
        *b = text.as_bytes()[i % text.len()];
    }
    v
}

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// Close the image and put it in `dir` as `name`.
fn save(img: Image<MemDev>, dir: &Path, name: &str) -> std::path::PathBuf {
    let dev = block_on(img.close()).expect("close");
    let path = dir.join(name);
    std::fs::write(&path, dev.into_bytes()).unwrap();
    path
}

/// qemu-img map's JSON entries of the image.
fn qemu_map(img: &Path) -> Vec<serde_json::Value> {
    let out = tool("qemu-img", &["map", "--output", "json", p(img)]);
    serde_json::from_slice::<serde_json::Value>(&out)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// Whether qemu-img map reports [start, start + len) compressed.
fn qemu_says_compressed(map: &[serde_json::Value], start: u64, len: u64) -> bool {
    map.iter().any(|e| {
        let (s, l) = (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        e["compressed"] == true && s <= start && start + len <= s + l
    })
}

/// The file's length after a clean close: what the image takes.
fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn compressed_clusters_read_back_through_engine_and_qemu() {
    let dir = tempfile::tempdir().unwrap();
    for kind in [CompressionType::Zlib, CompressionType::Zstd] {
        for cs in [4096u64, 65536] {
            let n = 8u64;
            // Not a whole number of clusters: the last one is partial.
            let size = n * cs + cs / 2 + 512;
            let img = new_image(size, cs, kind);
            for i in 0..n {
                let data = cluster_data(cs as usize, 0x40 + i as u8);
                block_on(img.write_compressed(i * cs, &data)).expect("compressed write");
            }
            let tail = cluster_data((size - n * cs) as usize, 0x7e);
            block_on(img.write_compressed(n * cs, &tail)).expect("last partial cluster");
            let mut all = vec![0u8; size as usize];
            block_on(img.read(0, &mut all)).unwrap();
            for i in 0..n {
                let at = (i * cs) as usize;
                assert_eq!(
                    all[at..at + cs as usize],
                    cluster_data(cs as usize, 0x40 + i as u8)[..],
                    "{kind:?} cs {cs} cluster {i}"
                );
            }
            assert_eq!(all[(n * cs) as usize..], tail[..], "{kind:?} cs {cs} tail");
            let name = format!("rb-{}-{cs}.qcow2", kind.name());
            let path = save(img, dir.path(), &name);
            assert_clean(&path, &name);
            // Nine compressed clusters packed together take far less than
            // nine host clusters: five for the header, L1 table, refcount
            // table and block and the L2 table, at most two for the data.
            assert!(
                file_len(&path) <= 7 * cs,
                "{name}: {} bytes",
                file_len(&path)
            );
            let map = qemu_map(&path);
            assert!(qemu_says_compressed(&map, 0, size), "{name}: {map:?}");
            let mut cmds = vec![];
            for i in 0..n {
                // The first half of each cluster is its byte.
                cmds.push(format!("read -q -P {:#x} {} {}", 0x40 + i, i * cs, cs / 2));
            }
            cmds.push(format!(
                "read -q -P 0x7e {} {}",
                n * cs,
                (size - n * cs) / 2
            ));
            let mut args = vec!["-r"];
            for c in &cmds {
                args.extend(["-c", c.as_str()]);
            }
            args.push(p(&path));
            let out = String::from_utf8(tool("qemu-io", &args)).unwrap();
            assert!(!out.contains("fail"), "{name}: qemu-io: {out}");
        }
    }
}

#[test]
fn incompressible_cluster_is_written_uncompressed() {
    let dir = tempfile::tempdir().unwrap();
    let cs = 65536u64;
    let img = new_image(4 * cs, cs, CompressionType::Zlib);
    let data = noise(cs as usize, 7);
    block_on(img.write_compressed(cs, &data)).unwrap();
    // An ordinary data cluster: the engine knows its host offset.
    assert!(block_on(img.host_offset(cs)).unwrap().is_some());
    let mut back = vec![0u8; cs as usize];
    block_on(img.read(cs, &mut back)).unwrap();
    assert_eq!(back, data);
    let path = save(img, dir.path(), "noise.qcow2");
    assert_clean(&path, "noise");
    let map = qemu_map(&path);
    assert!(!qemu_says_compressed(&map, cs, cs), "{map:?}");
}

#[test]
fn normal_write_over_a_compressed_cluster_frees_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let cs = 4096u64;
    let img = new_image(64 * cs, cs, CompressionType::Zlib);
    // Three compressed clusters packed into one host cluster, then each
    // replaced by a normal write: every reference goes, none leaks (a
    // leak or a refcount below the references is what check reports).
    for i in 0..3 {
        let d = cluster_data(cs as usize, i as u8 + 1);
        block_on(img.write_compressed(i * cs, &d)).unwrap();
    }
    block_on(img.flush()).unwrap();
    for i in 0..3 {
        block_on(img.write(i * cs + 100, &[0xee; 10])).unwrap();
        block_on(img.flush()).unwrap();
    }
    let mut back = vec![0u8; 3 * cs as usize];
    block_on(img.read(0, &mut back)).unwrap();
    for i in 0..3usize {
        let mut want = cluster_data(cs as usize, i as u8 + 1);
        want[100..110].fill(0xee);
        assert_eq!(back[i * cs as usize..(i + 1) * cs as usize], want[..]);
    }
    let path = save(img, dir.path(), "over.qcow2");
    assert_clean(&path, "overwritten compressed clusters");
    let map = qemu_map(&path);
    assert!(!qemu_says_compressed(&map, 0, 3 * cs), "{map:?}");
}

#[test]
fn refused_requests_are_typed_and_write_nothing() {
    let cs = 65536u64;
    let img = new_image(4 * cs, cs, CompressionType::Zlib);
    let data = cluster_data(cs as usize, 3);
    let misaligned = |r: engine::Result<()>| {
        matches!(
            r,
            Err(Error::Compressed(CompressedWriteError::Misaligned { .. }))
        )
    };
    assert!(misaligned(block_on(img.write_compressed(512, &data))));
    assert!(misaligned(block_on(img.write_compressed(0, &data[..4096]))));
    block_on(img.write_compressed(0, &data)).unwrap();
    // The cluster is allocated now: no second compressed write there,
    // nor over an ordinary data cluster.
    assert_eq!(
        block_on(img.write_compressed(0, &data)),
        Err(Error::Compressed(CompressedWriteError::Allocated {
            offset: 0
        }))
    );
    block_on(img.write(cs, &[1; 512])).unwrap();
    assert_eq!(
        block_on(img.write_compressed(cs, &data)),
        Err(Error::Compressed(CompressedWriteError::Allocated {
            offset: cs
        }))
    );
    // A zero cluster without a host cluster takes one.
    block_on(img.write_zeroes(2 * cs, cs, true)).unwrap();
    block_on(img.write_compressed(2 * cs, &data)).unwrap();
    let mut back = vec![0u8; cs as usize];
    block_on(img.read(2 * cs, &mut back)).unwrap();
    assert_eq!(back, data);
    assert!(matches!(
        block_on(img.write_compressed(4 * cs, &data)),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
fn external_data_file_refuses_compressed_writes() {
    let o = CreateOptions {
        size: 1 << 20,
        cluster_size: 65536,
        data_file: Some("data.raw".into()),
        ..Default::default()
    };
    let (dev, data) = (MemDev::new(), MemDev::new());
    block_on(Image::create_with_data(&dev, Some(&data), &o)).unwrap();
    let img = block_on(Image::open_with_data(
        dev,
        Some(data),
        EngineOptions::default(),
    ))
    .unwrap();
    assert_eq!(
        block_on(img.write_compressed(0, &[1u8; 65536])),
        Err(Error::Compressed(CompressedWriteError::DataFile))
    );
}

/// Compressed writes, normal writes and flushes in flight together on a
/// device that completes requests out of order: every cluster reads
/// back what its last write put there and QEMU finds the image clean.
#[test]
fn compressed_and_normal_writes_interleave_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let cs = 4096u64;
    for seed in 0..6u64 {
        for kind in [CompressionType::Zlib, CompressionType::Zstd] {
            let o = CreateOptions {
                size: 48 * cs,
                cluster_size: cs,
                compression_type: kind,
                ..Default::default()
            };
            let mem = MemDev::new();
            block_on(Image::create(&mem, &o)).unwrap();
            let img = block_on(Image::open(
                YieldDev::new(mem, seed),
                EngineOptions::default(),
            ))
            .unwrap();
            let mut want = vec![0u8; 48 * cs as usize];
            // Compressed clusters 0..32 (some incompressible), normal
            // writes to 32..48 and to the second half of 8..16, which
            // waits for the compressed write there and then replaces it.
            let mut jobs: Vec<(u64, Vec<u8>, bool)> = Vec::new();
            for c in 0..32u64 {
                let d = if c % 5 == 4 {
                    noise(cs as usize, seed * 100 + c)
                } else {
                    cluster_data(cs as usize, c as u8 + 1)
                };
                jobs.push((c * cs, d, true));
            }
            for c in 32..48u64 {
                jobs.push((c * cs, cluster_data(cs as usize, 0x90 + c as u8), false));
            }
            for c in 8..16u64 {
                jobs.push((c * cs + cs / 2, vec![0xab; cs as usize / 2], false));
            }
            for (off, d, _) in &jobs {
                want[*off as usize..*off as usize + d.len()].copy_from_slice(d);
            }
            let mut futs = Vec::new();
            for (off, d, compressed) in &jobs {
                let img = &img;
                futs.push(Box::pin(async move {
                    if *compressed {
                        img.write_compressed(*off, d).await
                    } else {
                        img.write(*off, d).await
                    }
                })
                    as std::pin::Pin<
                        Box<dyn std::future::Future<Output = engine::Result<()>>>,
                    >);
            }
            futs.push(Box::pin(img.flush()));
            for r in block_on(futures::future::join_all(futs)) {
                r.unwrap();
            }
            let mut back = vec![0u8; want.len()];
            block_on(img.read(0, &mut back)).unwrap();
            assert!(back == want, "seed {seed} {kind:?}: data differs");
            let dev = block_on(img.close()).unwrap().inner;
            let name = format!("race-{seed}-{}.qcow2", kind.name());
            let path = dir.path().join(&name);
            std::fs::write(&path, dev.into_bytes()).unwrap();
            assert_clean(&path, &name);
        }
    }
}
