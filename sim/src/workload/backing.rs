//! The `backing` profile: an overlay on a backing file, written in partial
//! clusters so that every allocation copies backing data (COW), with
//! concurrent writes into the same cluster and reads of whole clusters to
//! see that the copied parts survived.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::Builder;
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    let cs = geom.cluster_sectors;
    while !b.full() {
        let cluster = rng.gen_range(0..geom.clusters());
        let base = cluster * cs;
        let n = rng.gen_range(1..=4);
        let ops = (0..n)
            .map(|_| {
                let off = rng.gen_range(0..cs);
                // Mostly inside the cluster, sometimes across its end.
                let len = if rng.gen_bool(0.8) {
                    rng.gen_range(1..=cs - off)
                } else {
                    rng.gen_range(1..=cs + cs / 2)
                };
                match rng.gen_range(0..100) {
                    0..80 => geom.write(base + off, len),
                    80..90 => geom.zeroes(base + off, len, rng.gen_bool(0.5)),
                    _ => geom.discard(base + off, len),
                }
            })
            .collect();
        b.group(ops);
        if rng.gen_bool(0.5) {
            b.one(geom.read(base, cs * 2));
        }
        if rng.gen_bool(0.15) {
            b.one(Op::Flush);
        }
    }
}
