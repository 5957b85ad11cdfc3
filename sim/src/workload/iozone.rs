//! The `iozone` profile: a file written, rewritten and read in records,
//! then rewritten and read at random records, as iozone's write/rewrite,
//! read/reread and random read/write tests do.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    while !b.full() {
        let record = pick(rng, &[8u64, 16, 32, 64, 128]).min(geom.sectors);
        let records = (geom.sectors / record).clamp(1, rng.gen_range(8..=48));
        let start = rng.gen_range(0..=(geom.sectors - records * record));
        let depth = pick(rng, &[1u64, 2, 4]);
        let at = |r: u64| start + r * record;
        // write, rewrite: sequential records, flushed at close.
        for _ in 0..2 {
            sequential(b, depth, records, |r| geom.write(at(r), record));
            b.one(Op::Flush);
        }
        // read, reread.
        for _ in 0..2 {
            sequential(b, depth, records, |r| geom.read(at(r), record));
        }
        // random write, random read.
        let n = records.min(24);
        let picks: Vec<u64> = (0..n).map(|_| rng.gen_range(0..records)).collect();
        for chunk in picks.chunks(depth as usize) {
            if b.full() {
                break;
            }
            b.group(chunk.iter().map(|r| geom.write(at(*r), record)).collect());
        }
        if rng.gen_bool(0.5) {
            b.one(Op::Flush);
        }
        for chunk in picks.chunks(depth as usize) {
            if b.full() {
                break;
            }
            b.group(chunk.iter().map(|r| geom.read(at(*r), record)).collect());
        }
    }
}

fn sequential(b: &mut Builder, depth: u64, records: u64, op: impl Fn(u64) -> Op) {
    let mut r = 0;
    while r < records && !b.full() {
        b.group((r..(r + depth).min(records)).map(&op).collect());
        r += depth;
    }
}
