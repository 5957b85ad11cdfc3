//! `tools::rebase` and `tools::commit` on chains QEMU made: what the guest
//! reads is unchanged by a safe rebase and lands in the base on commit,
//! the header names what it should, and the checker (`oracle::check`) and
//! `qemu-img check` find every image clean.

use std::path::Path;

use testkit::{assert_clean, qemu_create, qemu_io, qemu_raw};
use tools::commit::{commit_image, CommitError};
use tools::files::OpenOptions;
use tools::rebase::{rebase_image, RebaseOptions};

fn both_clean(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    let report = oracle::check::check(&bytes);
    assert_eq!(report.exit_code(), 0, "{}: {report:?}", path.display());
    assert_clean(path, &path.display().to_string());
}

fn backing_name(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).unwrap();
    let h = futures::executor::block_on(engine::Image::read_header(
        &engine::dev::MemDev::from_bytes(bytes),
    ))
    .unwrap();
    h.backing_file
}

/// base (1s) <- itmd (2s at 256k..512k) <- top (3s at 512k, zeroes at 0).
fn chain(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (base, itmd, top) = (
        dir.join("base.qcow2"),
        dir.join("itmd.qcow2"),
        dir.join("top.qcow2"),
    );
    qemu_create(&base, "", "1M", None);
    qemu_io(None, &base, &["write -P 1 0 1M".to_owned()]);
    qemu_create(&itmd, "", "1M", Some(("base.qcow2", "qcow2")));
    qemu_io(None, &itmd, &["write -P 2 256k 256k".to_owned()]);
    qemu_create(&top, "", "1M", Some(("itmd.qcow2", "qcow2")));
    qemu_io(
        None,
        &top,
        &[
            "write -P 3 512k 64k".to_owned(),
            "write -z 0 64k".to_owned(),
        ],
    );
    (base, itmd, top)
}

#[test]
fn a_safe_rebase_keeps_what_the_guest_reads() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let (_, _, top) = chain(dir.path());
    let before = qemu_raw(&top);
    let new = dir.path().join("new.qcow2");
    qemu_create(&new, "", "512k", None);
    qemu_io(None, &new, &["write -P 2 256k 128k".to_owned()]);
    // A backing file without its format is refused, as QEMU refuses it,
    // before anything is copied.
    let old_name = backing_name(&top);
    let unnamed = RebaseOptions {
        backing: Some("new.qcow2".into()),
        backing_format: None,
        ..RebaseOptions::default()
    };
    let e = futures::executor::block_on(rebase_image(&top, &OpenOptions::default(), &unnamed))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Could not change the backing file to 'new.qcow2': backing format must be specified"
    );
    assert_eq!(backing_name(&top), old_name);
    assert_eq!(qemu_raw(&top), before);
    let r = RebaseOptions {
        backing: Some("new.qcow2".into()),
        backing_format: Some("qcow2".into()),
        ..RebaseOptions::default()
    };
    futures::executor::block_on(rebase_image(&top, &OpenOptions::default(), &r)).unwrap();
    assert_eq!(backing_name(&top).as_deref(), Some("new.qcow2"));
    assert_eq!(qemu_raw(&top), before, "the guest reads the same");
    both_clean(&top);
    // Onto nothing: everything the old chain showed is copied in.
    let none = RebaseOptions::default();
    futures::executor::block_on(rebase_image(&top, &OpenOptions::default(), &none)).unwrap();
    assert_eq!(backing_name(&top), None);
    assert_eq!(qemu_raw(&top), before);
    both_clean(&top);
}

#[test]
fn commit_writes_into_the_base_and_empties_the_image_unless_kept() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let (base, itmd, top) = chain(dir.path());
    let seen = qemu_raw(&top);
    let run = |base: Option<&Path>, keep| {
        futures::executor::block_on(commit_image(&top, &OpenOptions::default(), base, keep))
    };
    // Into a deeper base: the images above are kept.
    run(Some(&base), false).unwrap();
    assert_eq!(qemu_raw(&base), seen, "the base holds what the top showed");
    assert_eq!(qemu_raw(&top), seen);
    for img in [&base, &itmd, &top] {
        both_clean(img);
    }
    qemu_io(None, &top, &["write -P 4 768k 64k".to_owned()]);
    let seen = qemu_raw(&top);
    run(None, false).unwrap();
    assert_eq!(qemu_raw(&itmd), seen, "committed into the backing file");
    // Emptied: the top reads through to the backing file, allocating
    // nothing of its own.
    let map = testkit::tool("qemu-img", &["map", "--output=json", top.to_str().unwrap()]);
    let map = String::from_utf8(map).unwrap();
    assert!(!map.contains("\"depth\": 0"), "{map}");
    for img in [&itmd, &top] {
        both_clean(img);
    }
    let err =
        futures::executor::block_on(commit_image(&base, &OpenOptions::default(), None, false))
            .unwrap_err();
    assert!(matches!(err, CommitError::NoBacking), "{err}");
}
