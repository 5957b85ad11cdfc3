//! `tools::dump`: the dump of an image file, and the typed errors of files
//! that hold none.

use oracle::dump::DumpError;
use tools::dump::{dump_file, DumpFileError};
use tools::files::OpenError;

use crate::support::{qcow2, truncate};

#[test]
fn a_fresh_image_dumps_its_header_tables_and_refcounts() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "img.qcow2", &[(0, 1, 512)]);
    let dump = dump_file(&path, false).unwrap();
    assert!(
        dump.starts_with("header\n  version 3\n  cluster_size 65536\n  size 4194304\n"),
        "{dump}"
    );
    // One L2 table, mapping the one data cluster written.
    assert!(dump.contains("\nl1\n  [0] l2 0x"), "{dump}");
    assert_eq!(dump.matches("    guest 0x0 data 0x").count(), 1, "{dump}");
    assert!(dump.contains("\nrefcount table\n  [0] block 0x"), "{dump}");
    assert!(dump.ends_with('\n'));
    // Deterministic: the same image dumps the same.
    assert_eq!(dump_file(&path, true).unwrap(), dump);
}

#[test]
fn a_truncated_header_is_a_typed_error_naming_the_file() {
    let _serial = crate::support::serial();
    let dir = tempfile::tempdir().unwrap();
    let path = qcow2(dir.path(), "cut.qcow2", &[]);
    truncate(&path, 100);
    let err = dump_file(&path, false).unwrap_err();
    match &err {
        DumpFileError::Dump {
            path: p,
            error:
                DumpError::Truncated {
                    len: 100,
                    needed: 104,
                    version: Some(3),
                },
        } => assert_eq!(p, &path),
        other => panic!("not a truncated header: {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "{}: truncated qcow2 header: the file holds 100 bytes, a version 3 header needs 104",
            path.display()
        )
    );

    let raw = dir.path().join("disk.raw");
    std::fs::write(&raw, vec![0x11; 4096]).unwrap();
    let err = dump_file(&raw, false).unwrap_err();
    assert!(
        matches!(
            &err,
            DumpFileError::Dump {
                error: DumpError::BadMagic { found: 0x1111_1111 },
                ..
            }
        ),
        "{err:?}"
    );

    let missing = dir.path().join("missing.qcow2");
    let err = dump_file(&missing, false).unwrap_err();
    assert!(
        matches!(err, DumpFileError::Open(OpenError::File(_))),
        "{err:?}"
    );
    assert!(err.to_string().contains("missing.qcow2"), "{err}");
}
