//! The unit tests of `engine::ops::prealloc`.

use engine::ops::prealloc::*;
use engine::CreateOptions;

fn opts(size: u64, cs: u64, mode: engine::Preallocation) -> CreateOptions {
    CreateOptions {
        size,
        cluster_size: cs,
        preallocation: mode,
        ..CreateOptions::default()
    }
}

fn l1_entries(o: &CreateOptions) -> u64 {
    o.size.div_ceil(o.cluster_size * (o.cluster_size / 8))
}

#[test]
fn used_runs_merge_split_and_search() {
    let mut u = Used::default();
    u.insert(0, 3);
    u.insert(5, 8);
    u.insert(3, 5);
    assert_eq!(u.runs_in(0, 100), vec![(0, 8)]);
    u.remove(2, 4);
    assert_eq!(u.runs_in(0, 100), vec![(0, 2), (4, 8)]);
    assert_eq!(u.first_in(2, 10), Some(4));
    assert_eq!(u.first_in(5, 10), Some(5));
    assert_eq!(u.first_in(8, 10), None);
    assert_eq!(u.last(), Some(7));
}

#[test]
fn metadata_puts_each_l2_table_before_its_data() {
    // 64 KiB clusters, 1 GiB: L1 at 3, L2 at 4, data from 5, the
    // second L2 table right after the first one's 8192 data clusters.
    let o = opts(1 << 30, 65536, engine::Preallocation::Metadata);
    let p = Plan::new(&o, l1_entries(&o)).unwrap();
    assert_eq!(p.l1_cluster, 3);
    assert_eq!(p.l2, vec![Some(4), Some(5 + 8192)]);
    assert_eq!(p.runs[0].host, 5);
    assert_eq!(p.runs[1].host, 5 + 8192 + 1);
    assert_eq!(p.data_end, (6 + 2 * 8192) * 65536);
    assert_eq!(p.reftable_offset(), 65536);
}

#[test]
fn a_refcount_block_goes_after_the_run_that_needs_it() {
    // 16-bit refcounts: one block counts 32768 clusters (2 GiB); the
    // run crossing cluster 32768 gets its block right after it.
    let o = opts(3 << 30, 65536, engine::Preallocation::Metadata);
    let p = Plan::new(&o, l1_entries(&o)).unwrap();
    let crossing = p
        .runs
        .iter()
        .find(|r| r.host < 32768 && r.host + r.n > 32768)
        .expect("a run crosses the first block's range");
    assert_eq!(p.model.reftable[1], (crossing.host + crossing.n) * 65536);
}

#[test]
fn falloc_moves_the_refcount_table_and_reuses_its_cluster() {
    let o = opts(3 << 20, 65536, engine::Preallocation::Falloc);
    let p = Plan::new(&o, l1_entries(&o)).unwrap();
    assert_eq!(p.reftable_offset(), 4 * 65536);
    assert_eq!(p.data_area, Some((5, 48)));
    assert_eq!(p.l2, vec![Some(1)]);
    assert_eq!(p.data_end, 53 * 65536);
}

#[test]
fn tiny_refcount_blocks_grow_the_table_and_count_everything() {
    // 512-byte clusters with 64-bit refcounts: 64 clusters a block.
    let o = CreateOptions {
        refcount_bits: 64,
        ..opts(8 << 20, 512, engine::Preallocation::Metadata)
    };
    let p = Plan::new(&o, o.size.div_ceil(512 * 64)).unwrap();
    let m = &p.model;
    // Every cluster in use has a block, every block is in use, and
    // nothing overlaps: the data, the tables and the blocks.
    let last = m.used.last().unwrap();
    for (a, b) in m.used.runs_in(0, last + 1) {
        for c in a..b {
            assert!(m.has_block(c / m.rce), "cluster {c} has no block");
        }
    }
    let mut seen = std::collections::HashSet::new();
    let blocks = m.reftable.iter().filter(|&&b| b != 0).map(|b| b / 512);
    let l2 = p.l2.iter().flatten().copied();
    let data = p.runs.iter().flat_map(|r| r.host..r.host + r.n);
    let table = m.reftable_cluster..m.reftable_cluster + m.reftable_clusters;
    for c in blocks.chain(l2).chain(data).chain(table) {
        assert!(m.used.first_in(c, c + 1).is_some(), "{c} not counted");
        assert!(seen.insert(c), "cluster {c} used twice");
    }
    assert!(m.reftable_clusters > 1, "the table grew");
}
