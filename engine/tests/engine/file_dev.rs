//! `FileDev` on real temporary files: data round trips, reads past the end,
//! zeroing with and without fallocate, discard, truncate, flush, read-only
//! refusal, O_DIRECT, many requests in flight at once through one pool, and
//! a request alone running on the caller's thread.

use std::os::unix::fs::MetadataExt;

use engine::dev::{
    BlockDev, DevError, FileDev, FileOptions, IoBuf, IoOp, IoPool, WriteFlags, ZeroFlags,
};
use futures::executor::block_on;
use futures::future::join_all;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8) | 1)
        .collect()
}

fn new_dev(dir: &tempfile::TempDir, name: &str, opts: &FileOptions) -> FileDev {
    FileDev::create(dir.path().join(name), opts).expect("create file device")
}

/// Compare without dumping megabytes on failure: name the first difference.
fn assert_same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            got[i], want[i]
        );
    }
}

/// A device opened with O_DIRECT, or `None` on a file system without it
/// (tmpfs), whose refusal must still name O_DIRECT.
fn direct_dev(dir: &tempfile::TempDir, name: &str) -> Option<FileDev> {
    let opts = FileOptions {
        direct: true,
        ..FileOptions::default()
    };
    match FileDev::create(dir.path().join(name), &opts) {
        Ok(d) => Some(d),
        Err(e @ engine::dev::FileOpenError::DirectUnsupported { .. }) => {
            assert!(e.to_string().contains("O_DIRECT"), "{e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn read_vec(dev: &FileDev, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0xeeu8; len];
    block_on(dev.read(offset, &mut buf)).expect("read");
    buf
}

#[test]
fn write_then_read_round_trips_and_extends() {
    let dir = tempfile::tempdir().unwrap();
    let dev = new_dev(&dir, "a", &FileOptions::default());
    assert_eq!(dev.len(), 0);
    let data = pattern(1, 10_000);
    block_on(dev.write(4096 + 7, &data, WriteFlags::default())).unwrap();
    assert_eq!(dev.len(), 4096 + 7 + 10_000);
    assert_same(&read_vec(&dev, 4096 + 7, data.len()), &data, "read back");
    // The hole before the write reads as zeroes.
    assert_same(&read_vec(&dev, 0, 4096 + 7), &[0u8; 4096 + 7], "hole");
    // What the file holds on disk is the same as what the device reads.
    let on_disk = std::fs::read(dev.path()).unwrap();
    assert_same(&on_disk[4096 + 7..], &data, "file content");
}

#[test]
fn reads_past_end_of_file_are_zero() {
    let dir = tempfile::tempdir().unwrap();
    let dev = new_dev(&dir, "a", &FileOptions::default());
    block_on(dev.write(0, &[0xab; 100], WriteFlags::default())).unwrap();
    let got = read_vec(&dev, 50, 200);
    assert_eq!(&got[..50], &[0xab; 50]);
    assert!(got[50..].iter().all(|&b| b == 0), "tail past EOF not zero");
    assert_eq!(read_vec(&dev, 1 << 20, 512), vec![0u8; 512]);
    // Reading does not extend the file.
    assert_eq!(dev.len(), 100);
    assert_eq!(std::fs::metadata(dev.path()).unwrap().len(), 100);
}

#[test]
fn write_zeroes_with_and_without_unmap() {
    let dir = tempfile::tempdir().unwrap();
    let dev = new_dev(&dir, "a", &FileOptions::default());
    let mut model = pattern(2, 256 << 10);
    block_on(dev.write(0, &model, WriteFlags::default())).unwrap();
    block_on(dev.flush()).unwrap();
    for (offset, len, may_unmap) in [(1000u64, 5000u64, false), (64 << 10, 64 << 10, true)] {
        let flags = ZeroFlags {
            may_unmap,
            no_fallback: true,
            fua: false,
        };
        block_on(dev.write_zeroes(offset, len, flags)).unwrap();
        model[offset as usize..(offset + len) as usize].fill(0);
        let got = read_vec(&dev, 0, model.len());
        assert_same(&got, &model, &format!("after zeroing {offset}+{len}"));
    }
    // Unmapping a whole aligned range deallocates it on ext4/xfs/tmpfs.
    let blocks_before = std::fs::metadata(dev.path()).unwrap().blocks();
    let flags = ZeroFlags {
        may_unmap: true,
        ..ZeroFlags::default()
    };
    block_on(dev.write_zeroes(128 << 10, 128 << 10, flags)).unwrap();
    let blocks_after = std::fs::metadata(dev.path()).unwrap().blocks();
    assert!(
        blocks_after < blocks_before,
        "punching 128 KiB freed nothing ({blocks_before} -> {blocks_after} blocks)"
    );
    assert_eq!(dev.len(), 256 << 10);
}

#[test]
fn write_zeroes_past_end_extends_the_file() {
    let dir = tempfile::tempdir().unwrap();
    for may_unmap in [false, true] {
        let dev = new_dev(&dir, "a", &FileOptions::default());
        block_on(dev.write(0, &[7; 4096], WriteFlags::default())).unwrap();
        let flags = ZeroFlags {
            may_unmap,
            ..ZeroFlags::default()
        };
        block_on(dev.write_zeroes(2048, 1 << 20, flags)).unwrap();
        let end = 2048 + (1 << 20);
        assert_eq!(dev.len(), end);
        assert_eq!(std::fs::metadata(dev.path()).unwrap().len(), end);
        let got = read_vec(&dev, 0, end as usize);
        assert_same(&got[..2048], &[7; 2048], "head");
        assert!(got[2048..].iter().all(|&b| b == 0), "may_unmap={may_unmap}");
    }
}

#[test]
fn no_fallback_without_fallocate_is_not_supported() {
    let dir = tempfile::tempdir().unwrap();
    let opts = FileOptions {
        fallocate: false,
        ..FileOptions::default()
    };
    let dev = new_dev(&dir, "a", &opts);
    block_on(dev.write(0, &[9; 8192], WriteFlags::default())).unwrap();
    let refuse = ZeroFlags {
        no_fallback: true,
        may_unmap: true,
        fua: false,
    };
    let err = block_on(dev.write_zeroes(0, 4096, refuse)).unwrap_err();
    assert!(err.is_not_supported(), "{err:?}");
    // The refused request changed nothing.
    assert_same(&read_vec(&dev, 0, 8192), &[9; 8192], "after refusal");
    // Without no_fallback the device writes zero buffers instead, in chunks
    // (3 MiB is more than one fallback buffer).
    block_on(dev.write_zeroes(100, 3 << 20, ZeroFlags::default())).unwrap();
    assert_same(&read_vec(&dev, 0, 100), &[9; 100], "head");
    assert!(read_vec(&dev, 100, 3 << 20).iter().all(|&b| b == 0));
    assert_eq!(dev.len(), 100 + (3 << 20));
}

#[test]
fn discard_keeps_size_and_reads_old_or_zero() {
    let dir = tempfile::tempdir().unwrap();
    let dev = new_dev(&dir, "a", &FileOptions::default());
    let data = pattern(3, 64 << 10);
    block_on(dev.write(0, &data, WriteFlags::default())).unwrap();
    // Part of the range lies past the end: that part must not extend it.
    block_on(dev.discard(32 << 10, 1 << 20)).unwrap();
    assert_eq!(dev.len(), 64 << 10);
    assert_eq!(std::fs::metadata(dev.path()).unwrap().len(), 64 << 10);
    let got = read_vec(&dev, 0, data.len());
    assert_same(&got[..32 << 10], &data[..32 << 10], "before the discard");
    for (i, (&g, &d)) in got.iter().zip(&data).enumerate().skip(32 << 10) {
        assert!(g == 0 || g == d, "byte {i} is {g}, neither old nor zero");
    }
}

#[test]
fn truncate_shrinks_and_extends() {
    let dir = tempfile::tempdir().unwrap();
    let dev = new_dev(&dir, "a", &FileOptions::default());
    block_on(dev.write(0, &[5; 10_000], WriteFlags::default())).unwrap();
    block_on(dev.truncate(3000)).unwrap();
    assert_eq!(dev.len(), 3000);
    assert_eq!(std::fs::metadata(dev.path()).unwrap().len(), 3000);
    block_on(dev.truncate(8000)).unwrap();
    assert_eq!(dev.len(), 8000);
    let got = read_vec(&dev, 0, 8000);
    assert_same(&got[..3000], &[5; 3000], "kept part");
    assert!(got[3000..].iter().all(|&b| b == 0), "extension not zero");
}

#[test]
fn flush_and_fua_writes_succeed_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a");
    let dev = FileDev::create(&path, &FileOptions::default()).unwrap();
    block_on(dev.write(0, b"hello", WriteFlags { fua: true })).unwrap();
    block_on(dev.write(5, b" world", WriteFlags::default())).unwrap();
    block_on(dev.flush()).unwrap();
    drop(dev);
    let dev = FileDev::open(&path, &FileOptions::default()).unwrap();
    assert_eq!(dev.len(), 11);
    assert_eq!(read_vec(&dev, 0, 11), b"hello world");
}

#[test]
fn read_only_refuses_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a");
    std::fs::write(&path, [1u8; 4096]).unwrap();
    let opts = FileOptions {
        read_only: true,
        ..FileOptions::default()
    };
    let dev = FileDev::open(&path, &opts).unwrap();
    assert_same(&read_vec(&dev, 0, 4096), &[1; 4096], "read-only read");
    let errs = [
        block_on(dev.write(0, &[2], WriteFlags::default())).unwrap_err(),
        block_on(dev.write_zeroes(0, 10, ZeroFlags::default())).unwrap_err(),
        block_on(dev.discard(0, 10)).unwrap_err(),
        block_on(dev.truncate(0)).unwrap_err(),
    ];
    let ops = [
        IoOp::Write,
        IoOp::WriteZeroes,
        IoOp::Discard,
        IoOp::Truncate,
    ];
    for (err, want) in errs.iter().zip(ops) {
        match err {
            DevError::Os { op, message, .. } => {
                assert_eq!(*op, want);
                assert!(message.contains("read-only"), "{message}");
            }
            other => panic!("unexpected error {other:?}"),
        }
    }
    block_on(dev.flush()).unwrap();
    assert_same(
        &std::fs::read(&path).unwrap(),
        &[1; 4096],
        "file after refusals",
    );
}

#[test]
fn open_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.img");
    let err = FileDev::open(&missing, &FileOptions::default()).unwrap_err();
    assert!(err.to_string().contains("missing.img"), "{err}");
    let err = FileDev::open(dir.path(), &FileOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("not a regular file") || err.to_string().contains("directory"),
        "{err}"
    );
    let zero_threads = FileOptions {
        threads: 0,
        ..FileOptions::default()
    };
    let err = FileDev::create(dir.path().join("x"), &zero_threads).unwrap_err();
    assert!(err.to_string().contains("threads"), "{err}");
}

