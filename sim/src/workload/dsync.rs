//! The `dsync` profile: a database whose files are opened O_DSYNC, so
//! that every write is durable when it returns (the kernel sends each as
//! a FUA write, or a write and a flush where the disk has no FUA): page
//! writes in place at a small queue depth, appends to a write-ahead log,
//! the odd page read and a rare fsync.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    let page = pick(rng, &[8u64, 8, 16, 32]).min(geom.sectors);
    let depth = pick(rng, &[1u32, 1, 2, 4]);
    // The log: the last quarter of the disk; pages before it.
    let log_len = (geom.sectors / 4).max(page);
    let log = geom.sectors.saturating_sub(log_len);
    let pages = (log / page).max(1);
    // The hot pages (a table's root and upper levels) take most writes.
    let hot: Vec<u64> = (0..rng.gen_range(2..=6))
        .map(|_| rng.gen_range(0..pages))
        .collect();
    let mut tail = 0;
    while !b.full() {
        // A transaction: its log record appended, then its pages.
        let record = page * rng.gen_range(1..=2);
        if tail + record > log_len {
            tail = 0;
        }
        b.one(geom.write(log + tail, record).with_fua(true));
        tail += record;
        let n = rng.gen_range(1..=depth);
        let writes: Vec<Op> = (0..n)
            .map(|_| {
                let p = if rng.gen_bool(0.6) {
                    pick(rng, &hot)
                } else {
                    rng.gen_range(0..pages)
                };
                geom.write(p * page, page).with_fua(true)
            })
            .collect();
        b.group(writes);
        match rng.gen_range(0..100) {
            0..20 => b.one(geom.read(rng.gen_range(0..pages) * page, page)),
            // A freed page's range zeroed (a vacuum).
            20..24 => b.one(
                geom.zeroes(rng.gen_range(0..pages) * page, page, false)
                    .with_fua(true),
            ),
            24..27 => b.one(Op::Flush),
            _ => {}
        }
    }
}
