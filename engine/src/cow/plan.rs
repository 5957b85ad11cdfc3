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
pub(crate) type Range = (u64, u64);

/// What the planner is told about one allocation's COW.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CowJob {
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
pub(crate) struct CowSwitches {
    pub zero_cow: bool,
    pub merge_cow: bool,
    /// The `DropPartialCow` broken variant.
    pub drop_cow: bool,
}

/// The device requests that do one allocation's COW (and the data going
/// with it), in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CowPlan {
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
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
pub(crate) struct Write(pub Vec<Part>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// Old content, read from its source.
    Cow(Piece),
    /// Guest data of the write in progress.
    Data(Range),
}

impl Part {
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
fn pieces_in(pieces: &[Piece], (s, e): Range) -> Vec<Piece> {
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
    fn may_zero(&self, r: Range) -> bool {
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
pub(crate) fn plan(job: &CowJob, sw: CowSwitches) -> CowPlan {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cow::CowSource;

    const K: u64 = 1024;

    fn piece(start: u64, end: u64, src: CowSource) -> Piece {
        Piece { start, end, src }
    }

    fn cow(start: u64, end: u64, src: CowSource) -> Part {
        Part::Cow(piece(start, end, src))
    }

    fn one(parts: Vec<Part>) -> Step {
        Step::Write(vec![Write(parts)])
    }

    /// A new 64 KiB cluster at guest 0 from `src`, written at [16K, 20K).
    fn write_job(src: CowSource) -> CowJob {
        CowJob {
            cover: (0, 64 * K),
            pieces: vec![piece(0, 64 * K, src)],
            todo: vec![(0, 16 * K), (20 * K, 64 * K)],
            data: Some((16 * K, 20 * K)),
            in_place: false,
            fresh: false,
            failed_write: false,
        }
    }

    const DATA: Part = Part::Data((16 * K, 20 * K));

    const ALL: CowSwitches = CowSwitches {
        zero_cow: true,
        merge_cow: true,
        drop_cow: false,
    };
    const NONE: CowSwitches = CowSwitches {
        zero_cow: false,
        merge_cow: false,
        drop_cow: false,
    };
    const ZERO_ONLY: CowSwitches = CowSwitches {
        zero_cow: true,
        merge_cow: false,
        drop_cow: false,
    };

    #[test]
    fn a_write_covering_the_cover_is_the_data_alone() {
        let mut j = write_job(CowSource::Backing);
        j.todo.clear();
        assert_eq!(plan(&j, ALL).steps, vec![one(vec![DATA])]);
        let j = write_job(CowSource::Backing);
        let drop = CowSwitches {
            drop_cow: true,
            ..ALL
        };
        assert_eq!(plan(&j, drop).steps, vec![one(vec![DATA])]);
    }

    #[test]
    fn merged_head_data_tail_is_one_write() {
        let j = write_job(CowSource::Backing);
        let p = plan(&j, ALL);
        assert_eq!(
            p.steps,
            vec![one(vec![
                cow(0, 16 * K, CowSource::Backing),
                DATA,
                cow(20 * K, 64 * K, CowSource::Backing),
            ])]
        );
        assert_eq!(
            match &p.steps[0] {
                Step::Write(ws) => (ws[0].range(), ws[0].cow_bytes()),
                _ => unreachable!(),
            },
            ((0, 64 * K), 60 * K)
        );
    }

    #[test]
    fn unmerged_pieces_then_data() {
        let src = CowSource::Host(1 << 20);
        let j = write_job(src);
        assert_eq!(
            plan(&j, NONE).steps,
            vec![
                one(vec![cow(0, 16 * K, src)]),
                one(vec![cow(20 * K, 64 * K, src)]),
                one(vec![DATA]),
            ]
        );
    }

    #[test]
    fn zero_cow_zeroes_the_cover_then_writes_the_data() {
        let j = write_job(CowSource::Zero);
        let p = plan(&j, ALL);
        assert_eq!(
            p.steps,
            vec![Step::Zero {
                range: (0, 64 * K),
                then: vec![Write(vec![DATA])],
                or_else: vec![Write(vec![
                    cow(0, 16 * K, CowSource::Zero),
                    DATA,
                    cow(20 * K, 64 * K, CowSource::Zero),
                ])],
            }]
        );
        // Refused without merge_cow: the pieces and the data apart.
        match &plan(&j, ZERO_ONLY).steps[..] {
            [Step::Zero { or_else, .. }] => assert_eq!(or_else.len(), 3),
            other => panic!("{other:?}"),
        }
        // Without zero_cow zero sources are copied like any other.
        let no_zero = CowSwitches {
            zero_cow: false,
            ..ALL
        };
        assert!(matches!(plan(&j, no_zero).steps[..], [Step::Write(_)]));
    }

    #[test]
    fn a_fresh_run_needs_no_cow_request() {
        let mut j = write_job(CowSource::Zero);
        j.fresh = true;
        assert_eq!(
            plan(&j, ALL).steps,
            vec![
                Step::AlreadyZero((0, 16 * K)),
                Step::AlreadyZero((20 * K, 64 * K)),
                one(vec![DATA]),
            ]
        );
    }

    #[test]
    fn unmerged_zero_pieces_are_zeroed_or_skipped_alone() {
        // Two clusters: the head from zeroes, the tail from the backing file.
        let j = CowJob {
            cover: (0, 128 * K),
            pieces: vec![
                piece(0, 64 * K, CowSource::Zero),
                piece(64 * K, 128 * K, CowSource::Backing),
            ],
            todo: vec![(0, 16 * K), (100 * K, 128 * K)],
            data: Some((16 * K, 100 * K)),
            in_place: false,
            fresh: false,
            failed_write: false,
        };
        let data = Part::Data((16 * K, 100 * K));
        let head = cow(0, 16 * K, CowSource::Zero);
        let tail = one(vec![cow(100 * K, 128 * K, CowSource::Backing)]);
        assert_eq!(
            plan(&j, ZERO_ONLY).steps,
            vec![
                Step::Zero {
                    range: (0, 16 * K),
                    then: vec![],
                    or_else: vec![Write(vec![head])],
                },
                tail.clone(),
                one(vec![data]),
            ]
        );
        let mut fresh = j.clone();
        fresh.fresh = true;
        assert_eq!(
            plan(&fresh, ZERO_ONLY).steps,
            vec![Step::AlreadyZero((0, 16 * K)), tail, one(vec![data])]
        );
        // Merged, the zeroes go out with the rest.
        assert_eq!(plan(&fresh, ALL).steps.len(), 1);
    }

    #[test]
    fn in_place_zeroing_spares_live_subclusters() {
        // Subclusters of 2 KiB: the write's bytes [15K, 21K) lie over an
        // allocated subcluster of the live cluster at host 1M.
        let host = CowSource::Host(1 << 20);
        let j = CowJob {
            cover: (14 * K, 22 * K),
            pieces: vec![
                piece(14 * K, 16 * K, CowSource::Zero),
                piece(16 * K, 18 * K, host),
                piece(18 * K, 22 * K, CowSource::Zero),
            ],
            todo: vec![(14 * K, 15 * K), (21 * K, 22 * K)],
            data: Some((15 * K, 21 * K)),
            in_place: true,
            fresh: false,
            failed_write: false,
        };
        assert!(!j.may_zero(j.cover));
        assert!(j.may_zero((14 * K, 15 * K)));
        assert!(matches!(plan(&j, ALL).steps[..], [Step::Write(_)]));
        // Apart, the zero-source COW alone may be zeroed.
        assert!(matches!(
            plan(&j, ZERO_ONLY).steps[..],
            [Step::Zero { .. }, Step::Zero { .. }, Step::Write(_)]
        ));
        // Over zero subclusters only, the cover may be zeroed.
        let mut j2 = j.clone();
        j2.pieces = vec![piece(14 * K, 22 * K, CowSource::Zero)];
        assert!(matches!(plan(&j2, ALL).steps[..], [Step::Zero { .. }]));
        // A new cluster is nobody's until linked: its data bytes may be
        // zeroed whatever they held.
        let mut j3 = j;
        j3.in_place = false;
        assert!(j3.may_zero(j3.cover));
        assert!(matches!(plan(&j3, ALL).steps[..], [Step::Zero { .. }]));
    }

    /// Completing a 2-cluster allocation with 64 KiB clusters: the writes
    /// left [10K, 70K), the first cluster from zeroes, the second from the
    /// backing file.
    fn commit_job() -> CowJob {
        CowJob {
            cover: (0, 128 * K),
            pieces: vec![
                piece(0, 64 * K, CowSource::Zero),
                piece(64 * K, 128 * K, CowSource::Backing),
            ],
            todo: vec![(10 * K, 70 * K)],
            data: None,
            in_place: false,
            fresh: false,
            failed_write: false,
        }
    }

    #[test]
    fn the_commit_merges_each_range_left() {
        let j = commit_job();
        let zero = cow(10 * K, 64 * K, CowSource::Zero);
        let backing = cow(64 * K, 70 * K, CowSource::Backing);
        assert_eq!(plan(&j, ALL).steps, vec![one(vec![zero, backing])]);
        // Apart: piece by piece.
        assert_eq!(
            plan(&j, ZERO_ONLY).steps,
            vec![
                Step::Zero {
                    range: (10 * K, 64 * K),
                    then: vec![],
                    or_else: vec![Write(vec![zero])],
                },
                one(vec![backing]),
            ]
        );
        assert_eq!(
            plan(&j, NONE).steps,
            vec![one(vec![zero]), one(vec![backing])]
        );
        // A range left that reads as zeroes across clusters: one zeroing.
        let mut z = j;
        z.pieces[1].src = CowSource::Zero;
        assert_eq!(
            plan(&z, ALL).steps,
            vec![Step::Zero {
                range: (10 * K, 70 * K),
                then: vec![],
                or_else: vec![Write(vec![zero, cow(64 * K, 70 * K, CowSource::Zero)])],
            }]
        );
        assert_eq!(plan(&z, ZERO_ONLY).steps.len(), 2);
    }

    #[test]
    fn the_commit_skips_fresh_zeroes_unless_a_write_failed() {
        let mut j = commit_job();
        j.fresh = true;
        assert_eq!(
            plan(&j, ZERO_ONLY).steps[0],
            Step::AlreadyZero((10 * K, 64 * K))
        );
        j.failed_write = true;
        assert!(matches!(plan(&j, ZERO_ONLY).steps[0], Step::Zero { .. }));
    }

    #[test]
    fn a_covered_or_dropped_commit_does_nothing() {
        let mut j = commit_job();
        let drop = CowSwitches {
            drop_cow: true,
            ..ALL
        };
        assert_eq!(plan(&j, drop).steps, vec![]);
        j.todo.clear();
        assert_eq!(plan(&j, ALL).steps, vec![]);
    }

    #[test]
    fn pieces_are_clipped_to_the_range() {
        let ps = commit_job().pieces;
        assert_eq!(
            pieces_in(&ps, (60 * K, 66 * K)),
            vec![
                piece(60 * K, 64 * K, CowSource::Zero),
                piece(64 * K, 66 * K, CowSource::Backing),
            ]
        );
        assert_eq!(pieces_in(&ps, (128 * K, 130 * K)), vec![]);
    }
}
