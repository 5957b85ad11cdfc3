//! The unit tests of `engine::rules`.

use engine::format::header::{incompat, Header};
use engine::format::L1Entry;
use engine::rules::*;

const CS: u64 = 64 << 10;

/// Header at 0, refcount table at 1, a block at 2, the L1 table (8
/// entries) at 3; L2 tables and data from 4 on.
fn ledger_with(data_file: bool) -> RuleLedger {
    RuleLedger::new(
        true,
        Layout {
            cluster_size: CS,
            data_file,
            l1: (3 * CS, 64),
            reftable: (CS, CS),
            dirty: false,
        },
    )
}

fn ledger() -> RuleLedger {
    ledger_with(false)
}

/// A completed write of `len` bytes at `off`.
fn wrote(l: &mut RuleLedger, dev: Dev, off: u64, len: u64) {
    let t = l.issue(dev, off, len, Kind::Data);
    l.complete(t, true);
}

fn meta(l: &mut RuleLedger, off: u64, data: &[u8]) {
    let t = l.issue_meta(off, data);
    l.complete(t, true);
}

fn flush(l: &mut RuleLedger) {
    let m = l.flush_mark(Dev::Image);
    l.flushed(Dev::Image, m);
}

/// The L1 sector naming L2 table `t` as entry 0.
fn l1_naming(t: u64) -> Vec<u8> {
    let mut s = vec![0u8; 512];
    s[..8].copy_from_slice(&L1Entry::new(t, true).0.to_be_bytes());
    s
}

#[test]
fn the_writeback_order_passes() {
    let mut l = ledger();
    let (data, block, table) = (10 * CS, 2 * CS, 4 * CS);
    l.reserve((data, data + CS), (data, data + CS));
    wrote(&mut l, Dev::Data, data, CS);
    l.refcount_changed(block);
    l.check_link((data, data + CS), &[]);
    l.release((data, data + CS));
    l.l2_created(table);
    l.l1_changed(0);
    meta(&mut l, block, &[0; 512]);
    flush(&mut l);
    meta(&mut l, table, &[0; 512]);
    flush(&mut l);
    meta(&mut l, 3 * CS, &l1_naming(table));
    flush(&mut l);
    l.free_queued(20, 0, false);
    l.l2_changed(table);
    meta(&mut l, table, &[0; 512]);
    flush(&mut l);
    l.free_applied(20, None);
    l.check_durable(l.completed(), "flush");
}

#[test]
#[should_panic(expected = "crash rule broken: no overlapping writes")]
fn two_writes_over_one_byte_fail() {
    let mut l = ledger();
    let _first = l.issue(Dev::Data, 0, 4096, Kind::Data);
    let _second = l.issue(Dev::Image, 4095, 2, Kind::Data);
}

#[test]
#[should_panic(expected = "crash rule broken: data before link")]
fn a_link_with_a_write_in_flight_fails() {
    let mut l = ledger();
    l.reserve((0, CS), (0, 4096));
    let _w = l.issue(Dev::Data, 0, 4096, Kind::Data);
    l.check_link((0, CS), &[(0, CS)]);
}

#[test]
#[should_panic(expected = "before its guest data")]
fn a_link_before_the_data_fails_even_over_zeroes() {
    let mut l = ledger();
    let g = l.issue(Dev::Image, 0, CS, Kind::Growth);
    l.complete(g, true);
    l.reserve((0, CS), (0, 4096));
    l.check_link((0, CS), &[(0, CS)]);
}

#[test]
#[should_panic(expected = "before its COW")]
fn a_link_without_its_cow_fails() {
    let mut l = ledger();
    l.reserve((0, CS), (0, 4096));
    wrote(&mut l, Dev::Data, 0, 4096);
    // Grown zeroes stand for a zero source only.
    let g = l.issue(Dev::Image, 4096, CS - 4096, Kind::Growth);
    l.complete(g, true);
    l.check_link((0, CS), &[(0, CS / 2)]);
}

#[test]
fn a_fresh_run_needs_no_zero_cow() {
    let mut l = ledger();
    let g = l.issue(Dev::Image, 0, 2 * CS, Kind::Growth);
    l.complete(g, true);
    l.reserve((0, CS), (100, 200));
    wrote(&mut l, Dev::Data, 100, 100);
    l.check_link((0, CS), &[(0, CS)]);
}

#[test]
#[should_panic(expected = "crash rule broken: data before L2")]
fn an_l2_write_before_the_data_flush_fails() {
    let mut l = ledger();
    wrote(&mut l, Dev::Data, 10 * CS, CS);
    l.l2_changed(4 * CS);
    meta(&mut l, 4 * CS, &[0; 512]);
}

