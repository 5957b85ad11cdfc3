//! The `sequential` profile, as `dd` writes: fixed blocks of 4 KiB to
//! 1 MiB in order, a few in flight, an fsync now and then, then the data
//! read back in the same blocks.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    while !b.full() {
        let block = pick(rng, &[8u64, 16, 32, 64, 128, 256, 512, 1024, 2048]).min(geom.sectors);
        let depth = pick(rng, &[1u64, 1, 2, 4]);
        let fsync_every = pick(rng, &[0u64, 4, 16]);
        // dd with seek= often starts off a cluster boundary.
        let start = match rng.gen_range(0..3) {
            0 => 0,
            1 => rng.gen_range(0..geom.clusters()) * geom.cluster_sectors,
            _ => rng.gen_range(0..geom.sectors),
        };
        let blocks = ((geom.sectors - start) / block).clamp(1, 64);
        for pass in [Pass::Write, Pass::Read] {
            let mut i = 0;
            while i < blocks && !b.full() {
                let ops = (i..(i + depth).min(blocks))
                    .map(|j| match pass {
                        Pass::Write => geom.write(start + j * block, block),
                        Pass::Read => geom.read(start + j * block, block),
                    })
                    .collect();
                b.group(ops);
                i += depth;
                if pass == Pass::Write && fsync_every > 0 && i % fsync_every < depth {
                    b.one(Op::Flush);
                }
            }
            if pass == Pass::Write {
                // conv=fsync
                b.one(Op::Flush);
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Write,
    Read,
}
