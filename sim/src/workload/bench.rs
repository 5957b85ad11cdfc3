//! The `bench` profile, as `qemu-img bench -w`: fixed-size requests at a
//! fixed step, `depth` of them in flight, with an optional flush interval;
//! now and then a read run over what was written.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    while !b.full() {
        let size = pick(rng, &[1u64, 8, 8, 128]).min(geom.sectors);
        // qemu-img bench's --step defaults to the request size.
        let step = size * pick(rng, &[1u64, 1, 2]);
        let depth = pick(rng, &[1u64, 4, 16, 32]);
        let flush_interval = pick(rng, &[0u64, 16, 64]);
        let start = rng.gen_range(0..geom.sectors);
        let count = rng.gen_range(16..=128u64);
        let at = |i: u64| (start + i * step) % (geom.sectors - size + 1);
        let write = rng.gen_bool(0.8);
        let mut i = 0;
        while i < count && !b.full() {
            let n = depth.min(count - i);
            b.group(
                (i..i + n)
                    .map(|j| {
                        if write {
                            geom.write(at(j), size)
                        } else {
                            geom.read(at(j), size)
                        }
                    })
                    .collect(),
            );
            i += n;
            if flush_interval > 0 && i % flush_interval < n {
                b.one(Op::Flush);
            }
        }
    }
}
