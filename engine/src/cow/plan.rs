//! The COW planner: one pure function from what an allocation still has to
//! copy, and the facts that matter (the pieces' sources, whether the run is
//! fresh, whether a write into it failed, whether the cluster is filled in
//! place) and the switches, to the device requests that do it. Every COW
//! optimisation decides here and nowhere else:
//!
//! - zero_cow: COW whose source is zeroes needs no data. If the run is
//!   fresh (growing the file zeroed it and nothing has used it since,
//!   `grow::is_fresh`) and no write into it failed, no request at all;
//!   otherwise one efficient (no-fallback) write_zeroes, and ordinary
//!   copies if the device refuses it. With the data in hand (the
//!   allocating write without delayed COW) and all the COW reading as
//!   zeroes, the whole cover is zeroed in one request, then the data
//!   written (seed 001).
//! - merge_cow: neighbouring COW and data go out as one device write: head
//!   COW, guest data and tail COW with the data in hand; each contiguous
//!   range a commit still has to copy, whatever sources its pieces have,
//!   under delayed COW. Without it every piece of one source is a request
//!   of its own, and the data another.
//! - The in-place rule, for every zeroing request: a cluster filled in
//!   place (`Alloc::in_place`) is live, readers and a crash see every byte
//!   of it, so a zeroing request may cover only bytes that read as zeroes
//!   now; in a new cluster, which nobody sees before it is linked, it may
//!   also cover the guest data about to be written over it.
//! - The `DropPartialCow` broken variant: no COW at all.
//!
//! The executor (`cow::exec`) carries a plan out without deciding anything.

use super::source::Piece;

/// Half-open guest byte range.
pub type Range = (u64, u64);

/// What the planner is told about one allocation's COW.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CowJob {
    /// The guest bytes the allocation fills and links (`Alloc::cover_start
    /// ..cover_end`).
    pub cover: Range,
    /// All of the cover, cut into pieces of one source (`cow_pieces`).
    pub pieces: Vec<Piece>,
    /// The ranges still to copy, in order, disjoint, inside the cover.
    pub todo: Vec<Range>,
    /// The guest data that goes to the device with this COW: the
    /// allocating write without delayed COW. `None` when completing an
    /// allocation whose writes are done (its commit).
    pub data: Option<Range>,
    /// The host cluster is the guest cluster's own, and live.
    pub in_place: bool,
    /// The new clusters read as zeroes (grown ahead, never used).
    pub fresh: bool,
    /// A write into the new clusters failed: they may hold anything.
    pub failed_write: bool,
}

/// The switches the planner obeys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CowSwitches {
    /// The zero_cow optimisation (see the module doc).
    pub zero_cow: bool,
    /// The merge_cow optimisation (see the module doc).
    pub merge_cow: bool,
    /// The `DropPartialCow` broken variant.
    pub drop_cow: bool,
}

/// The device requests that do one allocation's COW (and the data going
/// with it), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CowPlan {
    /// The steps, carried out one after the other.
    pub steps: Vec<Step>,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The range reads as zeroes already: no request (counted).
    AlreadyZero(Range),
    /// One no-fallback write_zeroes over `range`, then the writes `then`;
    /// if the device refuses it, the writes `or_else` instead of both.
    Zero {
        range: Range,
        then: Vec<Write>,
        or_else: Vec<Write>,
    },
    /// A group of writes: every COW source of the group is read first,
    /// then the writes go out in order.
    Write(Vec<Write>),
}

/// One device write: its parts are contiguous, in guest order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write(pub Vec<Part>);

/// One contiguous part of a device write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Old content, read from its source.
    Cow(Piece),
    /// Guest data of the write in progress.
    Data(Range),
}

impl Part {
    /// The guest bytes the part covers.
    pub fn range(&self) -> Range {
        match *self {
            Part::Cow(p) => (p.start, p.end),
            Part::Data(r) => r,
        }
    }
}

impl Write {
    /// The guest bytes the write covers.
    pub fn range(&self) -> Range {
        let first = self.0.first().expect("a write has parts").range();
        let last = self.0.last().expect("a write has parts").range();
        (first.0, last.1)
    }

    /// Bytes of old content in the write.
    pub fn cow_bytes(&self) -> u64 {
        self.0
            .iter()
            .map(|p| match p {
                Part::Cow(p) => p.len(),
                Part::Data(_) => 0,
            })
            .sum()
    }
}

