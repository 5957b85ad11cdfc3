//! Which guest sectors the whole-disk reads after a crash and at the end
//! cover. A disk of at most [`WHOLE_SWEEP_MAX`] bytes (every disk a case
//! could have before the bounds were lifted to 1 TiB) is read whole, in
//! [`SWEEP_CHUNK`]s, exactly as before. A larger one is read sparsely, so
//! that a run costs time and memory in proportion to what was written and
//! not to the virtual size: every chunk holding a sector the model has a
//! record of, every chunk the backing file has data in, every chunk a
//! guest cluster the image maps (an L2 entry that is not zero, read from
//! the image itself, not asked of the engine) overlaps, and the first and
//! last chunk. A chunk left out holds no written sector, no backing data
//! and no cluster of the image: it can only read zeroes.

use std::collections::BTreeSet;

/// Bytes of one read of a sweep.
pub(super) const SWEEP_CHUNK: u64 = 1 << 20;

use oracle::data::SECTOR_SIZE;
use oracle::model::Model;

use crate::case::{Case, WHOLE_SWEEP_MAX};
use crate::disk::{SimDisk, SparseStore};

/// Most L1 entries a sparse sweep looks through (a larger count in a
/// header is not the engine's image: it refuses to open it).
const MAX_L1_ENTRIES: u64 = 1 << 24;

const CHUNK_SECTORS: u64 = SWEEP_CHUNK / SECTOR_SIZE as u64;

/// The sweep's reads of a disk of `sectors` sectors (its size now), in
/// order: `(first sector, sectors)`.
pub(super) fn plan(case: &Case, sectors: u64, model: &Model, disk: &SimDisk) -> Vec<(u64, u64)> {
    let chunks = sectors.div_ceil(CHUNK_SECTORS);
    let read = |c: u64| {
        let first = c * CHUNK_SECTORS;
        (first, CHUNK_SECTORS.min(sectors - first))
    };
    if sectors * SECTOR_SIZE as u64 <= WHOLE_SWEEP_MAX {
        return (0..chunks).map(read).collect();
    }
    let mut set: BTreeSet<u64> = model
        .recorded_sectors()
        .into_iter()
        .take_while(|&s| s < sectors)
        .map(|s| s / CHUNK_SECTORS)
        .collect();
    set.insert(0);
    set.insert(chunks - 1);
    if let Some(b) = case.backing_data() {
        set.extend(0..b.sectors.min(sectors).div_ceil(CHUNK_SECTORS));
    }
    for (guest, len) in mapped_clusters(&disk.volatile()) {
        let first = guest / SWEEP_CHUNK;
        let last = (guest + len - 1) / SWEEP_CHUNK;
        set.extend((first..=last).take_while(|&c| c < chunks));
    }
    set.into_iter().map(read).collect()
}

/// The guest ranges `(offset, len)` the image's active L1 and L2 tables
/// map to anything (an L2 entry or, with extended L2, its bitmap not zero),
/// read from the image's bytes. A header or table that cannot be read maps
/// nothing more.
pub fn mapped_clusters(image: &SparseStore) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut h = [0u8; 80];
    if image.len() < 48 {
        return out;
    }
    image.read(0, &mut h);
    if h[..4] != *b"QFI\xfb" {
        return out;
    }
    let be32 = |o: usize| u32::from_be_bytes(h[o..o + 4].try_into().unwrap()) as u64;
    let be64 = |o: usize| u64::from_be_bytes(h[o..o + 8].try_into().unwrap());
    let version = be32(4);
    let bits = be32(20);
    if !(9..=21).contains(&bits) {
        return out;
    }
    let extended = version >= 3 && image.len() >= 80 && be64(72) & (1 << 4) != 0;
    let cluster = 1u64 << bits;
    let entry = if extended { 16 } else { 8 };
    let per_l2 = cluster / entry;
    let (l1_size, l1_off) = (be32(36).min(MAX_L1_ENTRIES), be64(40));
    let mut l1 = vec![0u8; (l1_size * 8) as usize];
    image.read(l1_off, &mut l1);
    let mut l2 = vec![0u8; cluster as usize];
    for (i, e) in l1.chunks_exact(8).enumerate() {
        let l2_off = u64::from_be_bytes(e.try_into().unwrap()) & 0x00ff_ffff_ffff_fe00;
        if l2_off == 0 || l2_off >= image.len() {
            continue;
        }
        image.read(l2_off, &mut l2);
        for (j, x) in l2.chunks_exact(entry as usize).enumerate() {
            if x.iter().any(|&b| b != 0) {
                let guest = (i as u64 * per_l2 + j as u64) << bits;
                out.push((guest, cluster));
            }
        }
    }
    out
}
