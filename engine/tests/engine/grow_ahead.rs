//! Growing the image file ahead of allocation (zero_cow, seed 001's second
//! point): sequential writes extend the file only through the engine's
//! zeroing requests, which never touch a byte anything was written to;
//! closing trims the file back to the image's end; a crash leaves only
//! unreferenced zeroes that `qemu-img check` accepts; a device that cannot
//! zero efficiently is asked once. Clusters the growth zeroed need no COW
//! request over zeroes, except where a write into them failed or where
//! they were used before.

use engine::dev::{BlockDev, Faulty, Injected, IoOp, MemDev, Recorder, Request};
use engine::{CreateOptions, EngineOptions, Image, Switches};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;

use crate::support::{assert_clean, qemu_raw, tool, YieldDev};

const C: u64 = 64 << 10;

/// Records every request; refuses efficient zeroing when `refuse` is set,
/// as a device without it does.
type RecDev = Recorder<Faulty<MemDev>>;

fn rec_dev(mem: MemDev, refuse: bool) -> RecDev {
    Recorder::new(Faulty::new(mem, move |op, _, _, _, flags| {
        (refuse && op == IoOp::WriteZeroes && flags.no_fallback).then_some(Injected::NotSupported)
    }))
}

fn fresh(size: u64) -> MemDev {
    let dev = MemDev::new();
    let co = CreateOptions {
        size,
        cluster_size: C,
        ..Default::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    dev
}

fn opts(switches: Switches, grow_ahead: u64) -> EngineOptions {
    EngineOptions {
        switches,
        grow_ahead,
        ..Default::default()
    }
}

fn byte(i: u64) -> u8 {
    (i * 7 + 3) as u8
}

/// `bytes` 4 KiB writes from offset 0, one at a time, then a flush.
fn write_sequentially(img: &Image<RecDev>, bytes: u64) {
    for i in 0..bytes / 4096 {
        block_on(img.write(i * 4096, &[byte(i); 4096])).unwrap();
    }
    block_on(img.flush()).unwrap();
}

/// Every write-like request the device saw, and the growing ones among
/// them (efficient zeroing: sequential writes make no COW to zero), which
/// the engine must have counted.
fn growth_seen(img: &Image<RecDev>) -> (Vec<Request>, Vec<Request>) {
    let seen: Vec<Request> = img
        .device()
        .requests()
        .into_iter()
        .filter(|r| matches!(r.op, IoOp::Write | IoOp::WriteZeroes))
        .collect();
    let grows: Vec<Request> = seen
        .iter()
        .filter(|s| s.op == IoOp::WriteZeroes && s.no_fallback)
        .copied()
        .collect();
    assert_eq!(grows.len() as u64, img.counters().grow_requests);
    (seen, grows)
}

fn expected(size: u64, bytes: u64) -> Vec<u8> {
    let mut v = vec![0u8; size as usize];
    for i in 0..bytes / 4096 {
        v[(i * 4096) as usize..((i + 1) * 4096) as usize].fill(byte(i));
    }
    v
}

/// The image's bytes in a file of a temporary directory.
fn to_file(dir: &tempfile::TempDir, name: &str, bytes: Vec<u8>) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn image_end_offset(path: &std::path::Path) -> u64 {
    let out = tool(
        "qemu-img",
        &["check", "--output", "json", path.to_str().unwrap()],
    );
    let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
    j["image-end-offset"].as_u64().expect("image-end-offset")
}

#[test]
fn sequential_writes_extend_the_file_only_by_growing_it() {
    let (size, bytes, step) = (64 << 20, 20 << 20, 8 << 20);
    let dev = rec_dev(fresh(size), false);
    let img = block_on(Image::open(dev, opts(Switches::ALL_ON, step))).unwrap();
    write_sequentially(&img, bytes);
    let (seen, grows) = growth_seen(&img);
    // 20 MiB of data and a few tables: the file grows in 8 MiB steps.
    assert!(
        (3..=4).contains(&grows.len()),
        "{} growths: {grows:?}",
        grows.len()
    );
    for (i, s) in seen.iter().enumerate() {
        match s.op {
            IoOp::Write => assert!(
                s.offset + s.len <= s.dev_len,
                "write {i} at {:#x}+{:#x} extends the file of {:#x}",
                s.offset,
                s.len,
                s.dev_len
            ),
            IoOp::WriteZeroes => {
                assert_eq!(s.offset % C, 0, "{s:?}");
                assert_eq!((s.offset + s.len) % step, 0, "{s:?}");
                // Nothing written before lies in the zeroed range.
                let touched = seen[..i]
                    .iter()
                    .map(|e| e.offset + e.len)
                    .max()
                    .unwrap_or(0);
                assert!(s.offset >= touched, "{s:?} zeroes over {touched:#x}");
            }
            _ => {}
        }
    }

    // Closing gives back what growing added past the image's end.
    let before_close = img.device().len();
    let dev = block_on(img.close()).unwrap();
    let len = dev.len();
    assert!(
        len < before_close,
        "{len:#x} after close, {before_close:#x} before"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = to_file(
        &dir,
        "closed.qcow2",
        dev.into_inner().into_inner().into_bytes(),
    );
    assert_clean(&path, "closed");
    assert_eq!(image_end_offset(&path), len);
    assert_eq!(qemu_raw(&path), expected(size, bytes));
}

#[test]
fn a_crash_leaves_only_unreferenced_zeroes_past_the_end() {
    let (size, bytes) = (32 << 20, 3 << 20);
    let dev = rec_dev(fresh(size), false);
    let img = block_on(Image::open(dev, opts(Switches::ALL_ON, 8 << 20))).unwrap();
    write_sequentially(&img, bytes);
    // What a crash right after the flush leaves: nothing more is written.
    let dev = img.into_device();
    let dir = tempfile::tempdir().unwrap();
    let path = to_file(
        &dir,
        "crashed.qcow2",
        dev.into_inner().into_inner().into_bytes(),
    );
    assert_clean(&path, "crashed");
    let file_len = std::fs::metadata(&path).unwrap().len();
    assert!(
        file_len >= image_end_offset(&path) + (4 << 20),
        "the zeroes grown ahead are still there: {file_len:#x}"
    );
    assert_eq!(qemu_raw(&path), expected(size, bytes));
}

#[test]
fn nothing_grows_without_zero_cow_or_with_grow_ahead_zero() {
    let zero_cow_off = Switches::ALL_ON.with("zero_cow", false).unwrap();
    for o in [
        opts(zero_cow_off, 8 << 20),
        opts(Switches::ALL_ON, 0),
        opts(Switches::ALL_OFF, 8 << 20),
    ] {
        let dev = rec_dev(fresh(16 << 20), false);
        let img = block_on(Image::open(dev, o.clone())).unwrap();
        write_sequentially(&img, 2 << 20);
        assert_eq!(img.counters().grow_requests, 0, "{o:?}");
        let extending = img
            .device()
            .requests()
            .iter()
            .filter(|s| s.op == IoOp::Write && s.offset + s.len > s.dev_len)
            .count();
        // Every cluster's first write extends the file instead.
        assert!(extending >= 32, "{o:?}: {extending}");
    }
}

#[test]
fn without_multi_cluster_the_file_grows_a_cluster_at_a_time() {
    let s = Switches::ALL_ON.with("multi_cluster", false).unwrap();
    let dev = rec_dev(fresh(16 << 20), false);
    let img = block_on(Image::open(dev, opts(s, 8 << 20))).unwrap();
    write_sequentially(&img, 2 << 20);
    let (_, grows) = growth_seen(&img);
    // 32 data clusters and an L2 table past the end of the new file.
    assert!(grows.len() >= 33, "{}", grows.len());
    assert!(grows.iter().all(|g| g.len == C), "{grows:?}");
}

#[test]
fn a_device_that_cannot_zero_efficiently_is_asked_once() {
    let dev = rec_dev(fresh(16 << 20), true);
    let img = block_on(Image::open(dev, opts(Switches::ALL_ON, 1 << 20))).unwrap();
    write_sequentially(&img, 4 << 20);
    assert_eq!(img.counters().grow_requests, 1);
    let dev = block_on(img.close()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = to_file(
        &dir,
        "refused.qcow2",
        dev.into_inner().into_inner().into_bytes(),
    );
    assert_clean(&path, "refused");
    assert_eq!(qemu_raw(&path), expected(16 << 20, 4 << 20));
}

/// Many writes in flight into fresh clusters while the file grows in small
/// steps, requests completing out of order: every byte reads back.
#[test]
fn concurrent_allocations_across_growth_steps_keep_every_byte() {
    let size = 16u64 << 20;
    for seed in 0..4 {
        let dev = YieldDev::new(fresh(size), seed);
        let img = block_on(Image::open(dev, opts(Switches::ALL_ON, 2 * C))).unwrap();
        let img = std::rc::Rc::new(img);
        let mut pool = LocalPool::new();
        // Interleaved streams: cluster k of stream s is guest cluster
        // 4k + s, so allocations race for the file's end.
        for s in 0..4u64 {
            let img = img.clone();
            pool.spawner()
                .spawn_local(async move {
                    for k in 0..24u64 {
                        let g = (4 * k + s) * C;
                        for i in 0..C / 8192 {
                            let off = g + i * 8192;
                            img.write(off, &[byte(off / 4096); 8192]).await.unwrap();
                        }
                    }
                })
                .unwrap();
        }
        pool.run();
        block_on(img.flush()).unwrap();
        assert!(img.counters().grow_requests > 1, "seed {seed}");
        let mut buf = vec![0u8; (96 * C) as usize];
        block_on(img.read(0, &mut buf)).unwrap();
        for (i, chunk) in buf.chunks(8192).enumerate() {
            let off = i as u64 * 8192;
            assert!(
                chunk.iter().all(|&b| b == byte(off / 4096)),
                "seed {seed}: guest {off:#x}"
            );
        }
        let img = std::rc::Rc::try_unwrap(img).ok().unwrap();
        let dev = block_on(img.close()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = to_file(&dir, "concurrent.qcow2", dev.inner.into_bytes());
        assert_clean(&path, &format!("seed {seed}"));
    }
}

/// Without delayed COW every first write of a cluster performs its zero
/// COW; in clusters growing has just zeroed that takes no request, and
/// the tails still read (and after a crash, recover) as zeroes.
#[test]
fn grown_clusters_need_no_zeroing_for_their_cow() {
    let s = Switches::ALL_ON.with("delayed_cow", false).unwrap();
    let (size, bytes) = (16 << 20, 2 << 20);
    let dev = rec_dev(fresh(size), false);
    let img = block_on(Image::open(dev, opts(s, 8 << 20))).unwrap();
    // One 4 KiB write at the start of each cluster: 60 KiB of zero COW.
    let mut want = vec![0u8; size as usize];
    for k in 0..bytes / C {
        block_on(img.write(k * C, &[byte(k); 4096])).unwrap();
        want[(k * C) as usize..(k * C + 4096) as usize].fill(byte(k));
    }
    block_on(img.flush()).unwrap();
    let c = img.counters();
    assert_eq!(c.cow_performed, bytes / C);
    assert_eq!(c.cow_already_zero, bytes / C);
    assert_eq!(c.zeroing_requests, 0);
    let (_, grows) = growth_seen(&img);
    assert_eq!(
        img.device()
            .requests()
            .iter()
            .filter(|e| e.op == IoOp::WriteZeroes)
            .count(),
        grows.len(),
        "every zeroing request grew the file"
    );
    let dev = img.into_device();
    let dir = tempfile::tempdir().unwrap();
    let path = to_file(
        &dir,
        "crashed.qcow2",
        dev.into_inner().into_inner().into_bytes(),
    );
    assert_clean(&path, "crashed after flush");
    assert_eq!(qemu_raw(&path), want);
}

/// A cluster freed and handed out again is not fresh: its old data must
/// be zeroed over.
#[test]
fn a_reused_cluster_gets_its_cow_zeroed() {
    let s = Switches::ALL_ON.with("delayed_cow", false).unwrap();
    let dev = rec_dev(fresh(16 << 20), false);
    let img = block_on(Image::open(dev, opts(s, 8 << 20))).unwrap();
    block_on(img.write(0, &[0xaa; C as usize])).unwrap();
    block_on(img.flush()).unwrap();
    let old_host = block_on(img.host_offset(0)).unwrap().unwrap();
    block_on(img.discard(0, C)).unwrap();
    // The first flush makes the unmap durable, the second frees.
    block_on(img.flush()).unwrap();
    block_on(img.flush()).unwrap();
    block_on(img.write(5 * C, &[0xbb; 4096])).unwrap();
    block_on(img.flush()).unwrap();
    let host = block_on(img.host_offset(5 * C)).unwrap().unwrap();
    assert_eq!(host, old_host, "the freed cluster is reused");
    let c = img.counters();
    assert_eq!(c.zeroing_requests, 1, "{c:?}");
    let mut buf = vec![0u8; C as usize];
    block_on(img.read(5 * C, &mut buf)).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 0xbb));
    assert!(
        buf[4096..].iter().all(|&b| b == 0),
        "old data shows through"
    );
}

/// With delayed COW, a write that fails into a grown cluster may have left
/// anything there; the flush must write the zero COW over it after all.
#[test]
fn a_failed_write_into_a_grown_cluster_is_zeroed_over() {
    let mem = fresh(16 << 20);
    // The second data write fails after putting garbage where it was going.
    let dev = Faulty::new(mem, |op, nth, _, _, _| {
        (op == IoOp::Write && nth == 2).then_some(Injected::GarbageThenEio(0xee))
    });
    let img = block_on(Image::open(dev, opts(Switches::ALL_ON, 8 << 20))).unwrap();
    block_on(img.write(0, &[0x11; 4096])).unwrap();
    assert!(block_on(img.write(8192, &[0x22; 4096])).is_err());
    block_on(img.flush()).unwrap();
    let c = img.counters();
    assert!(c.zeroing_requests >= 1, "{c:?}");
    let mut buf = vec![0u8; C as usize];
    block_on(img.read(0, &mut buf)).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 0x11));
    assert!(
        buf[4096..].iter().all(|&b| b == 0),
        "the failed write's garbage shows"
    );
}

