//! The unit tests of `tools::info`.

use tools::info::*;

#[test]
fn sizes_print_like_qemu() {
    let cases = [
        (0, "0 B"),
        (512, "512 B"),
        (999, "999 B"),
        (1000, "0.977 KiB"),
        (197120, "192 KiB"),
        (200704, "196 KiB"),
        (1 << 20, "1 MiB"),
        (1536 << 20, "1.5 GiB"),
        (1 << 30, "1 GiB"),
        (10 << 30, "10 GiB"),
    ];
    for (bytes, want) in cases {
        assert_eq!(human_size(bytes), want, "{bytes}");
    }
}

#[test]
fn json_uses_qemu_field_names_and_order() {
    let info = InfoReport {
        children: Vec::new(),
        backing_filename_format: Some("raw".into()),
        snapshots: None,
        snapshot_list: Vec::new(),
        virtual_size: 1 << 20,
        filename: "top.qcow2".into(),
        cluster_size: Some(65536),
        format: "qcow2".into(),
        actual_size: 200704,
        format_specific: Some(FormatSpecific {
            kind: "qcow2",
            data: Qcow2Specific {
                compat: "1.1",
                compression_type: "zlib",
                lazy_refcounts: Some(false),
                refcount_bits: 16,
                data_file: None,
                data_file_raw: None,
                corrupt: Some(false),
                extended_l2: Some(false),
            },
        }),
        full_backing_filename: Some("base.raw".into()),
        backing_filename: Some("base.raw".into()),
        dirty_flag: false,
        file_length: 197120,
    };
    let want = r#"{
    "children": [
    ],
    "backing-filename-format": "raw",
    "virtual-size": 1048576,
    "filename": "top.qcow2",
    "cluster-size": 65536,
    "format": "qcow2",
    "actual-size": 200704,
    "format-specific": {
        "type": "qcow2",
        "data": {
            "compat": "1.1",
            "compression-type": "zlib",
            "lazy-refcounts": false,
            "refcount-bits": 16,
            "corrupt": false,
            "extended-l2": false
        }
    },
    "full-backing-filename": "base.raw",
    "backing-filename": "base.raw",
    "dirty-flag": false
}"#;
    assert_eq!(info.json(), want);
    let text = info.human();
    assert!(
        text.contains("virtual size: 1 MiB (1048576 bytes)\n"),
        "{text}"
    );
    assert!(text.contains("backing file: base.raw\n"), "{text}");
    assert!(text.contains("    refcount bits: 16\n"), "{text}");
}