#[test]
#[should_panic(expected = "crash rule broken: data before L2")]
fn a_data_file_flushed_only_on_the_image_fails() {
    let mut l = ledger_with(true);
    wrote(&mut l, Dev::Data, 10 * CS, CS);
    l.l2_changed(4 * CS);
    flush(&mut l);
    meta(&mut l, 4 * CS, &[0; 512]);
}

#[test]
#[should_panic(expected = "crash rule broken: refcounts before L2")]
fn an_l2_write_before_its_refcounts_are_durable_fails() {
    let mut l = ledger();
    l.refcount_changed(2 * CS);
    l.l2_changed(4 * CS);
    meta(&mut l, 2 * CS, &[0; 512]);
    meta(&mut l, 4 * CS, &[0; 512]);
}

#[test]
fn a_durable_dirty_bit_stands_in_for_refcounts() {
    let mut l = ledger();
    l.dirty_durable = true;
    l.refcount_changed(2 * CS);
    l.l2_changed(4 * CS);
    flush(&mut l);
    meta(&mut l, 4 * CS, &[0; 512]);
}

#[test]
#[should_panic(expected = "crash rule broken: L2 before L1")]
fn an_l1_entry_naming_an_l2_table_not_durable_fails() {
    let mut l = ledger();
    l.l2_created(4 * CS);
    flush(&mut l);
    meta(&mut l, 4 * CS, &[0; 512]);
    meta(&mut l, 3 * CS, &l1_naming(4 * CS));
}

#[test]
#[should_panic(expected = "crash rule broken: blocks before the refcount table")]
fn a_refcount_table_naming_a_block_not_durable_fails() {
    let mut l = ledger();
    l.refblock_added(2 * CS);
    meta(&mut l, 2 * CS, &[0; 512]);
    let mut t = vec![0u8; 16];
    t[8..].copy_from_slice(&(2 * CS).to_be_bytes());
    meta(&mut l, CS, &t);
}

/// The serialized header of the ledger's layout, its refcount table at
/// `reftable` instead, the dirty bit as `dirty` says.
fn header(reftable: u64, dirty: bool) -> Vec<u8> {
    Header {
        version: 3,
        backing_file_offset: 0,
        backing_file_size: 0,
        cluster_bits: CS.trailing_zeros(),
        size: 1 << 30,
        crypt_method: 0,
        l1_size: 8,
        l1_table_offset: 3 * CS,
        refcount_table_offset: reftable,
        refcount_table_clusters: 1,
        nb_snapshots: 0,
        snapshots_offset: 0,
        incompatible_features: if dirty { incompat::DIRTY } else { 0 },
        compatible_features: 0,
        autoclear_features: 0,
        refcount_order: 4,
        header_length: 104,
        compression_type: 0,
        extensions: Vec::new(),
        backing_file: None,
    }
    .serialize()
    .expect("a header")
}

#[test]
#[should_panic(expected = "crash rule broken: tables before the header")]
fn a_header_naming_a_table_not_durable_fails() {
    let mut l = ledger();
    meta(&mut l, 0, &header(CS, false));
    meta(&mut l, 6 * CS, &[0; 512]);
    flush(&mut l);
    meta(&mut l, 0, &header(6 * CS, false));
    // The table moved: changes of the old one are forgotten.
    assert_eq!(l.reftable, (6 * CS, 7 * CS));
    meta(&mut l, 8 * CS, &[0; 512]);
    meta(&mut l, 0, &header(8 * CS, false));
}

#[test]
#[should_panic(expected = "crash rule broken: refcounts before L2")]
fn the_dirty_bit_stands_in_only_while_durable() {
    let mut l = ledger();
    meta(&mut l, 0, &header(CS, true));
    flush(&mut l);
    l.refcount_changed(2 * CS);
    l.l2_changed(4 * CS);
    meta(&mut l, 4 * CS, &[0; 512]);
    // A header write clearing it, not yet durable: nothing stands in.
    meta(&mut l, 0, &header(CS, false));
    meta(&mut l, 4 * CS, &[0; 512]);
}

#[test]
#[should_panic(expected = "crash rule broken: frees after the reference is gone")]
fn a_free_before_the_reference_is_durably_gone_fails() {
    let mut l = ledger();
    l.l2_changed(4 * CS);
    l.free_queued(20, 0, false);
    l.free_applied(20, None);
}

#[test]
#[should_panic(expected = "started before the free is in flight")]
fn a_free_under_io_in_flight_fails() {
    let mut l = ledger();
    l.free_queued(20, 5, true);
    l.free_applied(20, Some(4));
}

#[test]
#[should_panic(expected = "crash rule broken: guest flush")]
fn a_flush_that_leaves_a_write_volatile_fails() {
    let mut l = ledger();
    let marks = l.completed();
    wrote(&mut l, Dev::Data, 0, 512);
    l.check_durable(marks, "guest flush");
    l.check_durable(l.completed(), "guest flush");
}
