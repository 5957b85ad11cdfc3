//! Crash images: what the disk may hold after a power cut at this moment.
//!
//! The rule (ARCHITECTURE.md, "The fault contract"): the durable state, plus, independently for every
//! sector, any one of the values that the pending writes (in flight, or
//! completed but not yet flushed) put there, or none of them. The value a
//! write put there is the sector as it stood once that write had landed:
//! the durable value with the bytes of the pending writes before it (in
//! completion order, in-flight ones last) and then its own laid over. With
//! whole-sector writes that is just the write's data; a write covering part
//! of a sector keeps the bytes earlier writes put around it, as a page cache
//! writing the sector back would. In write-by-write states only the writes
//! that landed are laid over.
//!
//! A `CrashPoint` freezes the durable state and the pending writes of one
//! moment: now (`SimDisk::crash_point`), or any past moment rebuilt from
//! the write log (`SimDisk::crash_point_at`), so that one run yields crash
//! states at every point of its history. From a crash point:
//! - `sample` draws one state, either sector by sector or write by write
//!   (each pending write lands whole or not at all, later completions on
//!   top), the second a subset of the first that makes the "whole request
//!   landed" states likely; harsher mode may tear a sector;
//! - `states` enumerates every state, up to a cap; `states_by_write` the
//!   2^n whole-write states.

use std::collections::BTreeMap;
use std::fmt;

use engine::dev::IoOp;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::durability::{Durability, Payload, Pending};
use super::options::{CrashOptions, TearFill, PPM};
use super::simdisk::SimDisk;
use super::store::SparseStore;

/// Why no crash image could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrashError {
    #[error("crash images need crash tracking (disk option crash.track is off)")]
    NotTracked,
    #[error("crash states of past moments need the write log (disk option log.enabled is off)")]
    NoLog,
    #[error(
        "the write log lacks the payload of request #{request} (past log.data_bytes_max), \
         so the state at that moment cannot be rebuilt"
    )]
    LogIncomplete { request: u64 },
    #[error("event {at} is in the future (the disk is at event {now})")]
    Future { at: u64, now: u64 },
}

/// How a sampled crash chose its sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CrashMode {
    /// Every sector on its own.
    Sectors,
    /// Every pending write landed whole or not at all.
    Writes,
    /// One state of an exhaustive enumeration.
    Enumerated,
}

/// What one sector touched by pending writes holds in a crash image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectorChoice {
    /// The sector's number (byte offset / sector size).
    pub sector: u64,
    /// The pending writes (request ids) whose value it could take, in
    /// completion order (in-flight ones last).
    pub candidates: Vec<u64>,
    /// The last write that landed on it; `None` if it kept its durable
    /// value.
    pub kept: Option<u64>,
    /// Every write that landed on it, in the order they were laid over the
    /// durable value (completion order). With whole-sector writes only the
    /// last one shows; a write covering part of the sector leaves the
    /// earlier ones' bytes visible around it.
    pub landed: Vec<u64>,
    /// If torn: how many leading bytes are the new value (the rest is old
    /// or garbage, per the options).
    pub torn: Option<u32>,
}

/// One crash state: the content to reopen, and what was chosen.
#[derive(Debug, Clone)]
pub struct CrashImage {
    pub content: SparseStore,
    pub mode: CrashMode,
    /// One entry per sector some pending write touched, by sector number.
    pub choices: Vec<SectorChoice>,
}

/// Counts that say what one crash image did, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashSummary {
    /// Sectors some pending write could change.
    pub touched: u64,
    /// Of those, sectors that took a new value.
    pub changed: u64,
    /// Of those, sectors torn inside.
    pub torn: u64,
    /// Pending writes of more than one sector that landed on some of their
    /// sectors and not on others: torn at sector granularity, which every
    /// crash may do (a sector is the device's atomic unit, not a request).
    #[serde(default)]
    pub torn_writes: u64,
}

impl fmt::Display for CrashSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} sectors in doubt, {} took a new value, {} torn; {} writes landed in part",
            self.touched, self.changed, self.torn, self.torn_writes
        )
    }
}

impl CrashImage {
    /// What this crash did, in numbers.
    pub fn summary(&self) -> CrashSummary {
        // Per pending write: the sectors it could reach, and those it
        // landed on.
        let mut reach: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for c in &self.choices {
            for id in &c.candidates {
                reach.entry(*id).or_default().0 += 1;
            }
            for id in &c.landed {
                reach.entry(*id).or_default().1 += 1;
            }
        }
        CrashSummary {
            touched: self.choices.len() as u64,
            changed: self.choices.iter().filter(|c| c.kept.is_some()).count() as u64,
            torn: self.choices.iter().filter(|c| c.torn.is_some()).count() as u64,
            torn_writes: reach
                .values()
                .filter(|&&(all, hit)| all > 1 && hit > 0 && hit < all)
                .count() as u64,
        }
    }

