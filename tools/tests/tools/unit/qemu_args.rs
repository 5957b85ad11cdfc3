//! The unit tests of `tools::qemu_args`.

use engine::{Compat, CreateOptions, Preallocation};
use tools::qemu_args::*;

#[test]
fn sizes_with_suffixes() {
    let cases: [(&str, u64); 14] = [
        ("0", 0),
        ("512", 512),
        ("512b", 512),
        ("64k", 64 << 10),
        ("64K", 64 << 10),
        ("1M", 1 << 20),
        ("1m", 1 << 20),
        ("2G", 2 << 30),
        ("3g", 3 << 30),
        ("1T", 1 << 40),
        ("1.5k", 1536),
        ("1.5G", 3 << 29),
        ("0x200", 512),
        ("0X10", 16),
    ];
    for (s, want) in cases {
        assert_eq!(parse_size(s), Ok(want), "{s}");
    }
}

#[test]
fn bad_sizes_are_refused_by_name() {
    for s in [
        "", "k", "abc", "12q", "1.5", "1.k", "-1", "0x", "0x1g", "1 k", "1kk",
    ] {
        let err = parse_size(s).unwrap_err();
        assert!(err.to_string().contains(&format!("'{s}'")), "{s}: {err}");
    }
    for s in ["16E", "99999999999999999999", "0x10000000000000000"] {
        assert_eq!(parse_size(s), Err(ArgError::SizeTooLarge(s.into())), "{s}");
    }
    assert_eq!(parse_size("15E"), Ok(15 << 60));
}

#[test]
fn option_lists_split_with_escaped_commas() {
    let items = split_option_list("a=1,b,c=x,,y,,d,,");
    assert_eq!(
        items,
        vec![
            ("a".to_owned(), Some("1".to_owned())),
            ("b".to_owned(), None),
            ("c".to_owned(), Some("x,y,d,".to_owned())),
        ]
    );
    assert!(wants_help("help"));
    assert!(wants_help("cluster_size=4k,?"));
    assert!(!wants_help("cluster_size=4k"));
}

#[test]
fn qcow2_options_apply_and_convert() {
    let mut o = ImageOpts::default();
    o.apply_list("cluster_size=4k,refcount_bits=8,lazy_refcounts=on")
        .unwrap();
    o.apply_list("compat=v3,backing_file=b.raw,backing_fmt=raw,size=1G")
        .unwrap();
    assert_eq!(o.size, Some(1 << 30));
    let c = o.to_create_options(o.size.unwrap()).unwrap();
    assert_eq!(c.cluster_size, 4096);
    assert_eq!(c.refcount_bits, 8);
    assert!(c.lazy_refcounts);
    assert_eq!(c.compat, Compat::V3);
    assert_eq!(c.backing_file.as_deref(), Some("b.raw"));
    assert_eq!(c.backing_format.as_deref(), Some("raw"));
    assert_eq!(c.preallocation, Preallocation::Off);
    for mode in ["off", "metadata", "falloc", "full"] {
        let mut o = ImageOpts::default();
        o.apply_list(&format!("preallocation={mode}")).unwrap();
        let c = o.to_create_options(1 << 20).unwrap();
        assert_eq!(c.preallocation.name(), mode);
    }
    // Unset options keep the engine's defaults.
    let c = ImageOpts::default().to_create_options(1 << 20).unwrap();
    assert_eq!(
        c,
        CreateOptions {
            size: 1 << 20,
            ..CreateOptions::default()
        }
    );
}

#[test]
fn bad_qcow2_options_are_refused() {
    let cases = [
        ("bogus=1", "'bogus'"),
        ("refcount_bits=x", "expects a number"),
        ("refcount_bits=1.5", "expects a number"),
        ("compat=2.0", "compatibility level"),
        ("lazy_refcounts=maybe", "'on' or 'off'"),
        ("size", "needs a value"),
        ("compression_type=lz4", "zlib or zstd"),
        ("data_file_raw=maybe", "'on' or 'off'"),
        ("preallocation=sparse", "does not accept value 'sparse'"),
    ];
    for (list, needle) in cases {
        let err = ImageOpts::default().apply_list(list).unwrap_err();
        assert!(err.to_string().contains(needle), "{list}: {err}");
    }
}

#[test]
fn impossible_combinations_are_refused() {
    let cases = [
        ("cluster_size=3000", "power of two"),
        ("cluster_size=4M", "power of two"),
        ("cluster_size=256", "power of two"),
        // The width is the driver's check, after the option list.
        ("refcount_bits=3", "power of two"),
        ("refcount_bits=128", "may not exceed 64"),
        ("refcount_bits=0", "power of two"),
        ("refcount_bits=-1", "power of two"),
        ("compat=0.10,refcount_bits=8", "16 bits"),
        ("compat=0.10,lazy_refcounts=on", "Lazy"),
        ("compat=v2,extended_l2=on", "Extended"),
        ("extended_l2=on,cluster_size=4k", "16384 bytes"),
        ("backing_fmt=raw", "without backing file"),
        (
            "compat=0.10,compression_type=zstd",
            "compatibility level 1.1",
        ),
        ("compat=0.10,data_file=d.raw", "compatibility level 1.1"),
        ("data_file_raw=on", "requires data-file"),
        (
            "data_file=d.raw,data_file_raw=on,backing_file=b,backing_fmt=raw",
            "cannot be used at the same time",
        ),
        (
            "preallocation=metadata,backing_file=b,backing_fmt=raw",
            "if extended_l2 is on",
        ),
    ];
    for (list, needle) in cases {
        let mut o = ImageOpts::default();
        o.apply_list(list).unwrap();
        let err = o.to_create_options(1 << 20).unwrap_err();
        assert!(err.to_string().contains(needle), "{list}: {err}");
    }
    let mut o = ImageOpts::default();
    o.apply_list("compat=0.10").unwrap();
    assert_eq!(o.to_create_options(0).unwrap().compat, Compat::V2);
}