#[test]
fn ranges_beyond_the_largest_offset_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let dev = new_dev(&dir, "a", &FileOptions::default());
    let err = block_on(dev.write(u64::MAX - 1, &[1, 2, 3], WriteFlags::default())).unwrap_err();
    assert!(
        matches!(
            err,
            DevError::Os {
                op: IoOp::Write,
                errno: Some(22),
                ..
            }
        ),
        "{err:?}"
    );
    let err = block_on(dev.write_zeroes(i64::MAX as u64, 2, ZeroFlags::default())).unwrap_err();
    assert!(
        matches!(
            err,
            DevError::Os {
                op: IoOp::WriteZeroes,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(dev.len(), 0);
}

/// Many overlapping-free requests in flight at once, in a random order,
/// on a pool smaller than the queue depth, checked against a model.
#[test]
fn many_concurrent_requests_match_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let pool = IoPool::new(4).unwrap();
    let dev =
        FileDev::create_in(dir.path().join("a"), &FileOptions::default(), pool.clone()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(0x5eed);
    const SLOT: u64 = 8192;
    const SLOTS: u64 = 128;
    let mut model = vec![0u8; (SLOT * SLOTS) as usize];
    // Each round issues one request per slot (disjoint ranges), 128 deep.
    for round in 0..4u8 {
        let mut writes = Vec::new();
        for slot in 0..SLOTS {
            let off = slot * SLOT + rng.gen_range(0..1024);
            let len = rng.gen_range(1..(SLOT as usize - 1024));
            let data = pattern(round.wrapping_mul(7).wrapping_add(slot as u8), len);
            model[off as usize..off as usize + len].copy_from_slice(&data);
            writes.push((off, data));
        }
        let results = block_on(join_all(
            writes
                .iter()
                .map(|(off, data)| dev.write(*off, data, WriteFlags::default())),
        ));
        assert!(results.iter().all(Result::is_ok));
        let mut zeroes = Vec::new();
        for slot in (0..SLOTS).filter(|s| s % 5 == round as u64 % 5) {
            let off = slot * SLOT + rng.gen_range(0..SLOT / 2);
            let len = rng.gen_range(1..SLOT / 2);
            model[off as usize..(off + len) as usize].fill(0);
            zeroes.push((off, len));
        }
        let results =
            block_on(join_all(zeroes.iter().map(|&(off, len)| {
                dev.write_zeroes(off, len, ZeroFlags::default())
            })));
        assert!(results.iter().all(Result::is_ok));
        let mut bufs: Vec<Vec<u8>> = (0..SLOTS).map(|_| vec![0xee; SLOT as usize]).collect();
        let reads = bufs
            .iter_mut()
            .enumerate()
            .map(|(slot, buf)| dev.read(slot as u64 * SLOT, buf));
        let results = block_on(join_all(reads));
        assert!(results.iter().all(Result::is_ok));
        for (slot, buf) in bufs.iter().enumerate() {
            let at = slot * SLOT as usize;
            assert!(
                buf[..] == model[at..at + SLOT as usize],
                "round {round}: slot {slot} differs from the model"
            );
        }
    }
    assert_eq!(pool.threads(), 4);
}

/// O_DIRECT mixes aligned (direct) and unaligned (buffered) requests on one
/// file; both must see each other's data.
#[test]
fn direct_mode_mixes_aligned_and_unaligned_requests() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dev) = direct_dev(&dir, "d") else {
        return;
    };
    assert!(dev.is_direct());
    let aligned = pattern(4, 64 << 10);
    block_on(dev.write(0, &aligned, WriteFlags::default())).unwrap();
    // An unaligned write inside the aligned range goes the buffered way.
    block_on(dev.write(1000, &[0x11; 3000], WriteFlags { fua: true })).unwrap();
    let mut model = aligned.clone();
    model[1000..4000].fill(0x11);
    // Aligned read (direct) sees the buffered write; unaligned read too.
    assert_same(&read_vec(&dev, 0, 64 << 10), &model, "aligned read");
    assert_same(
        &read_vec(&dev, 999, 3002),
        &model[999..4001],
        "unaligned read",
    );
    // An aligned read past the end of the file is zero-filled.
    let tail = read_vec(&dev, 60 << 10, 16 << 10);
    assert_same(&tail[..4 << 10], &model[60 << 10..], "tail");
    assert!(tail[4 << 10..].iter().all(|&b| b == 0));
    block_on(dev.flush()).unwrap();
    // A file whose end is not aligned: an aligned read across that end
    // stops at it (no unaligned retry, which O_DIRECT would refuse).
    block_on(dev.truncate(5000)).unwrap();
    let got = read_vec(&dev, 0, 8192);
    assert_same(&got[..5000], &model[..5000], "before the unaligned end");
    assert!(
        got[5000..].iter().all(|&b| b == 0),
        "past the unaligned end"
    );
}