    /// The choice for sector `sector`, if a pending write touched it.
    pub fn choice(&self, sector: u64) -> Option<&SectorChoice> {
        self.choices
            .binary_search_by_key(&sector, |c| c.sector)
            .ok()
            .map(|i| &self.choices[i])
    }
}

/// The disk's state at the moment of a crash, frozen: build as many crash
/// images from it as wanted.
#[derive(Debug, Clone)]
pub struct CrashPoint {
    durable: SparseStore,
    sector_size: u64,
    options: CrashOptions,
    /// Pending writes in completion order, in-flight ones last by id.
    writes: Vec<Pending>,
    /// For every touched sector, the indexes into `writes` that can put a
    /// value there, in the same order.
    sectors: BTreeMap<u64, Vec<usize>>,
}

impl CrashPoint {
    fn new(dur: &Durability, sector_size: u32, options: CrashOptions) -> Self {
        let mut writes: Vec<Pending> = dur.pending().values().cloned().collect();
        writes.sort_by_key(|p| (p.completed.unwrap_or(u64::MAX), p.id));
        let ss = u64::from(sector_size);
        let mut sectors: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, w) in writes.iter().enumerate() {
            for (s, e) in w.live() {
                for sector in s / ss..e.div_ceil(ss) {
                    sectors.entry(sector).or_default().push(i);
                }
            }
        }
        Self {
            durable: dur.durable.clone(),
            sector_size: ss,
            options,
            writes,
            sectors,
        }
    }

    /// What survives the crash for certain.
    pub fn durable(&self) -> &SparseStore {
        &self.durable
    }

    /// The request ids of the pending writes, in completion order
    /// (in-flight ones last).
    pub fn pending(&self) -> Vec<u64> {
        self.writes.iter().map(|w| w.id).collect()
    }

    /// Sectors some pending write could change.
    pub fn touched_sectors(&self) -> usize {
        self.sectors.len()
    }

    /// The value sector `sector` takes when the writes `ws` landed on it,
    /// in that order, over its durable value (only their live bytes). Also
    /// returns the end of their bytes within the sector (the image must
    /// reach that far).
    fn value(&self, sector: u64, ws: &[&Pending]) -> (Vec<u8>, u64) {
        let ss = self.sector_size;
        let start = sector * ss;
        let mut buf = vec![0; ss as usize];
        self.durable.read(start, &mut buf);
        // The live pieces of each write inside the sector, in order.
        let pieces: Vec<(usize, u64, u64)> = ws
            .iter()
            .enumerate()
            .flat_map(|(i, w)| {
                w.live().into_iter().filter_map(move |(s, e)| {
                    let (s, e) = (s.max(start), e.min(start + ss));
                    (s < e).then_some((i, s, e))
                })
            })
            .collect();
        let end = pieces.iter().map(|&(_, _, e)| e).max().unwrap_or(0);
        // A piece covering the whole sector hides every piece before it:
        // lay the pieces over from the last such one. The value is the
        // same, and a sector under thousands of pending whole-sector writes
        // costs one copy instead of thousands (payloads are rebuilt from
        // their compact form on every copy).
        let from = pieces
            .iter()
            .rposition(|&(_, s, e)| s == start && e == start + ss)
            .unwrap_or(0);
        for &(i, s, e) in &pieces[from..] {
            ws[i].copy_out(s, &mut buf[(s - start) as usize..(e - start) as usize]);
        }
        (buf, end)
    }

    /// Build the image that `pick` describes: for each touched sector (by
    /// ordinal among the touched ones), the indexes in its candidate list of
    /// the writes that landed on it, ascending (empty: it keeps its durable
    /// value); `tear` may tear a sector that took a new value.
    fn build(
        &self,
        mode: CrashMode,
        mut pick: impl FnMut(usize, &[usize]) -> Vec<usize>,
        mut tear: impl FnMut(usize, &mut [u8], &[u8]) -> Option<u32>,
    ) -> CrashImage {
        let ss = self.sector_size;
        let mut content = self.durable.clone();
        let mut choices = Vec::with_capacity(self.sectors.len());
        for (ordinal, (&sector, cands)) in self.sectors.iter().enumerate() {
            let landed = pick(ordinal, cands);
            let mut torn = None;
            if !landed.is_empty() {
                let ws: Vec<&Pending> = landed.iter().map(|&k| &self.writes[cands[k]]).collect();
                let (mut value, end) = self.value(sector, &ws);
                let mut old = vec![0; ss as usize];
                self.durable.read(sector * ss, &mut old);
                torn = tear(ordinal, &mut value, &old);
                // Past the durable end, the image reaches as far as the
                // written bytes, not to the end of their sector.
                let reach = content.len().max(end);
                let n = reach.saturating_sub(sector * ss).min(ss) as usize;
                content.write(sector * ss, &value[..n]);
            }
            choices.push(SectorChoice {
                sector,
                candidates: cands.iter().map(|&i| self.writes[i].id).collect(),
                kept: landed.last().map(|&k| self.writes[cands[k]].id),
                landed: landed.iter().map(|&k| self.writes[cands[k]].id).collect(),
                torn,
            });
        }
        CrashImage {
            content,
            mode,
            choices,
        }
    }
}

