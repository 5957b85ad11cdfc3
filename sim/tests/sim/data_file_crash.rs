//! Images with an external data file on two simulated disks, one for the
//! image and one for the data file, crashed together at a seeded moment
//! while writes and flushes are in flight: each disk keeps what its own
//! flushes made durable and any mix of the rest. After the reopen, data
//! flushed before the crash reads back, every sector written since reads
//! old or new, the checker finds no corruption in the image file, and a
//! raw data file (data_file_raw) still reads as the disk does. The same with
//! extended L2 entries (2 KiB subclusters), where whole subclusters are
//! zeroed before the flush and the raw data file must follow that too.

use std::rc::Rc;

use engine::dev::BlockDev;
use engine::{CreateOptions, EngineOptions, Image};
use sim::disk::{DiskOptions, SimDisk};
use sim::exec::Sim;
use sim::rng::{stream, Stream};

const MIB: u64 = 1 << 20;
const SIZE: u64 = 8 * MIB;
/// Whole subclusters inside write 3's region, zeroed before the flush on
/// extended-L2 images.
const ZEROED: (u64, u64) = (3 * 200 * 1024 + 2048, 3 * 200 * 1024 + 6144);

fn pattern(tag: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (tag as usize * 31 + i / 512) as u8 | 1)
        .collect()
}

/// Region `t` of the first batch (flushed) and of the second (in flight).
fn region(t: u64) -> (u64, usize) {
    if t < 16 {
        (t * 200 * 1024 + 1536, 12 * 1024)
    } else {
        ((t - 16) * 200 * 1024 + 100 * 1024, 8 * 1024)
    }
}

/// Create the image and its data file, write the first batch from 16 tasks
/// at once, flush, start the second batch (each write then a flush) and
/// stop everything at a seeded moment. With `extended`, the image has
/// extended L2 entries and `ZEROED` is zeroed before the flush.
fn crash_during_writes(seed: u64, raw: bool, extended: bool) -> (Sim, SimDisk, SimDisk) {
    let sim = Sim::new(seed);
    let image = sim.disk(DiskOptions::default()).unwrap();
    let data = sim.disk(DiskOptions::default()).unwrap();
    let co = CreateOptions {
        size: SIZE,
        cluster_size: 65536,
        data_file: Some("disk.data".into()),
        data_file_raw: raw,
        extended_l2: extended,
        ..CreateOptions::default()
    };
    let (i, d) = (image.clone(), data.clone());
    sim.block_on(async move { Image::create_with_data(&i, Some(&d), &co).await.unwrap() })
        .unwrap();
    let (i, d) = (image.clone(), data.clone());
    let img = sim
        .block_on(async move {
            Image::open_with_data(i, Some(d), EngineOptions::default())
                .await
                .unwrap()
        })
        .unwrap();
    let img = Rc::new(img);
    for t in 0..16u64 {
        let img = img.clone();
        sim.spawn(async move {
            let (off, len) = region(t);
            img.write(off, &pattern(t, len)).await.unwrap();
        });
    }
    sim.run().unwrap();
    let i = img.clone();
    sim.block_on(async move {
        if extended {
            let (s, e) = ZEROED;
            i.write_zeroes(s, e - s, false).await.unwrap();
        }
        i.flush().await.unwrap()
    })
    .unwrap();
    for t in 16..32u64 {
        let img = img.clone();
        sim.spawn(async move {
            let (off, len) = region(t);
            let _ = img.write(off, &pattern(t, len)).await;
            let _ = img.flush().await;
        });
    }
    let now = sim.now();
    sim.run_until_time(now + 50_000 + seed * 37_000 % 1_000_000)
        .unwrap();
    sim.abort_all();
    drop(img);
    (sim, image, data)
}

fn read_all(sim: &Sim, disk: &SimDisk, len: u64) -> Vec<u8> {
    let d = disk.clone();
    sim.block_on(async move {
        let mut buf = vec![0u8; len as usize];
        d.read(0, &mut buf).await.unwrap();
        buf
    })
    .unwrap()
}

#[test]
fn data_file_images_survive_crashes_of_both_disks() {
    survive_crashes(false);
}

#[test]
fn extended_l2_data_file_images_survive_crashes_of_both_disks() {
    survive_crashes(true);
}

fn survive_crashes(extended: bool) {
    let mut pending = 0;
    for seed in 0..8u64 {
        let raw = seed % 2 == 1;
        let (sim, image, data) = crash_during_writes(seed, raw, extended);
        pending += image.pending_count() + data.pending_count();
        let mut rng_image = stream(seed, Stream::Crash);
        let mut rng_data = stream(seed ^ 0xda7a, Stream::Crash);
        for sample in 0..3 {
            let image = image.reopen(image.crash_image(&mut rng_image).unwrap().content);
            let data = data.reopen(data.crash_image(&mut rng_data).unwrap().content);
            let bytes = read_all(&sim, &image, image.len());
            let report = oracle::check::check(&bytes);
            assert!(
                report.failure.is_none() && report.corruptions == 0,
                "seed {seed} sample {sample}: {report:?}"
            );
            let (i, d) = (image.clone(), data.clone());
            let img = sim
                .block_on(async move {
                    Image::open_with_data(i, Some(d), EngineOptions::default()).await
                })
                .unwrap()
                .unwrap_or_else(|e| panic!("seed {seed}: reopen failed: {e}"));
            let img = Rc::new(img);
            let i = img.clone();
            let disk = sim
                .block_on(async move {
                    let mut buf = vec![0u8; SIZE as usize];
                    i.read(0, &mut buf).await.unwrap();
                    buf
                })
                .unwrap();
            for t in 0..32u64 {
                let (off, len) = region(t);
                let got = &disk[off as usize..off as usize + len];
                let mut new = pattern(t, len);
                if extended && (off..off + len as u64).contains(&ZEROED.0) {
                    let s = (ZEROED.0 - off) as usize;
                    new[s..s + (ZEROED.1 - ZEROED.0) as usize].fill(0);
                }
                for (s, (g, n)) in got.chunks(512).zip(new.chunks(512)).enumerate() {
                    let ok = g == n || (t >= 16 && g.iter().all(|&b| b == 0));
                    assert!(
                        ok,
                        "seed {seed} sample {sample}: write {t} sector {s} is neither old nor new"
                    );
                }
            }
            if raw {
                let file = read_all(&sim, &data, SIZE);
                assert!(file == disk, "seed {seed}: the raw data file is the disk");
            }
        }
    }
    assert!(pending > 0, "no crash left writes pending");
}
