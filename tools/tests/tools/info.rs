//! `tools::info`: the report of an image, its two renderings, and the
//! typed errors.

use engine::CreateOptions;
use tools::files::{Format, OpenError};
use tools::info::{info, InfoError, InfoOptions};

use crate::support::{qcow2, qcow2_with, truncate, SIZE};

#[test]
fn a_qcow2_image_is_reported_as_qemu_img_does() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[(0, 0xab, 65536)]);
    let report = info(&path, &InfoOptions::default()).unwrap();
    assert_eq!(report.format, "qcow2");
    assert_eq!(report.virtual_size, SIZE);
    assert_eq!(report.cluster_size, Some(65536));
    assert!(!report.dirty_flag);
    let specific = &report.format_specific.as_ref().expect("qcow2 facts").data;
    assert_eq!(specific.compat, "1.1");
    assert_eq!(specific.refcount_bits, 16);
    assert_eq!(specific.lazy_refcounts, Some(false));

    let name = path.display().to_string();
    let human = report.human();
    let head = format!("image: {name}\nfile format: qcow2\nvirtual size: 4 MiB (4194304 bytes)\n");
    assert!(human.starts_with(&head), "{human}");
    assert!(human.contains("\ncluster_size: 65536\n"), "{human}");
    assert!(
        human.contains(&format!("Child node '/file':\n    filename: {name}\n")),
        "{human}"
    );

    let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
    assert_eq!(json["virtual-size"], SIZE);
    assert_eq!(json["cluster-size"], 65536);
    assert_eq!(json["children"][0]["name"], "file");
    assert_eq!(json["format-specific"]["data"]["compat"], "1.1");
    assert_eq!(json.get("backing-filename"), None, "no backing file");
}

#[test]
fn a_backing_file_is_named_as_stored_and_as_resolved() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let o = CreateOptions {
        size: SIZE,
        backing_file: Some("base.raw".into()),
        backing_format: Some("raw".into()),
        ..CreateOptions::default()
    };
    // info does not open the backing file, so it need not exist.
    let path = qcow2_with(dir.path(), "top.qcow2", &o, &[]);
    let report = info(&path, &InfoOptions::default()).unwrap();
    let full = dir.path().join("base.raw").display().to_string();
    assert_eq!(report.backing_filename.as_deref(), Some("base.raw"));
    assert_eq!(report.full_backing_filename.as_deref(), Some(full.as_str()));
    assert_eq!(report.backing_filename_format.as_deref(), Some("raw"));
    let human = report.human();
    assert!(
        human.contains(&format!("backing file: base.raw (actual path: {full})\n")),
        "{human}"
    );
    assert!(human.contains("backing file format: raw\n"), "{human}");
}

#[test]
fn a_raw_file_has_no_qcow2_facts() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.raw");
    std::fs::write(&path, vec![0u8; 3 * 512]).unwrap();
    let report = info(&path, &InfoOptions::default()).unwrap();
    assert_eq!(report.format, "raw");
    assert_eq!(report.virtual_size, 1536);
    assert_eq!(report.cluster_size, None);
    assert!(report.format_specific.is_none());
    assert!(!report.human().contains("Format specific"));

    // Asked to, it reads a qcow2 image as raw too.
    let q = qcow2(dir.path(), "img.qcow2", &[]);
    let opts = InfoOptions {
        format: Some(Format::Raw),
        ..InfoOptions::default()
    };
    let report = info(&q, &opts).unwrap();
    assert_eq!(report.format, "raw");
    assert_eq!(report.virtual_size, std::fs::metadata(&q).unwrap().len());
}

#[test]
fn a_malformed_image_is_a_typed_error_naming_the_file() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "cut.qcow2", &[]);
    truncate(&path, 100);
    let err = info(&path, &InfoOptions::default()).unwrap_err();
    match &err {
        InfoError::Open(OpenError::Engine { path: p, error }) => {
            assert_eq!(p, &path);
            assert!(
                matches!(error, engine::Error::Format { field, .. } if field == "header_length"),
                "{error:?}"
            );
        }
        other => panic!("not an engine open error: {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "{}: invalid image: header_length: file too short for a v3 header",
            path.display()
        )
    );

    let missing = dir.path().join("missing.qcow2");
    let err = info(&missing, &InfoOptions::default()).unwrap_err();
    assert!(
        matches!(err, InfoError::Open(OpenError::File(_))),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&missing.display().to_string()),
        "{err}"
    );
}

/// qcsim prints `json()` and a newline: byte for byte what `qemu-img info
/// --output json` prints, for images of several shapes (qemu-img's and the
/// engine's, a backing file, a raw file, a name outside ASCII).
#[test]
fn the_json_report_is_qemu_imgs_byte_for_byte() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut paths = vec![
        qcow2(d, "engine.qcow2", &[(0, 0xab, 65536)]),
        qcow2(d, "caf\u{e9} \"x\".qcow2", &[]),
    ];
    for (name, opts) in [
        ("v2.qcow2", "compat=0.10"),
        (
            "sub.qcow2",
            "extended_l2=on,cluster_size=128k,lazy_refcounts=on",
        ),
        ("rc.qcow2", "refcount_bits=1"),
        ("df.qcow2", "data_file=df.data,data_file_raw=on"),
    ] {
        let path = d.join(name);
        testkit::qemu_create(&path, opts, "5M", None);
        paths.push(path);
    }
    let top = d.join("top.qcow2");
    testkit::qemu_create(&top, "", "4M", Some(("engine.qcow2", "qcow2")));
    paths.push(top);
    let raw = d.join("disk.raw");
    std::fs::write(&raw, vec![1u8; 3 << 16]).unwrap();
    paths.push(raw);
    for path in &paths {
        let name = path.to_str().unwrap();
        let theirs = testkit::run("qemu-img", &["info", "--output", "json", name], d).stdout;
        let ours = info(path, &InfoOptions::default()).unwrap().json() + "\n";
        assert_eq!(ours, String::from_utf8(theirs).unwrap(), "{name}");
    }
}
