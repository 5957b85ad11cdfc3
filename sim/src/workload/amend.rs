//! Amends among a workload's requests: what `qemu-img amend` does to a
//! qcow2 image (the version up and down, lazy refcounts on and off, the
//! refcount width), under the same crashes, faults and checks as the
//! guest's own requests, so that a crash lands inside each step of each
//! change (`engine::steps`: `amend_version`, `amend_lazy_refcounts`,
//! `amend_refcount_bits`).
//!
//! A case drawn for them gets one to [`MAX_AMENDS`] amends, each a group
//! of its own (it runs alone, as a snapshot operation does), each a change
//! the image can take as the workload leaves it: the generator follows
//! the version, lazy refcounts and width each amend asks for. A crash may
//! undo one, so a later amend may find the image elsewhere and be refused;
//! the runner counts that, as QEMU would refuse it.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::builder::{pick, Builder};

use crate::case::{Amend, ImageSpec, Op};
use engine::Compat;

/// Share of cases given amends.
const PROBABILITY: f64 = 0.15;
/// Share of cases with snapshot operations given amends: a version
/// change rewrites the snapshot table, a new width counts shared clusters.
const WITH_SNAPSHOTS_PROBABILITY: f64 = 0.3;
/// Most amends a case gets.
const MAX_AMENDS: u32 = 3;
/// The refcount widths an amend picks among.
const WIDTHS: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The format options an amend changes, as the workload leaves them.
#[derive(Debug, Clone, Copy)]
struct Options {
    v2: bool,
    lazy: bool,
    bits: u32,
    /// Extended L2 entries or an external data file: no way back to
    /// version 2.
    v3_only: bool,
}

impl Options {
    /// A change this image can take that changes something: the kind
    /// first (the version, lazy refcounts or the width, each as likely,
    /// so that downgrades are not rare), then the value.
    fn draw(&self, rng: &mut ChaCha8Rng) -> Amend {
        if self.v2 {
            // Lazy refcounts and other widths need version 3 first.
            return Amend::Version(3);
        }
        let kinds = if self.v3_only { 2 } else { 3 };
        match rng.gen_range(0..kinds) {
            0 => Amend::LazyRefcounts(!self.lazy),
            1 => {
                let others: Vec<u32> = WIDTHS.into_iter().filter(|&b| b != self.bits).collect();
                Amend::RefcountBits(pick(rng, &others))
            }
            _ => Amend::Version(2),
        }
    }

    /// As `change` leaves them.
    fn apply(&mut self, change: Amend) {
        match change {
            Amend::Version(v) => {
                self.v2 = v == 2;
                if self.v2 {
                    self.lazy = false;
                }
            }
            Amend::LazyRefcounts(on) => self.lazy = on,
            Amend::RefcountBits(b) => self.bits = b,
        }
    }
}

/// Adds amends to `b`'s workload at random places, with [`PROBABILITY`]
/// (or [`WITH_SNAPSHOTS_PROBABILITY`] for a case with `snapshots`), drawn
/// from `rng`, a stream of their own. Returns how many.
pub fn add(rng: &mut ChaCha8Rng, image: &ImageSpec, snapshots: bool, b: &mut Builder) -> u32 {
    let p = if snapshots {
        WITH_SNAPSHOTS_PROBABILITY
    } else {
        PROBABILITY
    };
    if !rng.gen_bool(p) {
        return 0;
    }
    let c = &image.create;
    let mut options = Options {
        v2: c.compat == Compat::V2,
        lazy: c.lazy_refcounts,
        bits: c.refcount_bits,
        v3_only: c.extended_l2 || image.data_file.is_some(),
    };
    let n = rng.gen_range(1..=MAX_AMENDS);
    let mut places: Vec<usize> = (0..n)
        .map(|_| rng.gen_range(0..=b.groups() as u32) as usize)
        .collect();
    places.sort_unstable();
    let mut changes = Vec::new();
    for _ in 0..n {
        let mut change = options.draw(rng);
        // A downgrade needs 16-bit refcounts: mostly give it them first
        // rather than have it refused.
        if change == Amend::Version(2) && options.bits != 16 && rng.gen_bool(0.8) {
            change = Amend::RefcountBits(16);
        }
        options.apply(change);
        changes.push(change);
    }
    // From the back, so that earlier places stay where they were.
    for (&at, &change) in places.iter().zip(&changes).rev() {
        b.insert_one(at, Op::Amend { change });
    }
    n
}
