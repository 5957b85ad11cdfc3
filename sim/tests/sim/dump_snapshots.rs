//! Snapshot tests (insta) of `oracle::dump` over images whose state is a
//! pure function of their inputs: two the engine writes directly, and for
//! each profile the first crash image of a few fixed seeded runs with the
//! checker's report on it (`post_crash_pins`). A change in layout,
//! allocation order or writeback shows up here as a diff to review with
//! `cargo insta review`.

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

use crate::post_crash_pins::{
    self as pins, post_crash, same_text, snapshot_contents, snapshot_name, snapshot_path, PINNED,
    WHATS,
};

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

/// For each profile and each of its pinned seeds (`post_crash_pins`), the
/// dump of the first crash image and the checker's report on it, one
/// named snapshot each (`post_crash_PROFILE_seed_N_{dump,check}`). A change
/// to the engine's layout, allocation or writeback order moves them: review
/// with `cargo insta review` (`cargo insta test` records every snapshot
/// that moved, not only the first).
#[test]
fn post_crash_images_of_each_profile() {
    let mut settings = insta::Settings::clone_current();
    settings.set_omit_expression(true);
    let _guard = settings.bind_to_scope();
    for (profile, seeds) in PINNED {
        for &seed in seeds {
            let case = pins::case(profile, seed);
            let got = post_crash(&case);
            assert!(
                got.report.passed(),
                "{profile} seed {seed}: {:?}",
                got.report.failures
            );
            for what in WHATS {
                insta::assert_snapshot!(snapshot_name(profile, seed, what), got.get(what));
            }
        }
    }
}

/// The reader `snapshot_broken` compares against reads the committed
/// files as insta does: each pinned rendering is what its `.snap` holds.
#[test]
fn committed_snapshots_read_back_as_pinned() {
    let (profile, seeds) = PINNED[0];
    let got = post_crash(&pins::case(profile, seeds[0]));
    for what in WHATS {
        let path = snapshot_path(profile, seeds[0], what);
        let snap =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let pinned = snapshot_contents(&snap).expect("a .snap file's metadata block");
        assert!(same_text(pinned, got.get(what)), "{}", path.display());
        // And the comparison can fail.
        assert!(!same_text(pinned, &format!("{}x\n", got.get(what))));
    }
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