/// The pieces of `pieces` inside `r`, clipped to it.
pub fn pieces_in(pieces: &[Piece], (s, e): Range) -> Vec<Piece> {
    pieces
        .iter()
        .filter(|p| p.start < e && s < p.end)
        .map(|p| Piece {
            start: p.start.max(s),
            end: p.end.min(e),
            src: p.src,
        })
        .collect()
}

impl CowJob {
    /// The pieces still to copy, in guest order.
    fn todo_pieces(&self) -> Vec<Piece> {
        self.todo
            .iter()
            .flat_map(|&r| pieces_in(&self.pieces, r))
            .collect()
    }

    /// The in-place rule: whether one zeroing request may cover `r`. Every
    /// byte of it still to copy must read as zeroes, and, in a live
    /// cluster (in place), every other byte too: there they are the guest
    /// data's, which readers and a crash see as they are until the data
    /// lands. A new cluster is nobody's until linked.
    pub fn may_zero(&self, r: Range) -> bool {
        let todo_zero = self
            .todo
            .iter()
            .map(|&(s, e)| (s.max(r.0), e.min(r.1)))
            .filter(|(s, e)| s < e)
            .flat_map(|t| pieces_in(&self.pieces, t))
            .all(|p| p.src.is_zero());
        todo_zero && (!self.in_place || pieces_in(&self.pieces, r).iter().all(|p| p.src.is_zero()))
    }

    /// Zero-source COW here reads as zeroes already: no request.
    fn already_zero(&self) -> bool {
        self.fresh && !self.failed_write
    }
}

/// The plan for `job` under `sw`.
pub fn plan(job: &CowJob, sw: CowSwitches) -> CowPlan {
    let data = job.data.map(|d| Write(vec![Part::Data(d)]));
    if job.todo.is_empty() || sw.drop_cow {
        let steps = data.map(|w| Step::Write(vec![w])).into_iter().collect();
        return CowPlan { steps };
    }
    if let Some(data) = data {
        if sw.zero_cow && job.may_zero(job.cover) {
            // The whole cover in one zeroing request, then the data.
            if job.already_zero() {
                let mut steps: Vec<Step> = job.todo.iter().map(|&r| Step::AlreadyZero(r)).collect();
                steps.push(Step::Write(vec![data]));
                return CowPlan { steps };
            }
            // Refused, everything is copied, merged or apart.
            let steps = vec![Step::Zero {
                range: job.cover,
                then: vec![data],
                or_else: requests(job, sw),
            }];
            return CowPlan { steps };
        }
    }
    CowPlan {
        steps: requests(job, sw)
            .into_iter()
            .map(|w| step_for(job, sw, w))
            .collect(),
    }
}

/// The job cut into one write per request. With merge_cow, each
/// contiguous run of COW still to copy and data is one; without, each
/// piece of one source is one, and the data another, last.
fn requests(job: &CowJob, sw: CowSwitches) -> Vec<Write> {
    let pieces = job.todo_pieces().into_iter().map(Part::Cow);
    if !sw.merge_cow {
        let data = job.data.map(Part::Data);
        return pieces.chain(data).map(|p| Write(vec![p])).collect();
    }
    let mut parts: Vec<Part> = pieces.chain(job.data.map(Part::Data)).collect();
    parts.sort_by_key(|p| p.range().0);
    let mut writes: Vec<Write> = Vec::new();
    for p in parts {
        match writes.last_mut() {
            Some(w) if w.range().1 == p.range().0 => w.0.push(p),
            _ => writes.push(Write(vec![p])),
        }
    }
    writes
}

/// The step for one request: COW that reads as zeroes is skipped (a fresh
/// run) or zeroed (zero_cow); anything else is written.
fn step_for(job: &CowJob, sw: CowSwitches, w: Write) -> Step {
    let r = w.range();
    let all_cow = w.0.iter().all(|p| matches!(p, Part::Cow(_)));
    if all_cow && sw.zero_cow && job.may_zero(r) {
        if job.already_zero() {
            // Growing the file zeroed these bytes, and no write into the
            // allocation has failed over them since.
            return Step::AlreadyZero(r);
        }
        return Step::Zero {
            range: r,
            then: Vec::new(),
            or_else: vec![w],
        };
    }
    Step::Write(vec![w])
}
