//! `tools::create`: qemu-img create's images (clean for qemu-img check, of
//! the options asked for), its backing-file rules, and refusals that name
//! the option or file and leave every file as it was.

use futures::executor::block_on;
use testkit::assert_clean;
use tools::create::{create_image, prepare_image, CreateImageError, CreateImageOptions};
use tools::files::{Format, Probed};
use tools::qemu_args::ArgError;

fn qcow2_opts(options: &[&str], size: Option<&str>) -> CreateImageOptions {
    CreateImageOptions {
        options: options.iter().map(|o| o.to_string()).collect(),
        size: size.map(str::to_owned),
        ..CreateImageOptions::default()
    }
}

#[test]
fn a_qcow2_image_has_its_options_and_passes_qemu_img_check() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.qcow2");
    let opts = qcow2_opts(
        &["cluster_size=4k,refcount_bits=8", "lazy_refcounts=on"],
        Some("8M"),
    );
    let line = block_on(create_image(&path, &opts)).unwrap();
    assert_eq!(
        line,
        format!(
            "Formatting '{}', fmt=qcow2 cluster_size=4096 extended_l2=off \
             compression_type=zlib size=8388608 lazy_refcounts=on refcount_bits=8",
            path.display()
        )
    );
    assert_clean(&path, "the created image");
    let info = tools::info::info(&path, &Default::default()).unwrap();
    assert_eq!(info.virtual_size, 8 << 20);
    assert_eq!(info.cluster_size, Some(4096));
}

#[test]
fn bad_options_name_the_option_and_leave_the_file_untouched() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("keep.qcow2");
    std::fs::write(&path, b"keep me").unwrap();
    let unknown = block_on(create_image(&path, &qcow2_opts(&["bogus=1"], Some("1M"))));
    match unknown {
        Err(CreateImageError::Options {
            path: p,
            error: ArgError::UnknownOption(name),
        }) => {
            assert_eq!(p, path);
            assert_eq!(name, "bogus");
        }
        other => panic!("{other:?}"),
    }
    // A combination qemu-img refuses, and a size too large for it.
    let v2_lazy = qcow2_opts(&["compat=0.10,lazy_refcounts=on"], Some("1M"));
    let err = block_on(create_image(&path, &v2_lazy)).unwrap_err();
    assert!(
        matches!(&err, CreateImageError::Driver { error: ArgError::Conflict(m), formatting_line, .. }
            if m.contains("Lazy refcounts") && formatting_line.contains("compat=0.10")),
        "{err:?}"
    );
    // An L1 table past QEMU's 32 MiB: the driver's error, as qemu-img's.
    let huge_l1 = qcow2_opts(&["cluster_size=512"], Some("1T"));
    let err = block_on(create_image(&path, &huge_l1)).unwrap_err();
    assert!(
        matches!(&err, CreateImageError::Driver { error: ArgError::BadValue { key, reason }, .. }
            if key == "size" && reason.contains("too large for file format 'qcow2'")),
        "{err:?}"
    );
    let bad_size = block_on(create_image(&path, &qcow2_opts(&[], Some("12q")))).unwrap_err();
    assert!(
        matches!(&bad_size, CreateImageError::Size { error: ArgError::Size(s) } if s == "12q"),
        "{bad_size:?}"
    );
    let no_size = block_on(create_image(&path, &qcow2_opts(&[], None))).unwrap_err();
    assert!(matches!(no_size, CreateImageError::NoSize), "{no_size:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");

    // And a file that did not exist is not created.
    let new = dir.path().join("new.qcow2");
    block_on(create_image(&new, &qcow2_opts(&["bogus=1"], Some("1M")))).unwrap_err();
    assert!(!new.exists());
}

#[test]
fn a_backing_file_needs_its_format_and_gives_its_size() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.raw");
    std::fs::write(&base, vec![0x11u8; 3 << 20]).unwrap();
    let top = dir.path().join("top.qcow2");
    let mut opts = CreateImageOptions {
        backing: Some("base.raw".into()),
        ..CreateImageOptions::default()
    };
    let err = block_on(prepare_image(&top, &opts)).err().expect("refused");
    match &err {
        CreateImageError::MissingBackingFormat {
            backing, probed, ..
        } => {
            assert_eq!(backing, &base);
            assert_eq!(*probed, Some(Probed::Format(Format::Raw)));
        }
        other => panic!("{other:?}"),
    }
    let hint = format!("(detected format of {}: add -F raw)", base.display());
    assert!(err.to_string().ends_with(&hint), "{err}");
    assert!(!top.exists());

    opts.backing_format = Some("raw".into());
    let prepared = block_on(prepare_image(&top, &opts)).unwrap();
    let create = prepared.create_options().expect("a qcow2 image");
    assert_eq!(create.size, 3 << 20, "the backing file's size");
    assert_eq!(create.backing_file.as_deref(), Some("base.raw"));
    block_on(prepared.write()).unwrap();
    assert_clean(&top, "the image over a raw backing file");

    // A hard link to the backing file is the backing file.
    let link = dir.path().join("link.qcow2");
    std::fs::hard_link(&base, &link).unwrap();
    let err = block_on(create_image(&link, &opts)).unwrap_err();
    assert!(
        matches!(err, CreateImageError::OverBacking { .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&base).unwrap(), vec![0x11u8; 3 << 20]);
}

#[test]
fn raw_images_take_only_a_size() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.raw");
    let raw = |options: &[&str]| CreateImageOptions {
        format: Format::Raw,
        ..qcow2_opts(options, Some("1M"))
    };
    let line = block_on(create_image(&path, &raw(&[]))).unwrap();
    assert_eq!(
        line,
        format!("Formatting '{}', fmt=raw size=1048576", path.display())
    );
    assert_eq!(std::fs::read(&path).unwrap(), vec![0u8; 1 << 20]);
    std::fs::write(&path, b"keep me").unwrap();
    let err = block_on(create_image(&path, &raw(&["cluster_size=4k"]))).unwrap_err();
    assert!(
        matches!(err, CreateImageError::RawOptions { .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");
}