/// A request with nothing else in flight runs on the caller's thread: from
/// and into the caller's memory when O_DIRECT can use it (an `IoBuf`),
/// through a bounce buffer when not; requests issued together go to the
/// workers. Each way reads back what the others wrote, and zeroes past
/// the end of the file.
#[test]
fn a_request_alone_runs_on_the_callers_thread_and_requests_together_do_not() {
    let dir = tempfile::tempdir().unwrap();
    // tmpfs: the buffered descriptor alone still takes both ways.
    let dev = direct_dev(&dir, "d").unwrap_or_else(|| new_dev(&dir, "d", &FileOptions::default()));
    let alone = |dev: &FileDev| dev.pool().alone_runs();
    let before = alone(&dev);
    let mut aligned = IoBuf::aligned_filled(8192, 0xa5);
    block_on(dev.write(4096, aligned.as_slice(), WriteFlags::default())).unwrap();
    // Aligned offset and length, memory one byte off alignment.
    let odd = pattern(7, 4097);
    block_on(dev.write(12288, &odd[1..], WriteFlags { fua: true })).unwrap();
    block_on(dev.write(100, &[0x3c; 50], WriteFlags::default())).unwrap();
    assert_eq!(alone(&dev) - before, 3, "three requests, each alone");
    let mut model = vec![0u8; 16384];
    model[100..150].fill(0x3c);
    model[4096..12288].fill(0xa5);
    model[12288..].copy_from_slice(&odd[1..]);
    // Into aligned memory, across the end of the file.
    let mut back = IoBuf::aligned_filled(20480, 0xee);
    block_on(dev.read(0, back.as_mut_slice())).unwrap();
    assert_same(&back.as_slice()[..16384], &model, "aligned read");
    assert!(
        back.as_slice()[16384..].iter().all(|&b| b == 0),
        "past the end"
    );
    assert_same(
        &read_vec(&dev, 4096, 12288),
        &model[4096..],
        "unaligned memory",
    );
    assert_eq!(alone(&dev) - before, 5);

    // Eight writes issued together: the first to decide sees seven others
    // deciding and hands its job to a worker, and so on; at most the last
    // ones can find the pool idle.
    let datas: Vec<Vec<u8>> = (0..8).map(|i| pattern(20 + i, 4096)).collect();
    let at = |i: usize| 65536 + 4096 * i as u64;
    let before = alone(&dev);
    let results = block_on(join_all(
        datas
            .iter()
            .enumerate()
            .map(|(i, d)| dev.write(at(i), d, WriteFlags::default())),
    ));
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(alone(&dev) - before < 8, "all eight ran alone");
    aligned.as_mut_slice().fill(0);
    for (i, d) in datas.iter().enumerate() {
        block_on(dev.read(at(i), &mut aligned.as_mut_slice()[..4096])).unwrap();
        assert_same(&aligned.as_slice()[..4096], d, "written together");
    }
}

