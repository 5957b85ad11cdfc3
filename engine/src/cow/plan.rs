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
//!   copies if the device refuses it.
//! - merge_cow: head COW, guest data and tail COW as one device write.
//! - The in-place rule: a cluster filled in place (`Alloc::in_place`) is
//!   live, readers and a crash see every byte of it, so a zeroing request
//!   that also covers the guest data's bytes is allowed only if they too
//!   read as zeroes now.
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
    /// When `cow_bytes_written` is counted: once a group's sources are read
    /// (true: the allocating write's COW has always counted so), or as
    /// each write completes (false: the commit's).
    pub count_on_read: bool,
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

fn is_zero(p: &Piece) -> bool {
    p.src.is_zero()
}

/// The plan for `job` under `sw`.
pub(crate) fn plan(job: &CowJob, sw: CowSwitches) -> CowPlan {
    match job.data {
        Some(data) => CowPlan {
            steps: with_data(job, data, sw),
            count_on_read: true,
        },
        None => CowPlan {
            steps: remaining(job, sw),
            count_on_read: false,
        },
    }
}

/// The allocating write without delayed COW: its data and the COW around
/// it go out now. Where all the COW reads as zeroes the whole cover is
/// zeroed in one request, then the data written; otherwise the COW areas
/// are copied, merged with the data into one write or apart.
fn with_data(job: &CowJob, data: Range, sw: CowSwitches) -> Vec<Step> {
    let data_write = Write(vec![Part::Data(data)]);
    let areas: Vec<Vec<Piece>> = job
        .todo
        .iter()
        .map(|&r| pieces_in(&job.pieces, r))
        .collect();
    if areas.is_empty() || sw.drop_cow {
        return vec![Step::Write(vec![data_write])];
    }
    let all_zero = if job.in_place {
        // Zeroing the cover zeroes the data's bytes too until the data
        // lands: in a live cluster, only if they read as zeroes already.
        job.pieces.iter().all(is_zero)
    } else {
        areas.iter().flatten().all(is_zero)
    };
    if all_zero && sw.zero_cow && job.fresh && !job.failed_write {
        let mut steps: Vec<Step> = job.todo.iter().map(|&r| Step::AlreadyZero(r)).collect();
        steps.push(Step::Write(vec![data_write]));
        return steps;
    }
    let copy = if sw.merge_cow {
        let mut parts = Vec::new();
        let (before, after): (Vec<_>, Vec<_>) = areas.iter().partition(|a| a[0].end <= data.0);
        parts.extend(before.iter().flat_map(|a| a.iter().map(|&p| Part::Cow(p))));
        parts.push(Part::Data(data));
        parts.extend(after.iter().flat_map(|a| a.iter().map(|&p| Part::Cow(p))));
        vec![Write(parts)]
    } else {
        let mut ws: Vec<Write> = areas
            .iter()
            .map(|a| Write(a.iter().map(|&p| Part::Cow(p)).collect()))
            .collect();
        ws.push(data_write.clone());
        ws
    };
    if all_zero && sw.zero_cow {
        return vec![Step::Zero {
            range: job.cover,
            then: vec![data_write],
            or_else: copy,
        }];
    }
    vec![Step::Write(copy)]
}

