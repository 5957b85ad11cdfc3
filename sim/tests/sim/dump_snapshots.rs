//! Snapshot tests (insta) of `oracle::dump` over images whose state is a
//! pure function of their inputs: one the engine writes directly, one left
//! by a crash in a fixed seeded run. A change in layout, allocation order
//! or writeback shows up here as a diff to review with `cargo insta review`.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;
use sim::case::Case;
use sim::runner::{run_case, RunOptions};
use sim::workload::Profile;

#[test]
fn dump_of_an_engine_written_image() {
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 4 << 20,
        cluster_size: 4096,
        refcount_bits: 16,
        ..Default::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(img.write(1000, &[1u8; 9000])).unwrap();
    block_on(img.write(2 << 20, &[2u8; 4096])).unwrap();
    block_on(img.write_zeroes(3 << 20, 65536, true)).unwrap();
    block_on(img.discard(2 << 20, 4096)).unwrap();
    let bytes = block_on(img.close()).unwrap().into_bytes();
    insta::assert_snapshot!(oracle::dump::dump(&bytes));
}

#[test]
fn dump_of_a_post_crash_image() {
    let dir = tempfile::tempdir().unwrap();
    // Seed 12: its case had 4 KiB clusters until hazard cycles gave it
    // 1 KiB ones (4 MiB disk; the dump is a few hundred lines); seed 3,
    // used before, has 512-byte clusters from the rare-path shapes, whose
    // dump runs to thousands of lines. Under the uniform schedule and
    // without latency outliers, so that only the engine's layout and the
    // workload move the snapshot.
    let mut case = Case::generate(12, Profile::Sequential);
    case.schedule = sim::exec::SchedulePolicy::Random;
    case.disk.latency.outliers = Default::default();
    let report = run_case(
        &case,
        &RunOptions {
            export: Some(dir.path().to_path_buf()),
        },
    );
    assert!(report.passed(), "{:?}", report.failures);
    let bytes = std::fs::read(dir.path().join("seed-12").join("crash-1.qcow2"))
        .expect("exported crash image");
    insta::assert_snapshot!(oracle::dump::dump(&bytes));
}

#[test]
fn dump_of_an_extended_l2_image() {
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 4 << 20,
        cluster_size: 64 << 10,
        extended_l2: true,
        ..Default::default()
    };
    block_on(Image::create(&dev, &o)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    // Subclusters are 2 KiB: this touches subclusters 0..=2 of cluster 0.
    block_on(img.write(1024, &[1u8; 4096])).unwrap();
    block_on(img.write(1 << 20, &[2u8; 65536])).unwrap();
    block_on(img.write_zeroes(2 << 20, 65536, true)).unwrap();
    let bytes = block_on(img.close()).unwrap().into_bytes();
    insta::assert_snapshot!(oracle::dump::dump(&bytes));
}