impl CrashPoint {
    /// Sample one crash state, drawing from `rng` (give it the case's
    /// `Crash` stream).
    pub fn sample(&self, rng: &mut impl Rng) -> CrashImage {
        let opts = &self.options;
        let mode = if rng.gen_bool(0.5) {
            CrashMode::Sectors
        } else {
            CrashMode::Writes
        };
        // In write mode, each pending write lands with one chance drawn per
        // crash, so that some crashes keep almost nothing, others almost all.
        let landed: Vec<bool> = match mode {
            CrashMode::Writes => {
                let p = rng.gen_range(0..=4) as f64 / 4.0;
                self.writes.iter().map(|_| rng.gen_bool(p)).collect()
            }
            _ => Vec::new(),
        };
        let mut picks: Vec<Vec<usize>> = Vec::with_capacity(self.sectors.len());
        for cands in self.sectors.values() {
            picks.push(match mode {
                CrashMode::Writes => (0..cands.len()).filter(|&k| landed[cands[k]]).collect(),
                // The sector as it stood once its k-th write had landed
                // (every earlier one with it), or as durable.
                _ => (0..rng.gen_range(0..=cands.len())).collect(),
            });
        }
        // Tears are drawn after the picks, in sector order, so that turning
        // tearing on does not change which values the sectors took.
        let mut tears: Vec<(u32, Option<Vec<u8>>)> = Vec::new();
        if opts.tear_ppm > 0 {
            let ss = self.sector_size as usize;
            for p in &picks {
                if !p.is_empty() && rng.gen_range(0..PPM) < opts.tear_ppm {
                    let cut = rng.gen_range(1..ss) as u32;
                    let garbage = (opts.tear_fill == TearFill::Garbage).then(|| {
                        let mut g = vec![0u8; ss];
                        rng.fill(&mut g[..]);
                        g
                    });
                    tears.push((cut, garbage));
                } else {
                    tears.push((0, None));
                }
            }
        }
        self.build(
            mode,
            |ordinal, _| std::mem::take(&mut picks[ordinal]),
            |ordinal, value, old| match tears.get(ordinal) {
                Some((cut, fill)) if *cut > 0 => {
                    let cut = *cut as usize;
                    match fill {
                        Some(g) => value[cut..].copy_from_slice(&g[cut..]),
                        None => value[cut..].copy_from_slice(&old[cut..]),
                    }
                    Some(cut as u32)
                }
                _ => None,
            },
        )
    }

    /// Every crash state (sector by sector, no tearing), the all-durable
    /// state first, at most `cap` of them.
    pub fn states(self, cap: u64) -> CrashStates {
        let radix: Vec<usize> = self.sectors.values().map(|c| c.len() + 1).collect();
        CrashStates::new(self, Granularity::Sector, radix, cap)
    }

    /// Every crash state in which each pending write landed whole or not at
    /// all (later completions on top): 2^n states for n pending writes, a
    /// subset of `states` small enough to enumerate when writes span many
    /// sectors. The all-durable state first, at most `cap` of them.
    pub fn states_by_write(self, cap: u64) -> CrashStates {
        let radix = vec![2; self.writes.len()];
        CrashStates::new(self, Granularity::Write, radix, cap)
    }
}

impl SimDisk {
    /// The crash point of this moment. Call it with the simulation stopped:
    /// the pending writes are those of now.
    pub fn crash_point(&self) -> Result<CrashPoint, CrashError> {
        let o = &self.inner.options;
        if !o.crash.track {
            return Err(CrashError::NotTracked);
        }
        let st = self.inner.state.borrow();
        Ok(CrashPoint::new(&st.dur, o.sector_size, o.crash.clone()))
    }

