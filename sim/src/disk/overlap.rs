//! Overlapping writes in flight: the write-like requests (write,
//! write_zeroes, discard) a disk has issued and not yet completed, and
//! every time a new one was issued over bytes one of them still covers.
//!
//! Two such requests race: which lands last is the disk's choice, and a
//! crash may keep any mix of their sectors. A driver that serialises its
//! own writes never causes one (the engine waits for every in-flight
//! write over the same guest bytes before it issues another, and its
//! crash rules order every metadata write after the writes it depends
//! on), so on the engine's disks any overlap is a broken rule, caught where
//! it happens instead of in a crash state that may or may not show it.

use engine::dev::IoOp;

use crate::exec::Nanos;

/// The overlaps kept in full per disk; the rest are only counted.
pub const OVERLAPS_KEPT: usize = 8;

/// A write-like request in flight, as issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightWrite {
    /// The request's id on its disk (its index in the disk's log).
    pub id: u64,
    pub op: IoOp,
    pub offset: u64,
    pub len: u64,
    /// When it was issued, on the simulation's clock.
    pub issued: Nanos,
}

impl InFlightWrite {
    fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }

    fn overlaps(&self, o: &InFlightWrite) -> bool {
        self.offset < o.end() && o.offset < self.end()
    }
}

impl std::fmt::Display for InFlightWrite {
    /// `write 65536+4096 (request 12, issued at 1500 ns)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}+{} (request {}, issued at {} ns)",
            self.op.name(),
            self.offset,
            self.len,
            self.id,
            self.issued
        )
    }
}

/// A request issued while an earlier one over some of the same bytes was
/// still in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    pub earlier: InFlightWrite,
    pub later: InFlightWrite,
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} issued while {} was in flight",
            self.later, self.earlier
        )
    }
}

/// The write-like requests in flight on one disk, and the overlaps seen.
/// A plain vector: a disk has tens of requests in flight at most, and a
/// scan of them costs less than keeping a tree in order.
#[derive(Debug, Default)]
pub struct InFlightWrites {
    writes: Vec<InFlightWrite>,
    /// The first [`OVERLAPS_KEPT`] overlaps, in the order they were issued.
    overlaps: Vec<Overlap>,
    /// Every overlap, kept or not.
    count: u64,
}

impl InFlightWrites {
    /// `w` was issued: note every in-flight request it overlaps, then
    /// count it in flight. Empty requests overlap nothing.
    pub fn issue(&mut self, w: InFlightWrite) {
        if w.len == 0 {
            return;
        }
        for earlier in self.writes.iter().filter(|e| e.overlaps(&w)) {
            self.count += 1;
            if self.overlaps.len() < OVERLAPS_KEPT {
                self.overlaps.push(Overlap {
                    earlier: *earlier,
                    later: w,
                });
            }
        }
        self.writes.push(w);
    }

    /// Request `id` completed (successfully or not).
    pub fn complete(&mut self, id: u64) {
        if let Some(i) = self.writes.iter().position(|w| w.id == id) {
            self.writes.swap_remove(i);
        }
    }

    /// The overlaps kept, and how many there were in all.
    pub fn overlaps(&self) -> (&[Overlap], u64) {
        (&self.overlaps, self.count)
    }
}
