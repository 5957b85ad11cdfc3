//! The `journal` profile: a journaling file system (ext4's jbd2, XFS's
//! log) committing transactions with FUA. Each transaction writes its data
//! blocks in place, then its journal blocks (descriptor and metadata
//! copies) in order, then a flush so they are durable before the commit
//! record, then the commit record alone flagged FUA: once that returns
//! the transaction is durable, with no flush after it. Every few
//! commits a checkpoint writes the journaled metadata to its home
//! locations, flushes, and updates the journal superblock with FUA.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};
use crate::case::Op;

pub(super) fn generate(rng: &mut ChaCha8Rng, b: &mut Builder) {
    let geom = b.geom;
    // The journal: the last eighth of the disk (at least 16 sectors), its
    // superblock in the first block; the rest holds data and metadata.
    let journal_len = (geom.sectors / 8).max(16).min(geom.sectors / 2);
    let journal = geom.sectors - journal_len;
    let block = pick(rng, &[1u64, 8, 8]);
    let home = journal.max(1);
    let mut head = block;
    let mut since_checkpoint = Vec::new();
    while !b.full() {
        // Data blocks in place (data=ordered: before the commit).
        let data: Vec<Op> = (0..rng.gen_range(0..=4))
            .map(|_| geom.write(rng.gen_range(0..home), block * rng.gen_range(1..=4)))
            .collect();
        b.group(data);
        // Journal blocks: descriptor and metadata copies, in order,
        // wrapping at the journal's end.
        let blocks = rng.gen_range(1..=6u64);
        let mut journal_ops = Vec::new();
        for _ in 0..blocks {
            if head + block > journal_len {
                head = block;
            }
            journal_ops.push(geom.write(journal + head, block));
            head += block;
        }
        b.group(journal_ops);
        // The commit: a preflush (the journal blocks durable first), then
        // the commit record with FUA.
        b.one(Op::Flush);
        if head + block > journal_len {
            head = block;
        }
        b.one(geom.write(journal + head, block).with_fua(true));
        head += block;
        since_checkpoint.extend((0..blocks).map(|_| rng.gen_range(0..home)));
        if since_checkpoint.len() >= 8 || rng.gen_bool(0.15) {
            // Checkpoint: metadata to its home, flushed, then the journal
            // superblock's new tail with FUA.
            let homes: Vec<Op> = since_checkpoint
                .drain(..)
                .map(|s| geom.write(s, block))
                .collect();
            for chunk in homes.chunks(4) {
                b.group(chunk.to_vec());
            }
            b.one(Op::Flush);
            b.one(geom.write(journal, block).with_fua(true));
        }
        if rng.gen_bool(0.2) {
            b.one(geom.read(rng.gen_range(0..geom.sectors), block * 4));
        }
    }
}