/// Write 4 KiB at offset 8 KiB of each of the first `clusters` clusters of
/// `img`, flush, and return what the guest must read for `size` bytes
/// given what was there (`before`).
fn write_mid_clusters<D: BlockDev>(img: &Image<D>, clusters: u64, mut before: Vec<u8>) -> Vec<u8> {
    for k in 0..clusters {
        let off = k * C + 8192;
        block_on(img.write(off, &[byte(k); 4096])).unwrap();
        before[off as usize..(off + 4096) as usize].fill(byte(k));
    }
    block_on(img.flush()).unwrap();
    before
}

/// Over a backing file that ends in the middle of a cluster, the COW of
/// grown clusters mixes backing data (copied) and zeroes past its end
/// (skipped): both read back right, in the engine and in QEMU.
#[test]
fn backing_data_is_copied_into_grown_clusters() {
    let size = 4u64 << 20;
    let base_len = 8 * C + C / 2;
    let base: Vec<u8> = (0..base_len).map(|i| (i / 512) as u8 | 1).collect();
    for s in [
        Switches::ALL_ON,
        Switches::ALL_ON.with("delayed_cow", false).unwrap(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("base.raw"), &base).unwrap();
        let dev = MemDev::new();
        let co = CreateOptions {
            size,
            cluster_size: C,
            backing_file: Some("base.raw".into()),
            backing_format: Some("raw".into()),
            ..Default::default()
        };
        block_on(Image::create(&dev, &co)).unwrap();
        let mut img = block_on(Image::open(dev, opts(s, 1 << 20))).unwrap();
        img.attach_backing(engine::Backing::Raw(MemDev::from_bytes(base.clone())));
        let mut guest = base.clone();
        guest.resize(size as usize, 0);
        let want = write_mid_clusters(&img, 16, guest);
        let c = img.counters();
        assert!(c.grow_requests > 0, "{c:?}");
        let mut got = vec![0u8; size as usize];
        block_on(img.read(0, &mut got)).unwrap();
        assert!(got == want, "{s:?}: engine reads differ");
        let dev = block_on(img.close()).unwrap();
        let path = to_file(&dir, "overlay.qcow2", dev.into_bytes());
        assert_clean(&path, &format!("{s:?}"));
        assert!(qemu_raw(&path) == want, "{s:?}: qemu reads differ");
    }
}

