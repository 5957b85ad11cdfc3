//! The unit tests of `sim::shrink::image`.

use engine::Compat;
use oracle::data::{BackingData, BackingPattern};
use sim::case::{BackingSpec, Case, DataFileSpec, ImageSpec, Op};
use sim::shrink::image::*;
use sim::shrink::{shrink_with, ShrinkOptions};

use super::testcase::{w, with_groups};

fn fancy() -> Case {
    let data = BackingData {
        sectors: 64,
        pattern: BackingPattern::Full,
    };
    let mut c = with_groups(vec![vec![w(3, 1)], vec![Op::Flush]]);
    c.image = ImageSpec::new(
        8 << 20,
        32 << 10,
        4,
        Compat::V3,
        true,
        Some(BackingSpec::Qcow2 {
            cluster_size: 4096,
            data,
        }),
    )
    .with_data_file(DataFileSpec { raw: false });
    c.image.create.extended_l2 = true;
    c.engine.l2_cache_tables = 2;
    c.validate().unwrap();
    c
}

#[test]
fn every_edit_keeps_the_case_valid() {
    let c = fancy();
    let edits: [&dyn Fn(&mut Case); 2] = [&no_backing, &raw_backing];
    for edit in edits {
        let mut e = c.clone();
        edit(&mut e);
        assert!(e.validate().is_ok(), "{:?}", e.image);
        assert_ne!(e, c);
    }
    let f = fitted(&c).unwrap();
    assert_eq!(f.image.create.size, 32 << 10);
    assert!(fitted(&f).is_none());
}

#[test]
fn plain_image_but_what_the_failure_needs() {
    // Fails while the L2 cache holds two tables, a backing file is
    // there (of any format) and something is written.
    let needs = |c: &Case| {
        c.engine.l2_cache_tables == 2
            && c.image.backing.is_some()
            && c.workload.iter().flatten().any(|op| op.range().is_some())
    };
    let s = shrink_with(&fancy(), &ShrinkOptions::default(), needs, |_| {})
        .unwrap()
        .case;
    let i = &s.image;
    assert!(matches!(i.backing, Some(BackingSpec::Raw { .. })), "{i:?}");
    assert_eq!(i.data_file, None);
    assert!(!i.create.extended_l2 && !i.create.lazy_refcounts);
    assert_eq!(
        (i.create.cluster_size, i.create.refcount_bits),
        (64 << 10, 16)
    );
    assert_eq!(s.engine.l2_cache_tables, 2);
    // The one write moved to sector 0, and the disk holds just it.
    assert_eq!(s.workload, vec![vec![w(0, 1)]]);
    assert_eq!(i.create.size, 512);
}