/// Completing an allocation: what no write covered, piece by piece.
fn remaining(job: &CowJob, sw: CowSwitches) -> Vec<Step> {
    if job.todo.is_empty() || sw.drop_cow {
        return Vec::new();
    }
    job.todo
        .iter()
        .flat_map(|&r| pieces_in(&job.pieces, r))
        .map(|p| {
            let zero = p.src.is_zero() && sw.zero_cow;
            let copy = Write(vec![Part::Cow(p)]);
            if zero && job.fresh && !job.failed_write {
                // Growing the file zeroed these bytes, and no write into
                // the allocation has failed over them since.
                Step::AlreadyZero((p.start, p.end))
            } else if zero {
                Step::Zero {
                    range: (p.start, p.end),
                    then: Vec::new(),
                    or_else: vec![copy],
                }
            } else {
                Step::Write(vec![copy])
            }
        })
        .collect()
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

    #[test]
    fn a_write_covering_the_cover_is_the_data_alone() {
        let mut j = write_job(CowSource::Backing);
        j.todo.clear();
        let data = Step::Write(vec![Write(vec![Part::Data((16 * K, 20 * K))])]);
        assert_eq!(plan(&j, ALL).steps, vec![data.clone()]);
        let j = write_job(CowSource::Backing);
        let drop = CowSwitches {
            drop_cow: true,
            ..ALL
        };
        assert_eq!(plan(&j, drop).steps, vec![data]);
    }

    #[test]
    fn merged_head_data_tail_is_one_write() {
        let j = write_job(CowSource::Backing);
        let p = plan(&j, ALL);
        assert!(p.count_on_read);
        assert_eq!(
            p.steps,
            vec![Step::Write(vec![Write(vec![
                cow(0, 16 * K, CowSource::Backing),
                Part::Data((16 * K, 20 * K)),
                cow(20 * K, 64 * K, CowSource::Backing),
            ])])]
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
    fn unmerged_areas_then_data() {
        let j = write_job(CowSource::Host(1 << 20));
        let src = CowSource::Host(1 << 20);
        assert_eq!(
            plan(&j, NONE).steps,
            vec![Step::Write(vec![
                Write(vec![cow(0, 16 * K, src)]),
                Write(vec![cow(20 * K, 64 * K, src)]),
                Write(vec![Part::Data((16 * K, 20 * K))]),
            ])]
        );
    }

    #[test]
    fn zero_cow_zeroes_the_cover_then_writes_the_data() {
        let j = write_job(CowSource::Zero);
        let data = Write(vec![Part::Data((16 * K, 20 * K))]);
        let p = plan(&j, ALL);
        assert_eq!(
            p.steps,
            vec![Step::Zero {
                range: (0, 64 * K),
                then: vec![data],
                or_else: vec![Write(vec![
                    cow(0, 16 * K, CowSource::Zero),
                    Part::Data((16 * K, 20 * K)),
                    cow(20 * K, 64 * K, CowSource::Zero),
                ])],
            }]
        );
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
                Step::Write(vec![Write(vec![Part::Data((16 * K, 20 * K))])]),
            ]
        );
    }

    #[test]
    fn in_place_zeroing_spares_live_subclusters() {
        // Subclusters of 2 KiB: the write's bytes [16K, 20K) lie over an
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
        assert!(matches!(plan(&j, ALL).steps[..], [Step::Write(_)]));
        // Over zero subclusters only, the cover may be zeroed.
        let mut j2 = j.clone();
        j2.pieces = vec![piece(14 * K, 22 * K, CowSource::Zero)];
        assert!(matches!(plan(&j2, ALL).steps[..], [Step::Zero { .. }]));
        // A new cluster is nobody's until linked: its data bytes may be
        // zeroed whatever they held.
        let mut j3 = j;
        j3.in_place = false;
        assert!(matches!(plan(&j3, ALL).steps[..], [Step::Zero { .. }]));
    }

    /// Completing a 2-cluster allocation with 64 KiB clusters: gaps
    /// [10K, 64K) and [64K, 70K) left by the writes, the first cluster from
    /// zeroes, the second from the backing file.
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
    fn the_commit_copies_piece_by_piece() {
        let j = commit_job();
        let p = plan(&j, ALL);
        assert!(!p.count_on_read);
        let backing = piece(64 * K, 70 * K, CowSource::Backing);
        assert_eq!(
            p.steps,
            vec![
                Step::Zero {
                    range: (10 * K, 64 * K),
                    then: vec![],
                    or_else: vec![Write(vec![cow(10 * K, 64 * K, CowSource::Zero)])],
                },
                Step::Write(vec![Write(vec![Part::Cow(backing)])]),
            ]
        );
        assert_eq!(
            plan(&j, NONE).steps,
            vec![
                Step::Write(vec![Write(vec![cow(10 * K, 64 * K, CowSource::Zero)])]),
                Step::Write(vec![Write(vec![Part::Cow(backing)])]),
            ]
        );
    }

    #[test]
    fn the_commit_skips_fresh_zeroes_unless_a_write_failed() {
        let mut j = commit_job();
        j.fresh = true;
        assert_eq!(plan(&j, ALL).steps[0], Step::AlreadyZero((10 * K, 64 * K)));
        j.failed_write = true;
        assert!(matches!(plan(&j, ALL).steps[0], Step::Zero { .. }));
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
