//! The unit tests of `tools::check`.

use oracle::check::CheckReport;
use tools::check::*;

/// QEMU's QDict bucket of `key` (qobject/qdict.c: `tdb_hash`, 512
/// buckets).
fn qdict_bucket(key: &str) -> u32 {
    let mut value = 0x238F_13AFu32.wrapping_mul(key.len() as u32);
    for (i, &b) in key.as_bytes().iter().enumerate() {
        value = value.wrapping_add(u32::from(b) << (i * 5 % 24));
    }
    1_103_515_243u32.wrapping_mul(value).wrapping_add(12345) % 512
}

#[test]
fn check_json_fields_are_in_qdict_order() {
    let report = CheckReport {
        filename: "f".into(),
        format: "qcow2".into(),
        check_errors: 1,
        corruptions: 2,
        leaks: 3,
        corruptions_fixed: 4,
        leaks_fixed: 5,
        allocated_clusters: 6,
        total_clusters: 7,
        fragmented_clusters: 8,
        compressed_clusters: 9,
        image_end_offset: 10,
        ..CheckReport::default()
    };
    let json = CheckOutcome { report }.json();
    let keys: Vec<&str> = json
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix('"'))
        .map(|l| &l[..l.find('"').unwrap()])
        .collect();
    assert_eq!(keys.len(), 12, "{json}");
    let buckets: Vec<u32> = keys.iter().map(|k| qdict_bucket(k)).collect();
    let mut sorted = buckets.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(buckets, sorted, "{keys:?}");
}