/// Extended L2 entries: new clusters are filled a subcluster at a time,
/// and growing zeroes them first; QEMU reads what the guest wrote.
#[test]
fn extended_l2_images_grow_and_read_back() {
    let size = 8u64 << 20;
    for s in [
        Switches::ALL_ON,
        Switches::ALL_ON.with("delayed_cow", false).unwrap(),
    ] {
        let dev = MemDev::new();
        let co = CreateOptions {
            size,
            cluster_size: C,
            extended_l2: true,
            ..Default::default()
        };
        block_on(Image::create(&dev, &co)).unwrap();
        let img = block_on(Image::open(dev, opts(s, 1 << 20))).unwrap();
        let want = write_mid_clusters(&img, 40, vec![0u8; size as usize]);
        assert!(img.counters().grow_requests > 0);
        let dev = block_on(img.close()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = to_file(&dir, "xl2.qcow2", dev.into_bytes());
        assert_clean(&path, &format!("{s:?}"));
        assert!(qemu_raw(&path) == want, "{s:?}");
    }
}

/// Lazy refcounts: a crash leaves the dirty bit and the grown zeroes; the
/// reopen rebuilds the refcounts over the longer file, and the image
/// closes clean and trimmed.
#[test]
fn lazy_refcounts_crash_and_rebuild_over_grown_zeroes() {
    let size = 16u64 << 20;
    let dev = MemDev::new();
    let co = CreateOptions {
        size,
        cluster_size: C,
        lazy_refcounts: true,
        ..Default::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    let img = block_on(Image::open(dev, opts(Switches::ALL_ON, 8 << 20))).unwrap();
    let want = write_mid_clusters(&img, 48, vec![0u8; size as usize]);
    let crashed = img.into_device();
    let grown_len = crashed.len();
    let img = block_on(Image::open(crashed, EngineOptions::default())).unwrap();
    let mut got = vec![0u8; size as usize];
    block_on(img.read(0, &mut got)).unwrap();
    assert!(got == want, "after the rebuild");
    let dev = block_on(img.close()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = to_file(&dir, "lazy.qcow2", dev.into_bytes());
    assert_clean(&path, "lazy, rebuilt");
    assert!(qemu_raw(&path) == want);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len <= grown_len, "{len:#x} vs {grown_len:#x}");
}
