//! The corruption generator: named ways to break a clean image, each
//! aimed with the layout reader and a seeded ChaCha stream, so that a
//! failing case names what was done and is reproducible.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{get64, put64, Base, Layout};

/// One corrupted image.
pub struct Case {
    pub name: String,
    pub bytes: Vec<u8>,
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, v: &[T]) -> Option<T> {
    if v.is_empty() {
        None
    } else {
        Some(v[rng.gen_range(0..v.len())])
    }
}

/// Every corruption applicable to `base`, plus `random` seeded single-entry
/// bit flips.
pub fn cases(base: &Base, seed: u64, random: usize) -> Vec<Case> {
    let b = &base.bytes;
    let l = Layout::read(b);
    let cs = l.cluster_size();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut add = |name: &str, bytes: Vec<u8>| {
        out.push(Case {
            name: format!("{}/{}", base.name, name),
            bytes,
        });
    };
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut c = b.clone();
        f(&mut c);
        c
    };
    let far = (b.len() as u64 + 64 * cs) & !(cs - 1);

    add("clean", b.clone());

    if let Some((at, e)) = pick(&mut rng, &l.l2_entries) {
        let data = (e & 0x00ff_ffff_ffff_fe00) >> l.cluster_bits;
        let r = l.get_refcount(b, data);
        add("data-refcount-zero", edit(&|c| l.set_refcount(c, data, 0)));
        if r < u64::MAX >> (64 - (1u32 << l.refcount_order)) {
            add(
                "data-refcount-plus-one",
                edit(&|c| l.set_refcount(c, data, r + 1)),
            );
        }
        if r > 1 {
            add(
                "data-refcount-minus-one",
                edit(&|c| l.set_refcount(c, data, r - 1)),
            );
        }
        add("l2-copied-flip", edit(&|c| put64(c, at, e ^ (1 << 63))));
        add("l2-unaligned", edit(&|c| put64(c, at, e + 0x200)));
        add(
            "l2-beyond-eof",
            edit(&|c| put64(c, at, (e & 0xff00_0000_0000_01ff) | far)),
        );
        add("l2-reserved-bit", edit(&|c| put64(c, at, e | (1 << 57))));
        add(
            "l2-points-at-l1",
            edit(&|c| {
                put64(
                    c,
                    at,
                    (e & 0xff00_0000_0000_01ff) | (l.l1_offset & !(cs - 1)),
                )
            }),
        );
        add(
            "l2-points-at-reftable",
            edit(&|c| put64(c, at, (e & 0xff00_0000_0000_01ff) | l.reftable_offset)),
        );
        if let Some(&rt) = l.reftable_used.first() {
            let block = get64(b, rt) & !0x1ff;
            add(
                "l2-points-at-refblock",
                edit(&|c| put64(c, at, (e & 0xff00_0000_0000_01ff) | block)),
            );
        }
        if !l.extended_l2 {
            add(
                "l2-prealloc-zero-unaligned",
                edit(&|c| put64(c, at, (e | 1) + 0x200)),
            );
        }
        add("l2-entry-cleared", edit(&|c| put64(c, at, 0)));
        if let Some((at2, _)) = pick(&mut rng, &l.l2_entries).filter(|&(a, _)| a != at) {
            add("l2-duplicate-reference", edit(&|c| put64(c, at2, e)));
        }
    }
    if let Some(at) = pick(&mut rng, &l.l1_entries) {
        let e = get64(b, at);
        add("l1-copied-flip", edit(&|c| put64(c, at, e ^ (1 << 63))));
        add("l1-unaligned", edit(&|c| put64(c, at, e + 0x200)));
        add("l1-beyond-eof", edit(&|c| put64(c, at, (1 << 63) | far)));
        add("l1-reserved-bit", edit(&|c| put64(c, at, e | (1 << 60))));
        add(
            "l1-points-at-reftable",
            edit(&|c| put64(c, at, (1 << 63) | l.reftable_offset)),
        );
        add(
            "l1-points-at-l1",
            edit(&|c| put64(c, at, (1 << 63) | (l.l1_offset & !(cs - 1)))),
        );
        add("l1-entry-cleared", edit(&|c| put64(c, at, 0)));
    }
    if let Some(at) = pick(&mut rng, &l.compressed_entries) {
        let e = get64(b, at);
        add(
            "compressed-copied-set",
            edit(&|c| put64(c, at, e | (1 << 63))),
        );
        let csize_shift = 62 - (l.cluster_bits - 8);
        let off_mask = (1u64 << csize_shift) - 1;
        add(
            "compressed-beyond-eof",
            edit(&|c| put64(c, at, (e & !off_mask) | far)),
        );
        add(
            "compressed-size-max",
            edit(&|c| {
                put64(
                    c,
                    at,
                    e | (((1u64 << (l.cluster_bits - 8)) - 1) << csize_shift),
                )
            }),
        );
    }
    if l.extended_l2 {
        if let Some((at, _)) = pick(&mut rng, &l.l2_entries) {
            let bm = get64(b, at + 8);
            add(
                "subcluster-alloc-and-zero",
                edit(&|c| put64(c, at + 8, bm | (bm << 32) | 1 | (1 << 32))),
            );
        }
        // An unallocated entry with allocation bits set.
        let unalloc = (0..cs / 16)
            .map(|j| (get64(b, l.l1_offset) & 0x00ff_ffff_ffff_fe00) + j * 16)
            .find(|&a| get64(b, a) == 0);
        if let Some(at) = unalloc {
            add(
                "subcluster-unallocated-with-bitmap",
                edit(&|c| put64(c, at + 8, 0xf)),
            );
        }
    }
    if let Some(at) = pick(&mut rng, &l.reftable_used) {
        let e = get64(b, at);
        add(
            "reftable-entry-unaligned",
            edit(&|c| put64(c, at, e + 0x200)),
        );
        add("reftable-entry-reserved", edit(&|c| put64(c, at, e | 1)));
        add("reftable-entry-cleared", edit(&|c| put64(c, at, 0)));
        add("reftable-entry-beyond-eof", edit(&|c| put64(c, at, far)));
        add(
            "reftable-entry-at-l1",
            edit(&|c| put64(c, at, l.l1_offset & !(cs - 1))),
        );
        let block = e & !0x1ff;
        add(
            "refblock-zeroed",
            edit(&|c| {
                let s = block as usize;
                c[s..s + cs as usize].fill(0);
            }),
        );
    }
    if l.reftable_used.len() == 1 {
        let e = get64(b, l.reftable_used[0]);
        add(
            "reftable-duplicate-block",
            edit(&|c| put64(c, l.reftable_offset + 8, e)),
        );
    }
    // Leaks: a refcount set on an unused cluster inside the image.
    let unused = (1..b.len() as u64 / cs)
        .find(|&k| l.get_refcount(b, k) == 0 && l.refcount_slot(b, k).is_some());
    if let Some(k) = unused {
        add("leaked-cluster", edit(&|c| l.set_refcount(c, k, 1)));
    }
    if let Some(sn) = l.first_snapshot {
        let l1 = get64(b, sn);
        let size_word = get64(b, sn + 8);
        add("snapshot-l1-unaligned", edit(&|c| put64(c, sn, l1 + 0x200)));
        add("snapshot-l1-beyond-eof", edit(&|c| put64(c, sn, far)));
        add(
            "snapshot-l1-at-reftable",
            edit(&|c| put64(c, sn, l.reftable_offset)),
        );
        add(
            "snapshot-l1-too-large",
            edit(&|c| put64(c, sn + 8, (size_word & 0xffff_ffff) | (0x0100_0000 << 32))),
        );
        // extra_data_size is the low half of the word at +32.
        let w = get64(b, sn + 32);
        add(
            "snapshot-extra-data-short",
            edit(&|c| put64(c, sn + 32, w & !0xffff_ffff)),
        );
        add(
            "snapshot-count-too-many",
            edit(&|c| {
                let w = get64(c, 56);
                put64(c, 56, (w & !0xffff_ffff) | 65537);
            }),
        );
        add(
            "snapshot-table-unaligned",
            edit(&|c| {
                let o = get64(c, 64);
                put64(c, 64, o + 8);
            }),
        );
    }
    if let Some(ext) = l.bitmaps_ext {
        let dir = get64(b, ext + 16);
        let table = get64(b, dir);
        let entries = get64(b, dir + 8) >> 32;
        add(
            "bitmap-directory-beyond-eof",
            edit(&|c| put64(c, ext + 16, far)),
        );
        add(
            "bitmap-directory-unaligned",
            edit(&|c| put64(c, ext + 16, dir + 0x200)),
        );
        add(
            "bitmap-table-at-l1",
            edit(&|c| put64(c, dir, l.l1_offset & !(cs - 1))),
        );
        add("bitmap-table-beyond-eof", edit(&|c| put64(c, dir, far)));
        let used = (0..entries)
            .map(|k| table + 8 * k)
            .find(|&a| get64(b, a) != 0);
        if let Some(at) = used {
            let e = get64(b, at);
            add("bitmap-entry-reserved-bit", edit(&|c| put64(c, at, e | 2)));
            add("bitmap-entry-unaligned", edit(&|c| put64(c, at, e + 0x200)));
            add("bitmap-entry-cleared", edit(&|c| put64(c, at, 0)));
        }
        add(
            "bitmap-autoclear-cleared",
            edit(&|c| {
                let f = get64(c, 88);
                put64(c, 88, f & !1);
            }),
        );
    }
    let len = b.len() as u64;
    add(
        "truncated-last-half-cluster",
        edit(&|c| c.truncate((len - cs / 2) as usize)),
    );
    add(
        "truncated-two-clusters",
        edit(&|c| c.truncate((len - 2 * cs) as usize)),
    );
    add("truncated-to-header", edit(&|c| c.truncate(cs as usize)));
    add(
        "extended-by-garbage",
        edit(&|c| c.extend(std::iter::repeat_n(0xa5, 3 * cs as usize))),
    );
    add(
        "dirty-bit-set",
        edit(&|c| {
            if get64(c, 0) >> 32 == 3 {
                let f = get64(c, 72);
                put64(c, 72, f | 1);
            }
        }),
    );
    add(
        "corrupt-bit-set",
        edit(&|c| {
            if get64(c, 0) >> 32 == 3 {
                let f = get64(c, 72);
                put64(c, 72, f | 2);
            }
        }),
    );

    // Seeded single-bit flips in one metadata entry.
    let mut targets: Vec<u64> = l.l1_entries.clone();
    targets.extend(l.l2_entries.iter().map(|&(a, _)| a));
    targets.extend(l.reftable_used.iter().copied());
    for t in &l.reftable_used {
        let block = get64(b, *t) & !0x1ff;
        for k in 0..4 {
            targets.push(block + k * 8);
        }
    }
    for n in 0..random {
        let Some(at) = pick(&mut rng, &targets) else {
            break;
        };
        let bit = rng.gen_range(0..64);
        let e = get64(b, at);
        add(
            &format!("flip-{n}-at-{at:#x}-bit-{bit}"),
            edit(&|c| put64(c, at, e ^ (1 << bit))),
        );
    }
    out
}
