//! The unit tests of `sim::bench::fua`.

use sim::bench::fua::*;
use sim::bench::CLUSTER_SIZE;

const SIZE: u64 = 16 * CLUSTER_SIZE;

#[test]
fn an_overwrite_in_place_is_one_fua_write_and_no_flush() {
    for pattern in [Pattern::Sequential, Pattern::Random] {
        let r = run_fua_job(SIZE, pattern, Fill::Allocated, Durability::Fua).unwrap();
        assert_eq!(
            (r.device_writes, r.fua_writes, r.flushes, r.metadata_writes),
            (1.0, 1.0, 0.0, 0.0),
            "{pattern:?}: {r:?}"
        );
    }
}

#[test]
fn an_allocating_fua_write_costs_at_most_two_flushes_and_less_than_write_flush() {
    for pattern in [Pattern::Sequential, Pattern::Random] {
        let fua = run_fua_job(SIZE, pattern, Fill::Fresh, Durability::Fua).unwrap();
        let plain = run_fua_job(SIZE, pattern, Fill::Fresh, Durability::WriteFlush).unwrap();
        assert!(fua.flushes <= 2.0, "{pattern:?}: {fua:?}");
        assert!(fua.flushes < plain.flushes, "{fua:?} vs {plain:?}");
        assert_eq!(fua.requests, SIZE / FUA_REQUEST);
    }
}

#[test]
fn random_offsets_are_distinct_slots_of_the_image() {
    let mut o = offsets(SIZE, Pattern::Random);
    assert_ne!(o, offsets(SIZE, Pattern::Sequential), "not shuffled");
    o.sort_unstable();
    o.dedup();
    assert_eq!(o.len() as u64, SIZE / FUA_REQUEST);
    assert!(o.iter().all(|&x| x % FUA_REQUEST == 0 && x < SIZE));
}