/// The engine on a real file at queue depth 64: completions now arrive on
/// worker threads in whatever order the kernel finishes them. Each round
/// issues one request per 96 KiB slot (slots share clusters, requests never
/// share bytes), then reads every slot back concurrently against a model;
/// at the end `qemu-img check` must find the image clean and `qemu-img
/// convert` must read the model.
#[test]
fn engine_on_a_real_file_at_queue_depth_64() {
    use engine::{CreateOptions, EngineOptions, Image, Switches};

    const SLOT: u64 = 96 << 10;
    const DEPTH: u64 = 64;
    const SIZE: u64 = SLOT * DEPTH;
    for (cluster_size, switches) in [
        (65536, Switches::ALL_ON),
        (4096, Switches::ALL_ON),
        (65536, Switches::ALL_OFF),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.qcow2");
        let dev = FileDev::create(&path, &FileOptions::default()).unwrap();
        let create = CreateOptions {
            size: SIZE,
            cluster_size,
            ..CreateOptions::default()
        };
        block_on(Image::create(&dev, &create)).unwrap();
        let opts = EngineOptions {
            switches,
            ..EngineOptions::default()
        };
        let image = block_on(Image::open(dev, opts)).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(cluster_size ^ u64::from(switches.mask()));
        let mut model = vec![0u8; SIZE as usize];
        for round in 0..6u8 {
            let mut ops = Vec::new();
            for slot in 0..DEPTH {
                let off = slot * SLOT + rng.gen_range(0..SLOT / 2);
                let len = rng.gen_range(1..=slot * SLOT + SLOT - off);
                let range = off as usize..(off + len) as usize;
                if rng.gen_range(0..6) == 0 {
                    model[range].fill(0);
                    ops.push((off, len, None));
                } else {
                    let data = pattern(round ^ (slot as u8).wrapping_mul(3), len as usize);
                    model[range].copy_from_slice(&data);
                    ops.push((off, len, Some(data)));
                }
            }
            let image = &image;
            let results = block_on(join_all(ops.iter().map(|(off, len, data)| async move {
                match data {
                    Some(d) => image.write(*off, d).await,
                    None => image.write_zeroes(*off, *len, *off % 2 == 0).await,
                }
            })));
            for r in results {
                r.unwrap();
            }
            let mut bufs: Vec<Vec<u8>> = (0..DEPTH).map(|_| vec![0xee; SLOT as usize]).collect();
            let results = block_on(join_all(
                bufs.iter_mut()
                    .enumerate()
                    .map(|(slot, buf)| image.read(slot as u64 * SLOT, buf)),
            ));
            for r in results {
                r.unwrap();
            }
            for (slot, buf) in bufs.iter().enumerate() {
                let at = slot * SLOT as usize;
                assert_same(
                    buf,
                    &model[at..at + SLOT as usize],
                    &format!("cluster {cluster_size}, round {round}, slot {slot}"),
                );
            }
            if round % 2 == 1 {
                block_on(image.flush()).unwrap();
            }
        }
        drop(block_on(image.close()).unwrap());

        let check = std::process::Command::new("qemu-img")
            .args(["check", "--output", "json"])
            .arg(&path)
            .output()
            .expect("run qemu-img (install qemu-utils)");
        assert!(
            check.status.success(),
            "qemu-img check (cluster {cluster_size}): {}",
            String::from_utf8_lossy(&check.stdout)
        );
        let raw = dir.path().join("q.raw");
        let convert = std::process::Command::new("qemu-img")
            .args(["convert", "-O", "raw"])
            .arg(&path)
            .arg(&raw)
            .status()
            .expect("run qemu-img");
        assert!(convert.success());
        assert_same(
            &std::fs::read(&raw).unwrap(),
            &model,
            &format!("qemu-img's reading (cluster {cluster_size})"),
        );
    }
}
