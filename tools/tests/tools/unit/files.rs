//! The unit tests of `tools::files`.

use std::path::Path;

use tools::files::*;

#[test]
fn probes_by_magic() {
    assert_eq!(
        probe_bytes(b"QFI\xfb\0\0\0\x03"),
        Probed::Format(Format::Qcow2)
    );
    assert_eq!(probe_bytes(b"QFI\xfa"), Probed::Format(Format::Raw));
    assert_eq!(probe_bytes(b""), Probed::Format(Format::Raw));
    assert_eq!(probe_bytes(b"KDMV\x01\0\0\0"), Probed::Foreign("vmdk"));
    assert_eq!(probe_bytes(b"QED\0abcd"), Probed::Foreign("qed"));
}

#[test]
fn backing_names_resolve_from_the_image_directory() {
    let p = resolve_backing_path(Path::new("/a/b/top.qcow2"), "base.raw");
    assert_eq!(p, Path::new("/a/b/base.raw"));
    let p = resolve_backing_path(Path::new("/a/b/top.qcow2"), "../c/base.raw");
    assert_eq!(p, Path::new("/a/b/../c/base.raw"));
    let p = resolve_backing_path(Path::new("/a/b/top.qcow2"), "/abs/base");
    assert_eq!(p, Path::new("/abs/base"));
    let p = resolve_backing_path(Path::new("top.qcow2"), "base");
    assert_eq!(p, Path::new("base"));
    let p = resolve_backing_path(Path::new("sub/top.qcow2"), "base");
    assert_eq!(p, Path::new("sub/base"));
}

#[test]
fn format_names_parse() {
    assert_eq!("raw".parse::<Format>(), Ok(Format::Raw));
    assert_eq!("qcow2".parse::<Format>(), Ok(Format::Qcow2));
    let err = "vmdk".parse::<Format>().unwrap_err();
    assert!(err.to_string().contains("'vmdk'"), "{err}");
}

#[test]
fn raw_images_open_and_refuse_requests_past_their_end() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.raw");
    std::fs::write(&path, vec![3u8; 8192]).unwrap();
    let disk =
        futures::executor::block_on(open_image(&path, &OpenOptions::default())).expect("open raw");
    assert_eq!(disk.format(), Format::Raw);
    assert_eq!(disk.virtual_size(), 8192);
    let mut buf = [0u8; 4];
    futures::executor::block_on(disk.read(8190, &mut buf)).unwrap_err();
    futures::executor::block_on(disk.read(8188, &mut buf)).unwrap();
    assert_eq!(buf, [3; 4]);
    let err = futures::executor::block_on(disk.write(8192, &[1])).unwrap_err();
    assert!(matches!(err, engine::Error::OutOfRange { .. }), "{err:?}");
}

#[test]
fn foreign_formats_are_refused_by_name() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.vmdk");
    std::fs::write(&path, b"KDMV\x01\0\0\0 rest").unwrap();
    let err = futures::executor::block_on(open_image(&path, &OpenOptions::default()))
        .err()
        .expect("vmdk refused");
    assert!(err.to_string().contains("vmdk"), "{err}");
}
