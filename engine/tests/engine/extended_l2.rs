//! Images with extended L2 entries (subclusters, incompatible bit 4):
//! images QEMU makes are read by the engine exactly as `qemu-img convert`
//! reads them; images the engine creates and writes (every switch
//! combination, concurrent requests, a backing file) match an in-test model
//! and pass `qemu-img check`; hostile 128-bit entries are refused with a
//! typed error.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use engine::dev::{BlockDev, CountingDev, DevCounts, MemDev};
use engine::{Backing, Compat, CreateOptions, EngineOptions, Error, Image, Switches};
use futures::executor::{block_on, LocalPool};
use futures::task::LocalSpawnExt;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::support::{assert_clean, qemu_create, qemu_io, qemu_raw, YieldDev, YieldN};

/// Open an image file and its qcow2 backing chain through the engine, each
/// file's bytes on the device `wrap` makes of them.
fn open_chain<D: BlockDev>(
    path: &Path,
    opts: EngineOptions,
    wrap: &dyn Fn(MemDev) -> D,
) -> Image<D> {
    let dev = wrap(MemDev::from_bytes(std::fs::read(path).unwrap()));
    let mut img = block_on(Image::open(dev, opts)).expect("engine opens the image");
    if let Some((name, fmt)) = img.backing_spec() {
        let p = PathBuf::from(&name);
        let p = if p.is_absolute() {
            p
        } else {
            path.parent().unwrap().join(p)
        };
        let b = if fmt.as_deref() == Some("raw") {
            Backing::Raw(wrap(MemDev::from_bytes(std::fs::read(&p).unwrap())))
        } else {
            let ro = EngineOptions {
                read_only: true,
                ..Default::default()
            };
            Backing::Qcow2(Box::new(open_chain(&p, ro, wrap)))
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
        &|m| m,
    );
    let mut buf = vec![0u8; img.virtual_size() as usize];
    block_on(img.read(0, &mut buf)).expect("engine reads the image");
    buf
}

/// qemu-io commands that leave clusters in every subcluster state: partial
/// subclusters written (so allocated next to unallocated), zeroed with and
/// without unmapping, discarded, and rewritten.
fn subcluster_scribble(cs: u64, size: u64) -> Vec<String> {
    let sc = cs / 32;
    let mut cmds = vec![];
    let mut base = 0u64;
    let mut i = 0u64;
    while base + 4 * cs <= size && i < 24 {
        let c = match i % 8 {
            0 => format!("write -P {} {} {}", 0x11 + i, base + sc + 512, 512),
            1 => format!("write -P {} {} {}", 0x20 + i, base + 3 * sc, 2 * sc),
            2 => format!("write -P {} {} {}", 0x30 + i, base + cs - sc / 2, cs),
            3 => format!("write -z {} {}", base + 2 * sc, 5 * sc),
            4 => format!("write -z -u {} {}", base, cs),
            5 => format!("discard {} {}", base + cs, cs),
            6 => format!("write -z -u {} {}", base + 4 * sc, 3 * sc),
            _ => format!("write -P {} {} {}", 0x60 + i, base + 7 * sc - 512, 3 * cs),
        };
        cmds.push(c);
        // Overlap earlier work now and then.
        if i % 3 == 2 {
            cmds.push(format!("write -P 0xa5 {} {}", base + 5 * sc, sc + 1024));
        }
        base += (size / 19).next_multiple_of(cs) + 2 * sc;
        base = base.next_multiple_of(512);
        i += 1;
    }
    cmds
}

#[test]
fn engine_reads_what_qemu_wrote_with_extended_l2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for cs in [16384u64, 65536, 2 << 20] {
        let size = if cs >= 1 << 20 { 64u64 << 20 } else { 8 << 20 };
        // A standard base, and an extended-L2 base for the overlays.
        let base = d.join(format!("base{cs}.qcow2"));
        qemu_create(
            &base,
            &format!("cluster_size={cs}"),
            &size.to_string(),
            None,
        );
        qemu_io(
            &base,
            &[
                format!("write -P 0x5b 0 {}", size / 2),
                format!("write -P 0x5c {} {}", size / 2 + 4096, cs * 3),
            ],
        );
        let mid = d.join(format!("mid{cs}.qcow2"));
        qemu_create(
            &mid,
            &format!("cluster_size={cs},extended_l2=on"),
            &size.to_string(),
            Some((base.file_name().unwrap().to_str().unwrap(), "qcow2")),
        );
        qemu_io(&mid, &subcluster_scribble(cs, size));
        let alone = d.join(format!("alone{cs}.qcow2"));
        qemu_create(
            &alone,
            &format!("cluster_size={cs},extended_l2=on"),
            &size.to_string(),
            None,
        );
        qemu_io(&alone, &subcluster_scribble(cs, size));
        let top = d.join(format!("top{cs}.qcow2"));
        qemu_create(
            &top,
            &format!("cluster_size={cs},extended_l2=on"),
            &size.to_string(),
            Some((mid.file_name().unwrap().to_str().unwrap(), "qcow2")),
        );
        qemu_io(
            &top,
            &[
                format!("write -P 0x77 {} 1024", cs / 32 * 5 + 512),
                format!("write -z {} {}", cs * 2 + 512, cs / 4),
            ],
        );
        for p in [&mid, &alone, &top] {
            assert!(
                engine_raw(p) == qemu_raw(p),
                "{}: the engine reads other data than qemu-img",
                p.display()
            );
        }
    }
}

