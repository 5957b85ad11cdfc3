//! Resizes among a workload's requests: what `qemu-img resize` does to a
//! qcow2 image, under the same crashes, faults and checks as the guest's
//! own requests, so that a crash lands inside each step of a grow past
//! what the L1 table maps (`engine::steps`: `l1_growth`) and of a shrink
//! (`shrink`), and an apply of a snapshot taken before a resize gives the
//! disk its old size back (the apply's new-table steps).
//!
//! A case drawn for them grows its disk past the L1 table's reach (or, with
//! clusters so large that one L2 table maps more than a case may hold, by a
//! few clusters), writes and reads in the grown range, mostly shrinks it
//! below its created size (a whole number of clusters, dropping data the
//! model knows) and mostly grows it back to that size, whose range then
//! reads as zeroes. On a version 3 image it sometimes takes a snapshot
//! before the grow and applies one after it.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::Builder;

use crate::case::{ImageSpec, Op, MAX_VIRTUAL_SIZE};
use engine::Compat;
use oracle::data::SECTOR_SIZE;

/// Share of cases given resizes.
const PROBABILITY: f64 = 0.15;
/// Largest size a grow reaches past the L1 table (larger L2 reaches grow
/// by a few clusters instead).
const MAX_GROWN_BYTES: u64 = 4 << 30;
/// Most writes into the grown range.
const MAX_GROWN_WRITES: u32 = 4;
/// Most sectors of one of them.
const MAX_GROWN_WRITE_SECTORS: u64 = 64;

/// Adds resizes to `b`'s workload for `image`, with [`PROBABILITY`], drawn
/// from `rng`, a stream of their own. Returns how many.
pub fn add(rng: &mut ChaCha8Rng, image: &ImageSpec, b: &mut Builder) -> u32 {
    if !rng.gen_bool(PROBABILITY) || image.data_file.is_some() {
        return 0;
    }
    let c = &image.create;
    let ss = SECTOR_SIZE as u64;
    let size = c.size / ss;
    let cs = c.cluster_size / ss;
    let entry = if c.extended_l2 { 16 } else { 8 };
    // Guest sectors one L2 table maps, and the tables the size needs.
    let reach = c.cluster_size / entry * cs;
    let tables = size.div_ceil(reach);
    let grown = {
        let past_l1 = (tables + rng.gen_range(1..=2)) * reach;
        if past_l1 * ss <= MAX_GROWN_BYTES.min(MAX_VIRTUAL_SIZE) {
            past_l1
        } else {
            size.next_multiple_of(cs) + rng.gen_range(1..=4) * cs
        }
    };
    // Below the created size, a whole number of clusters, at least one.
    let shrunk = (rng.gen_range(size / 2..size.max(size / 2 + 1)) / cs * cs).max(cs);
    let mut at: Vec<usize> = (0..5)
        .map(|_| rng.gen_range(0..=b.groups() as u32) as usize)
        .collect();
    at.sort_unstable();
    let [p0, p1, p2, p3, p4] = [at[0], at[1], at[2], at[3], at[4]];
    let snapshot = c.compat == Compat::V3 && rng.gen_bool(0.5);
    let mut items = Vec::new();
    if snapshot {
        items.push((p0, Op::SnapshotCreate));
    }
    items.push((p1, Op::Resize { sectors: grown }));
    for _ in 0..rng.gen_range(1..=MAX_GROWN_WRITES) {
        let room = grown - size;
        let n = rng.gen_range(1..=MAX_GROWN_WRITE_SECTORS.min(room));
        // Now and then across the old end.
        let sector = if rng.gen_bool(0.2) && size > n {
            size - n / 2 - 1
        } else {
            size + rng.gen_range(0..=room - n)
        };
        let q = rng.gen_range(p1 as u32..=p2 as u32) as usize;
        items.push((
            q,
            Op::Write {
                sector,
                sectors: n,
                fua: false,
            },
        ));
        items.push((q, Op::Read { sector, sectors: n }));
    }
    if shrunk < size && rng.gen_bool(0.8) {
        items.push((p2, Op::Resize { sectors: shrunk }));
    }
    if snapshot {
        items.push((p3, Op::SnapshotApply { pick: rng.gen() }));
    }
    if rng.gen_bool(0.7) {
        items.push((p4, Op::Resize { sectors: size }));
    }
    // From the back, so that the places of those before stay valid; at
    // one place, in the order pushed.
    items.sort_by_key(|&(p, _)| p);
    let n = items.iter().filter(|(_, op)| op.runs_alone()).count() as u32;
    for (p, op) in items.into_iter().rev() {
        b.insert_one(p, op);
    }
    n
}
