//! The `random` profile: every kind of request, concurrent, mostly on a few
//! hot clusters so that requests overlap, share clusters and race.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{anywhere, pick, Builder};
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    let depth = pick(rng, &[1u32, 2, 4, 8, 16]);
    let hot: Vec<u64> = (0..rng.gen_range(2..=8))
        .map(|_| rng.gen_range(0..geom.clusters()))
        .collect();
    let max_len = (2 * geom.cluster_sectors).clamp(8, 256);
    while !b.full() {
        let n = rng.gen_range(1..=depth);
        let ops = (0..n)
            .map(|_| {
                let (sector, sectors) = if rng.gen_bool(0.7) {
                    let c = pick(rng, &hot);
                    let start = c * geom.cluster_sectors + rng.gen_range(0..geom.cluster_sectors);
                    geom.clamp(start, rng.gen_range(1..=max_len))
                } else {
                    anywhere(rng, &geom, max_len)
                };
                match rng.gen_range(0..100) {
                    0..45 => Op::Write {
                        sector,
                        sectors,
                        fua: false,
                    },
                    45..70 => Op::Read { sector, sectors },
                    70..78 => Op::WriteZeroes {
                        sector,
                        sectors,
                        unmap: rng.gen_bool(0.5),
                        fua: false,
                    },
                    78..86 => Op::Discard {
                        sector,
                        sectors,
                        fua: false,
                    },
                    _ => Op::Flush,
                }
            })
            .collect();
        b.group(ops);
    }
}