/// Where an engine workload starts from.
enum Start {
    /// `Image::create` with extended L2 entries, over a raw backing file
    /// (shorter than the disk) or none.
    Fresh {
        cluster_size: u64,
        size: u64,
        backing: bool,
    },
    /// An image file (QEMU's, perhaps with a backing chain).
    File(PathBuf),
}

/// Run seeded concurrent batches of writes, zeroes and discards at
/// subcluster-sized (and odd) offsets, checking reads against a model; then
/// close, and have `qemu-img check` and `qemu-img convert` judge the image.
fn run_workload(seed: u64, start: &Start, switches: Switches, batches: usize, dir: &Path) {
    let what = format!("seed {seed} switches {:#07b}", switches.mask());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let opts = EngineOptions {
        switches,
        l2_cache_tables: 2 + seed as usize % 3,
        refcount_cache_tables: 2 + seed as usize % 3,
        ..Default::default()
    };
    let (img, mut model) = match start {
        Start::Fresh {
            cluster_size,
            size,
            backing,
        } => {
            let dev = MemDev::new();
            let backing_path = dir.join(format!("backing-{seed}.raw"));
            let co = CreateOptions {
                size: *size,
                cluster_size: *cluster_size,
                extended_l2: true,
                backing_file: backing.then(|| backing_path.to_str().unwrap().to_string()),
                backing_format: backing.then(|| "raw".to_string()),
                ..Default::default()
            };
            block_on(Image::create(&dev, &co)).expect("create");
            let mut img = block_on(Image::open(YieldDev::new(dev, seed), opts)).expect("open");
            let mut model = vec![0u8; *size as usize];
            if *backing {
                let mut b = vec![0u8; (*size - *size / 4) as usize];
                rng.fill(&mut b[..]);
                std::fs::write(&backing_path, &b).unwrap();
                model[..b.len()].copy_from_slice(&b);
                img.attach_backing(Backing::Raw(YieldDev::new(MemDev::from_bytes(b), !seed)));
            }
            (img, model)
        }
        Start::File(path) => {
            let img = open_chain(path, opts, &|m| YieldDev::new(m, seed));
            (img, qemu_raw(path))
        }
    };
    let size = img.virtual_size();
    let cs = img.cluster_size();
    let sc = cs / 32;
    let img = std::rc::Rc::new(img);
    let mut pool = LocalPool::new();
    let mut write_id = 0u8;
    for _ in 0..batches {
        let mut taken: Vec<(u64, u64)> = Vec::new();
        for _ in 0..rng.gen_range(1..8) {
            let len = match rng.gen_range(0..5) {
                0 => rng.gen_range(1..=4u64) * 512,
                1 => rng.gen_range(1..=3 * cs),
                2 => sc * rng.gen_range(1..=40u64),
                3 => cs,
                _ => rng.gen_range(1..=4096u64),
            }
            .min(size);
            let mut off = rng.gen_range(0..=size - len);
            if rng.gen_bool(0.5) {
                off -= off % sc;
            }
            if taken.iter().any(|&(a, b)| a < off + len && off < b) {
                continue;
            }
            taken.push((off, off + len));
            write_id = write_id.wrapping_add(1);
            let img = img.clone();
            let range = off as usize..(off + len) as usize;
            match rng.gen_range(0..12) {
                0 | 1 => {
                    model[range].fill(0);
                    let unmap = rng.gen_bool(0.5);
                    pool.spawner()
                        .spawn_local(async move {
                            img.write_zeroes(off, len, unmap).await.expect("zeroes")
                        })
                        .unwrap();
                }
                2 => {
                    // Whole clusters read as zeroes after a discard (v3);
                    // partial clusters at the ends are left alone.
                    let s = off.next_multiple_of(cs);
                    let e = if off + len == size {
                        size
                    } else {
                        (off + len) / cs * cs
                    };
                    if s < e {
                        model[s as usize..e as usize].fill(0);
                    }
                    pool.spawner()
                        .spawn_local(async move { img.discard(off, len).await.expect("discard") })
                        .unwrap();
                }
                _ => {
                    let data: Vec<u8> = (0..len)
                        .map(|i| write_id ^ (i as u8).wrapping_mul(31))
                        .collect();
                    model[range].copy_from_slice(&data);
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
        for _ in 0..2 {
            let len = rng.gen_range(1..=cs * 2).min(size);
            let off = rng.gen_range(0..=size - len);
            let mut buf = vec![0u8; len as usize];
            pool.run_until(img.read(off, &mut buf)).expect("read");
            assert!(
                buf == model[off as usize..(off + len) as usize],
                "{what}: read at {off}+{len} differs from the model"
            );
        }
    }
    let mut all = vec![0u8; size as usize];
    pool.run_until(img.read(0, &mut all)).expect("read all");
    assert!(
        all == model,
        "{what}: whole-disk read differs from the model"
    );
    let img = std::rc::Rc::try_unwrap(img).ok().expect("sole owner");
    let dev = pool.run_until(img.close()).expect("close");
    let path = match start {
        Start::File(p) => p.clone(),
        Start::Fresh { .. } => dir.join(format!("ext-{seed}.qcow2")),
    };
    std::fs::write(&path, dev.inner.into_bytes()).unwrap();
    assert_clean(&path, &what);
    assert!(
        qemu_raw(&path) == model,
        "{what}: qemu-img reads other data than the model"
    );
    assert!(
        engine_raw(&path) == model,
        "{what}: the engine reads other data than the model after reopening"
    );
}

#[test]
fn engine_writes_extended_l2_images_under_every_switch_combination() {
    let dir = tempfile::tempdir().unwrap();
    for mask in 0..32u8 {
        let start = Start::Fresh {
            cluster_size: if mask % 2 == 0 { 16384 } else { 65536 },
            size: 2 << 20,
            backing: mask % 3 != 0,
        };
        run_workload(
            2000 + mask as u64,
            &start,
            Switches::from_mask(mask),
            12,
            dir.path(),
        );
    }
}

#[test]
fn engine_writes_into_qemu_extended_l2_images_over_a_backing_chain() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (i, cs) in [16384u64, 65536, 2 << 20].into_iter().enumerate() {
        let size = if cs >= 1 << 20 { 32u64 << 20 } else { 4 << 20 };
        let base = d.join(format!("base{cs}.qcow2"));
        qemu_create(
            &base,
            &format!("cluster_size={cs}"),
            &size.to_string(),
            None,
        );
        qemu_io(&base, &[format!("write -P 0x5b 0 {size}")]);
        let top = d.join(format!("top{cs}.qcow2"));
        qemu_create(
            &top,
            &format!("cluster_size={cs},extended_l2=on"),
            &size.to_string(),
            Some((base.file_name().unwrap().to_str().unwrap(), "qcow2")),
        );
        qemu_io(&top, &subcluster_scribble(cs, size));
        for (j, mask) in [0u8, 31, 16, 15].into_iter().enumerate() {
            let img = d.join(format!("w{cs}-{mask}.qcow2"));
            std::fs::copy(&top, &img).unwrap();
            run_workload(
                3000 + (i * 10 + j) as u64,
                &Start::File(img),
                Switches::from_mask(mask),
                10,
                d,
            );
        }
    }
}

#[test]
fn create_refuses_extended_l2_where_qemu_does() {
    for (co, why) in [
        (
            CreateOptions {
                size: 1 << 20,
                cluster_size: 8192,
                extended_l2: true,
                ..Default::default()
            },
            "cluster size",
        ),
        (
            CreateOptions {
                size: 1 << 20,
                compat: Compat::V2,
                extended_l2: true,
                ..Default::default()
            },
            "compat",
        ),
    ] {
        match block_on(Image::create(&MemDev::new(), &co)) {
            Err(Error::InvalidOption { name, reason }) => {
                assert_eq!(name, "extended_l2");
                assert!(reason.contains(why), "{reason:?} does not name {why:?}");
            }
            other => panic!("{why}: expected an invalid option, got {other:?}"),
        }
    }
    // The L1 table is sized for 16-byte entries: 64 KiB clusters map
    // 256 MiB per L2 table, so 1 GiB needs 4 L1 entries.
    let dev = MemDev::new();
    let co = CreateOptions {
        size: 1 << 30,
        extended_l2: true,
        ..Default::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    let h = img.header();
    assert_eq!(h.l1_size, 4);
    assert!(h.extended_l2());
}

/// One extended-L2 image with a written cluster, and the file offset of
/// the L2 entry mapping guest offset 0.
fn hostile_base() -> (Vec<u8>, usize) {
    let dev = MemDev::new();
    let co = CreateOptions {
        size: 4 << 20,
        cluster_size: 16384,
        extended_l2: true,
        ..Default::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(img.write(0, &[0xab; 16384])).unwrap();
    let bytes = block_on(img.close()).unwrap().into_bytes();
    let l1_off = u64::from_be_bytes(bytes[40..48].try_into().unwrap()) as usize;
    let l2_off =
        u64::from_be_bytes(bytes[l1_off..l1_off + 8].try_into().unwrap()) & 0x00ff_ffff_ffff_fe00;
    (bytes, l2_off as usize)
}

#[test]
fn hostile_extended_entries_are_typed_errors() {
    let (base, l2) = hostile_base();
    let word = u64::from_be_bytes(base[l2..l2 + 8].try_into().unwrap());
    let bitmap = u64::from_be_bytes(base[l2 + 8..l2 + 16].try_into().unwrap());
    assert_eq!(
        bitmap, 0xffff_ffff,
        "a written cluster has every subcluster allocated"
    );
    let host = word & 0x00ff_ffff_ffff_fe00;
    let cases: [(&str, u64, u64, &str); 5] = [
        (
            "alloc and zero",
            word,
            0x0000_0001_0000_0001,
            "both allocated and zero",
        ),
        ("alloc without host", 0, 0x10, "no host offset"),
        (
            "compressed with a bitmap",
            (1 << 62) | host,
            1,
            "compressed cluster with subcluster bitmap",
        ),
        ("reserved bit 0", word | 1, bitmap, "reserved bits"),
        ("reserved bit 0 unallocated", 1, 0, "reserved bits"),
    ];
    for (name, w, b, what) in cases {
        let mut bytes = base.clone();
        bytes[l2..l2 + 8].copy_from_slice(&w.to_be_bytes());
        bytes[l2 + 8..l2 + 16].copy_from_slice(&b.to_be_bytes());
        let img = block_on(Image::open(
            MemDev::from_bytes(bytes),
            EngineOptions::default(),
        ))
        .expect("the header is fine");
        let mut buf = vec![0u8; 4096];
        match block_on(img.read(1024, &mut buf)) {
            Err(Error::Corrupt { what: msg, .. }) => {
                assert!(msg.contains(what), "{name}: {msg:?} does not say {what:?}")
            }
            other => panic!("{name}: expected a corrupt-image error, got {other:?}"),
        }
        match block_on(img.write(512, &[1u8; 100])) {
            Err(Error::Corrupt { .. }) => {}
            other => panic!("{name}: write: expected a corrupt-image error, got {other:?}"),
        }
    }
    // An extended-L2 header with clusters below 16 KiB is refused on open.
    let mut bytes = base.clone();
    bytes[20..24].copy_from_slice(&13u32.to_be_bytes());
    match block_on(Image::open(
        MemDev::from_bytes(bytes),
        EngineOptions::default(),
    )) {
        Err(e) => assert!(e.to_string().contains("cluster_bits"), "{e}"),
        Ok(_) => panic!("opened an extended-L2 image with 8 KiB clusters"),
    }
}

/// Writes and zeroes to one cluster in flight together: in place into
/// allocated subclusters, filling unallocated ones (in place, or in a new
/// cluster when the old one is not COPIED), marking subclusters zero. No
/// copy may miss a write and no link may undo a zeroing, whatever order
/// the device completes them in.
#[test]
fn in_place_and_allocating_writes_to_one_cluster_race_safely() {
    let (mut base, l2) = hostile_base();
    // Subclusters 0..16, 18 and 25 allocated (0xab), the rest unallocated.
    base[l2 + 8..l2 + 16].copy_from_slice(&0x0204_ffffu64.to_be_bytes());
    // The same cluster without COPIED (as if shared): it is copied whole.
    let mut shared = base.clone();
    shared[l2] &= 0x7f;
    let sc = 16384 / 32;
    for seed in 0..40u64 {
        for mask in [0u8, 4, 13, 16, 31] {
            let opts = EngineOptions {
                switches: Switches::from_mask(mask),
                ..Default::default()
            };
            let bytes = if seed % 2 == 0 { &base } else { &shared };
            let dev = YieldDev::new(MemDev::from_bytes(bytes.clone()), seed);
            let img = std::rc::Rc::new(block_on(Image::open(dev, opts)).unwrap());
            let mut model = vec![0u8; 16384];
            model[..16 * sc].fill(0xab);
            model[18 * sc..19 * sc].fill(0xab);
            model[25 * sc..26 * sc].fill(0xab);
            let before = model.clone();
            let mut pool = LocalPool::new();
            // In place, new subclusters, in place, new subclusters whose
            // tail copies part of subcluster 18, in place in that part,
            // new subclusters around the allocated subcluster 25.
            let writes = [
                (2 * sc, 300),
                (20 * sc, 300),
                (7 * sc + 100, 300),
                (17 * sc, sc + 300),
                (18 * sc + 400, 50),
                (24 * sc + 100, 2 * sc),
            ];
            for (i, (at, len)) in writes.into_iter().enumerate() {
                let img = img.clone();
                let data = vec![0x10 + i as u8; len];
                model[at..at + len].copy_from_slice(&data);
                pool.spawner()
                    .spawn_local(async move { img.write(at as u64, &data).await.unwrap() })
                    .unwrap();
            }
            // Zeroes over allocated and unallocated subclusters, and whole
            // subclusters between partial ones.
            for (at, len) in [(12 * sc, 2 * sc), (21 * sc + 10, 3 * sc)] {
                let img = img.clone();
                model[at..at + len].fill(0);
                pool.spawner()
                    .spawn_local(async move {
                        img.write_zeroes(at as u64, len as u64, false)
                            .await
                            .unwrap()
                    })
                    .unwrap();
            }
            // Reads in flight with all that see each byte old or new.
            let seen = std::rc::Rc::new(RefCell::new(Vec::new()));
            for delay in [0, 3, 7, 12] {
                let (img, seen) = (img.clone(), seen.clone());
                pool.spawner()
                    .spawn_local(async move {
                        YieldN(delay).await;
                        let mut buf = vec![0u8; 16384];
                        img.read(0, &mut buf).await.unwrap();
                        seen.borrow_mut().push(buf);
                    })
                    .unwrap();
            }
            pool.run();
            for buf in seen.borrow().iter() {
                if let Some(i) = (0..buf.len()).find(|&i| buf[i] != before[i] && buf[i] != model[i])
                {
                    panic!(
                        "seed {seed} switches {mask:#07b}: a concurrent read saw {:#x} at byte {i}, \
                         neither old {:#x} nor new {:#x}",
                        buf[i], before[i], model[i]
                    );
                }
            }
            drop(seen);
            let img = std::rc::Rc::try_unwrap(img).ok().expect("sole owner");
            let mut buf = vec![0u8; 16384];
            pool.run_until(img.read(0, &mut buf)).unwrap();
            assert!(
                buf == model,
                "seed {seed} switches {mask:#07b}: lost a write"
            );
            let dev = pool.run_until(img.close()).unwrap();
            let img = block_on(Image::open(dev.inner, EngineOptions::default())).unwrap();
            block_on(img.read(0, &mut buf)).unwrap();
            assert!(
                buf == model,
                "seed {seed} switches {mask:#07b}: after reopening"
            );
        }
    }
}

/// 4 KiB random writes into a fresh 64 KiB-cluster image: what the device
/// is asked to write, with and without extended L2 entries. Subclusters
/// (2 KiB here) need no COW for 4 KiB-aligned writes; whole clusters need
/// 60 KiB of it per first write into a cluster. Run with `--nocapture` to
/// see the figures.
#[test]
fn subcluster_allocation_writes_less_than_whole_clusters() {
    let size = 256u64 << 20;
    for switches in [Switches::ALL_ON, Switches::ALL_OFF] {
        let mut figures = vec![];
        for extended_l2 in [false, true] {
            let dev = MemDev::new();
            let co = CreateOptions {
                size,
                extended_l2,
                ..Default::default()
            };
            block_on(Image::create(&dev, &co)).unwrap();
            let dev = CountingDev::new(dev);
            let opts = EngineOptions {
                switches,
                // Growing the file ahead zeroes new clusters, so that the
                // zero COW of a standard image costs nothing either (see
                // grow_ahead.rs): off, to see what subclusters alone save.
                grow_ahead: 0,
                ..Default::default()
            };
            let img = block_on(Image::open(dev, opts)).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            let n = 2000u64;
            for i in 0..n {
                let off = rng.gen_range(0..size / 4096) * 4096;
                block_on(img.write(off, &[i as u8; 4096])).unwrap();
            }
            block_on(img.flush()).unwrap();
            let c = img.counters();
            let dev = block_on(img.close()).unwrap();
            let io = dev.counts();
            let cs = co.cluster_size;
            let meta = (c.l2_writebacks + c.refcount_writebacks) * cs;
            println!(
                "switches {:#07b} extended_l2={extended_l2}: {n} writes of 4 KiB -> \
                 {} device writes, {} KiB written ({} KiB of it L2/refcount tables, \
                 {} KiB COW), {} zeroing requests, {} KiB zeroed",
                switches.mask(),
                io.writes,
                io.bytes_written >> 10,
                meta >> 10,
                c.cow_bytes_written >> 10,
                io.write_zeroes,
                io.bytes_zeroed >> 10
            );
            figures.push((io, c, meta));
        }
        let (std, ext) = (figures[0], figures[1]);
        let cow =
            |(io, c, _): (DevCounts, engine::Counters, u64)| c.cow_bytes_written + io.bytes_zeroed;
        let total =
            |(io, _, _): (DevCounts, engine::Counters, u64)| io.bytes_written + io.bytes_zeroed;
        assert!(cow(std) > 0, "whole clusters need COW: {std:?}");
        assert_eq!(
            cow(ext),
            0,
            "4 KiB-aligned writes cover whole 2 KiB subclusters"
        );
        assert!(
            total(ext) < total(std),
            "subclusters ask less of the device: {} vs {} bytes",
            total(ext),
            total(std)
        );
    }
}

/// Random bit flips in the first L2 table's 128-bit entries (descriptor and
/// bitmap) of an image with data in every subcluster state: the engine
/// reads, writes, zeroes and discards through them without panicking.
#[test]
fn random_extended_entry_corruption_never_panics() {
    let (base, l2) = hostile_base();
    let img = block_on(Image::open(
        MemDev::from_bytes(base),
        EngineOptions::default(),
    ))
    .unwrap();
    let sc = 512u64;
    block_on(img.write(20 * 16384 + 3 * sc + 7, &[0x42; 3000])).unwrap();
    block_on(img.write_zeroes(40 * 16384 + 5 * sc, 4 * sc, false)).unwrap();
    block_on(img.write(60 * 16384, &[0x43; 16384 * 3])).unwrap();
    let base = block_on(img.close()).unwrap().into_bytes();
    let mut rng = ChaCha8Rng::seed_from_u64(43);
    let mut failed = 0;
    for _ in 0..600 {
        let mut b = base.clone();
        for _ in 0..rng.gen_range(1..4) {
            // Entries 0, 20, 40, 60..63: word or bitmap, any bit.
            let entry = [0usize, 20, 40, 60, 61, 62][rng.gen_range(0..6)];
            let at = l2 + entry * 16 + rng.gen_range(0..16);
            b[at] ^= 1 << rng.gen_range(0..8);
        }
        let img = block_on(Image::open(MemDev::from_bytes(b), EngineOptions::default()))
            .expect("the header and L1 are intact");
        let mut buf = vec![0u8; 16384 * 4];
        let mut results = vec![];
        for guest in [0u64, 20 * 16384, 40 * 16384, 60 * 16384] {
            results.push(block_on(img.read(guest, &mut buf)).is_ok());
            results.push(block_on(img.write(guest + 3 * sc + 100, &buf[..2000])).is_ok());
            results.push(block_on(img.write_zeroes(guest + sc, 3 * sc, false)).is_ok());
        }
        results.push(block_on(img.discard(0, 16384 * 64)).is_ok());
        results.push(block_on(img.flush()).is_ok());
        results.push(block_on(img.close()).is_ok());
        failed += results.iter().any(|ok| !ok) as u32;
    }
    // Worth something only if many flips were caught as corruption.
    assert!(failed > 100, "only {failed} of 600 corrupted images failed");
}
