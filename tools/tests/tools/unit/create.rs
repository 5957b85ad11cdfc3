//! The unit tests of `tools::create`.

use std::path::Path;

use engine::dev::FileOptions;
use engine::{CreateOptions, Preallocation};
use futures::executor::block_on;
use tools::create::*;
use tools::qemu_args::ImageOpts;

#[test]
fn the_dry_run_finds_what_the_engine_refuses() {
    let ok = CreateOptions {
        size: 1 << 30,
        ..CreateOptions::default()
    };
    block_on(check_create_options(&ok)).unwrap();
    let with_data = CreateOptions {
        data_file: Some("d.raw".into()),
        data_file_raw: true,
        ..ok.clone()
    };
    block_on(check_create_options(&with_data)).unwrap();
    for (bad, needle) in [
        (
            CreateOptions {
                size: 1 << 63,
                ..ok.clone()
            },
            "L1 table",
        ),
        (
            CreateOptions {
                size: 1 << 40,
                cluster_size: 512,
                ..ok.clone()
            },
            "L1 table",
        ),
        (
            CreateOptions {
                cluster_size: 3000,
                ..ok.clone()
            },
            "cluster_size",
        ),
        (
            CreateOptions {
                backing_file: Some("b".repeat(2000)),
                ..ok.clone()
            },
            "1023",
        ),
    ] {
        let err = block_on(check_create_options(&bad))
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
}

#[test]
fn prepare_refuses_one_file_twice_and_removes_what_it_created() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep");
    std::fs::write(&keep, b"keep me").unwrap();
    let link = dir.path().join("link");
    std::fs::hard_link(&keep, &link).unwrap();
    let new = dir.path().join("new");
    let opts = FileOptions {
        threads: 1,
        ..FileOptions::default()
    };
    let wanted = [
        Wanted {
            path: &new,
            length: None,
        },
        Wanted {
            path: &keep,
            length: Some(1 << 20),
        },
        Wanted {
            path: &link,
            length: None,
        },
    ];
    let err = block_on(prepare(&wanted, &opts)).expect_err("refused");
    assert!(matches!(err, CreateError::SameFile { .. }), "{err}");
    assert_eq!(std::fs::read(&keep).unwrap(), b"keep me");
    assert!(!new.exists(), "the file it created is gone");

    // Too long for any file: refused, and the file is as it was.
    let wanted = [Wanted {
        path: &keep,
        length: Some(u64::MAX),
    }];
    let err = block_on(prepare(&wanted, &opts)).expect_err("refused");
    assert!(matches!(err, CreateError::Length { .. }), "{err}");
    assert_eq!(std::fs::read(&keep).unwrap(), b"keep me");

    let devs = block_on(prepare(&wanted[..0], &opts)).unwrap();
    assert!(devs.is_empty());
    let wanted = [Wanted {
        path: &keep,
        length: Some(1 << 20),
    }];
    let devs = block_on(prepare(&wanted, &opts)).unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(std::fs::read(&keep).unwrap(), b"keep me", "not emptied");
}

#[test]
fn prepare_removes_only_the_files_it_created() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let keep = d.join("keep");
    std::fs::write(&keep, b"keep me").unwrap();
    let link = d.join("link");
    std::fs::hard_link(&keep, &link).unwrap();
    let new = d.join("new");
    // Another process makes `race` just as prepare comes to it.
    let race = d.join("race");
    let raced = race.clone();
    BEFORE_OPEN.with(|h| {
        *h.borrow_mut() = Some(Box::new(move |path: &Path| {
            if path == raced {
                std::fs::write(path, b"theirs").unwrap();
            }
        }))
    });
    let opts = FileOptions {
        threads: 1,
        ..FileOptions::default()
    };
    // A dangling symlink: the file it names is created, and removed.
    let sym = d.join("sym");
    std::os::unix::fs::symlink("target", &sym).unwrap();
    let wanted = [&new, &race, &sym, &keep, &link].map(|path| Wanted { path, length: None });
    let err = block_on(prepare(&wanted, &opts)).expect_err("refused");
    BEFORE_OPEN.with(|h| h.borrow_mut().take());
    assert!(matches!(err, CreateError::SameFile { .. }), "{err}");
    assert!(!new.exists(), "the file it created is gone");
    assert_eq!(
        std::fs::read(&race).ok().as_deref(),
        Some(&b"theirs"[..]),
        "the file it did not create is neither emptied nor removed"
    );
    assert_eq!(std::fs::read(&keep).unwrap(), b"keep me");
    assert!(!d.join("target").exists(), "the symlink's file is gone");
    assert!(sym.symlink_metadata().is_ok(), "the symlink is not");

    let devs = block_on(prepare(&wanted[2..3], &opts)).unwrap();
    assert_eq!(devs.len(), 1);
    assert_eq!(std::fs::read(d.join("target")).unwrap(), b"");
}

#[test]
fn formatting_line_matches_qemu_img_order() {
    let c = CreateOptions {
        size: 1 << 20,
        backing_file: Some("base.raw".into()),
        backing_format: Some("raw".into()),
        ..CreateOptions::default()
    };
    assert_eq!(
        formatting_line(Path::new("top.qcow2"), &c, c.size, &ImageOpts::default()),
        "Formatting 'top.qcow2', fmt=qcow2 cluster_size=65536 extended_l2=off \
             compression_type=zlib size=1048576 backing_file=base.raw backing_fmt=raw \
             lazy_refcounts=off refcount_bits=16"
    );
    let c = CreateOptions {
        size: 1 << 30,
        compat: engine::Compat::V2,
        ..CreateOptions::default()
    };
    assert_eq!(
        formatting_line(
            Path::new("v2.qcow2"),
            &c,
            c.size,
            &ImageOpts {
                compat_name: Some("0.10".into()),
                preallocation: Some(Preallocation::Metadata),
                ..ImageOpts::default()
            }
        ),
        "Formatting 'v2.qcow2', fmt=qcow2 cluster_size=65536 extended_l2=off \
             preallocation=metadata compression_type=zlib size=1073741824 compat=0.10 \
             lazy_refcounts=off refcount_bits=16"
    );
}