    /// The crash point just after event `at` (an `issue_seq` or
    /// `complete_seq` of the log; 0 is before the first request), rebuilt
    /// by replaying the write log over the disk's initial content. Needs
    /// the log with every payload up to that moment.
    pub fn crash_point_at(&self, at: u64) -> Result<CrashPoint, CrashError> {
        let o = &self.inner.options;
        if !o.log.enabled {
            return Err(CrashError::NoLog);
        }
        let st = self.inner.state.borrow();
        let now = self.event_seq();
        if at > now {
            return Err(CrashError::Future { at, now });
        }
        // Every issue and completion up to `at`, in event order.
        let mut events: Vec<(u64, bool, usize)> = Vec::new();
        for (i, e) in st.log.iter().enumerate() {
            if e.issue_seq <= at {
                events.push((e.issue_seq, false, i));
            }
            if let Some(c) = e.complete_seq.filter(|&c| c <= at) {
                events.push((c, true, i));
            }
        }
        events.sort_unstable();
        let mut dur = Durability::new(st.initial.clone());
        for (seq, completion, i) in events {
            let e = &st.log[i];
            let ok = e.result == Some(Ok(()));
            match (e.op, completion) {
                (IoOp::Write | IoOp::WriteZeroes | IoOp::Discard, false) => {
                    if let Some((at, n)) = e.landed {
                        let payload = match e.op {
                            IoOp::Write => Payload::Data(
                                e.payload
                                    .clone()
                                    .ok_or(CrashError::LogIncomplete { request: e.id })?,
                            ),
                            _ => Payload::Zeroes,
                        };
                        dur.issue(e.id, at, n, payload, e.fua && !o.faults.ignores_flush);
                    }
                }
                (IoOp::Write | IoOp::WriteZeroes | IoOp::Discard, true) => {
                    let completed = dur.complete(e.id, seq, ok).is_some();
                    if let (true, Some(max)) = (completed, o.crash.cache_bytes_max) {
                        dur.write_back(max);
                    }
                }
                (IoOp::Flush, true) if ok && !o.faults.ignores_flush => dur.flush(e.issue_seq),
                (IoOp::Truncate, true) if ok => dur.truncate(e.id, e.len),
                _ => {}
            }
        }
        Ok(CrashPoint::new(&dur, o.sector_size, o.crash.clone()))
    }

    /// Sample one crash state of this moment (see `CrashPoint::sample`).
    pub fn crash_image(&self, rng: &mut impl Rng) -> Result<CrashImage, CrashError> {
        Ok(self.crash_point()?.sample(rng))
    }

    /// Every crash state of this moment (see `CrashPoint::states`).
    pub fn crash_states(&self, cap: u64) -> Result<CrashStates, CrashError> {
        Ok(self.crash_point()?.states(cap))
    }

    /// Every whole-write crash state of this moment (see
    /// `CrashPoint::states_by_write`).
    pub fn crash_states_by_write(&self, cap: u64) -> Result<CrashStates, CrashError> {
        Ok(self.crash_point()?.states_by_write(cap))
    }
}

/// What one digit of an enumeration stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Granularity {
    /// A touched sector: 0 for durable, k for its k-th candidate.
    Sector,
    /// A pending write: 1 if it landed.
    Write,
}

/// The iterator of `SimDisk::crash_states` and `crash_states_by_write`.
#[derive(Debug)]
pub struct CrashStates {
    base: CrashPoint,
    granularity: Granularity,
    radix: Vec<usize>,
    /// The next state as a mixed-radix number, one digit per sector or write.
    counter: Vec<usize>,
    cap: u64,
    emitted: u64,
    total: Option<u64>,
    done: bool,
}

impl CrashStates {
    fn new(base: CrashPoint, granularity: Granularity, radix: Vec<usize>, cap: u64) -> Self {
        let total = radix
            .iter()
            .try_fold(1u64, |acc, &r| acc.checked_mul(r as u64));
        Self {
            base,
            granularity,
            counter: vec![0; radix.len()],
            radix,
            cap,
            emitted: 0,
            total,
            done: false,
        }
    }

    /// How many states exist in all (`None` past `u64::MAX`); more than the
    /// cap means the enumeration is not exhaustive.
    pub fn total(&self) -> Option<u64> {
        self.total
    }

    /// Whether the cap leaves states out.
    pub fn is_truncated(&self) -> bool {
        self.total.is_none_or(|t| t > self.cap)
    }
}

impl Iterator for CrashStates {
    type Item = CrashImage;

    fn next(&mut self) -> Option<CrashImage> {
        if self.done || self.emitted >= self.cap {
            return None;
        }
        let counter = &self.counter;
        let image = match self.granularity {
            Granularity::Sector => self.base.build(
                CrashMode::Enumerated,
                |ordinal, _| (0..counter[ordinal]).collect(),
                |_, _, _| None,
            ),
            Granularity::Write => self.base.build(
                CrashMode::Enumerated,
                |_, cands| {
                    (0..cands.len())
                        .filter(|&k| counter[cands[k]] == 1)
                        .collect()
                },
                |_, _, _| None,
            ),
        };
        self.emitted += 1;
        // Advance the mixed-radix counter; wrapping past the top ends it.
        self.done = true;
        for (d, &r) in self.counter.iter_mut().zip(&self.radix) {
            *d += 1;
            if *d < r {
                self.done = false;
                break;
            }
            *d = 0;
        }
        Some(image)
    }
}
