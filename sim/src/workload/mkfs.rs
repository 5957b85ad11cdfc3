//! The `mkfs` profile, as mkfs.ext4 writes a fresh file system: discard the
//! whole device, zero the inode tables, write superblocks and their
//! backups, then many small scattered metadata writes (bitmaps, inodes) and
//! journal commits, each followed by a flush.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};
use crate::case::{Op, MAX_OP_SECTORS};

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    let mut s = 0;
    while s < geom.sectors {
        b.one(geom.discard(s, MAX_OP_SECTORS));
        s += MAX_OP_SECTORS;
    }
    // Block groups, each with a superblock copy, bitmaps and an inode table.
    let groups = rng.gen_range(2..=8u64);
    let group_len = (geom.sectors / groups).max(1);
    let table_len = (group_len / 4).max(1);
    b.group(
        (0..groups)
            .map(|g| geom.zeroes(g * group_len + 8, table_len, rng.gen_bool(0.3)))
            .collect(),
    );
    b.group(
        (0..groups)
            .map(|g| geom.write(g * group_len + 2, 2))
            .collect(),
    );
    b.one(Op::Flush);
    let journal = geom.sectors / 2;
    let journal_len = (geom.sectors / 8).clamp(8, 1024);
    let mut head = 0;
    while !b.full() {
        let n = rng.gen_range(1..=8);
        b.group(
            (0..n)
                .map(|_| {
                    let g = rng.gen_range(0..groups);
                    let len = pick(rng, &[1u64, 1, 2, 8]);
                    geom.write(g * group_len + 4 + rng.gen_range(0..table_len + 4), len)
                })
                .collect(),
        );
        // A journal commit: descriptor and blocks, flush, commit block, flush.
        let blocks = rng.gen_range(1..=8u64);
        b.one(geom.write(journal + head % journal_len, blocks * 8));
        b.one(Op::Flush);
        b.one(geom.write(journal + (head + blocks * 8) % journal_len, 1));
        b.one(Op::Flush);
        head += blocks * 8 + 1;
        if rng.gen_bool(0.2) {
            b.one(geom.read(0, 8));
        }
    }
    b.one(geom.write(2, 2));
}
