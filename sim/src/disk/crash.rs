//! Crash images: what the disk may hold after a power cut at this moment.
//!
//! The rule (DESIGN.md): the durable state, plus, independently for every
//! sector, any one of the values that the pending writes (in flight, or
//! completed but not yet flushed) put there, or none of them. A sector's
//! value from a write that covers only part of it is the durable sector
//! with that write's bytes laid over it.
//!
//! `SimDisk::crash_image` samples one such state, either sector by sector
//! or write by write (each pending write lands whole or not at all, later
//! completions on top), the second being a subset of the first that makes
//! the "whole request landed" states likely. Harsher mode may tear a sector.
//! `SimDisk::crash_states` enumerates every state, up to a cap.

use std::collections::BTreeMap;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::options::{TearFill, PPM};
use super::simdisk::{Pending, SimDisk};
use super::store::SparseStore;

/// Why no crash image could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrashError {
    #[error("crash images need crash tracking (disk option crash.track is off)")]
    NotTracked,
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
    /// The write whose value it took; `None` for its durable value.
    pub kept: Option<u64>,
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

impl CrashImage {
    /// The choice for sector `sector`, if a pending write touched it.
    pub fn choice(&self, sector: u64) -> Option<&SectorChoice> {
        self.choices
            .binary_search_by_key(&sector, |c| c.sector)
            .ok()
            .map(|i| &self.choices[i])
    }
}

/// The disk's state at the moment of the crash, frozen.
#[derive(Debug, Clone)]
struct CrashBase {
    durable: SparseStore,
    sector_size: u64,
    /// Pending writes in completion order, in-flight ones last by id.
    writes: Vec<Pending>,
    /// For every touched sector, the indexes into `writes` that can put a
    /// value there, in the same order.
    sectors: BTreeMap<u64, Vec<usize>>,
}

impl CrashBase {
    fn new(disk: &SimDisk) -> Result<Self, CrashError> {
        if !disk.inner.options.crash.track {
            return Err(CrashError::NotTracked);
        }
        let st = disk.inner.state.borrow();
        let mut writes: Vec<Pending> = st.pending.values().cloned().collect();
        writes.sort_by_key(|p| (p.completed.unwrap_or(u64::MAX), p.id));
        let ss = u64::from(disk.inner.options.sector_size);
        let mut sectors: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, w) in writes.iter().enumerate() {
            for (s, e) in w.live() {
                for sector in s / ss..e.div_ceil(ss) {
                    sectors.entry(sector).or_default().push(i);
                }
            }
        }
        Ok(Self {
            durable: st.durable.clone(),
            sector_size: ss,
            writes,
            sectors,
        })
    }

    /// The value sector `sector` takes from write `w`: its durable value
    /// with the write's live bytes laid over. Also returns the end of the
    /// write's bytes within the sector (the image must reach that far).
    fn value(&self, sector: u64, w: &Pending) -> (Vec<u8>, u64) {
        let ss = self.sector_size;
        let start = sector * ss;
        let mut buf = vec![0; ss as usize];
        self.durable.read(start, &mut buf);
        let mut end = 0;
        for (s, e) in w.live() {
            let (s, e) = (s.max(start), e.min(start + ss));
            if s < e {
                w.copy_out(s, &mut buf[(s - start) as usize..(e - start) as usize]);
                end = end.max(e);
            }
        }
        (buf, end)
    }

    /// Build the image that `pick` describes: for each touched sector (by
    /// ordinal among the touched ones), the index in its candidate list of
    /// the write it keeps, or `None`; `tear` may tear a kept sector.
    fn build(
        &self,
        mode: CrashMode,
        mut pick: impl FnMut(usize, &[usize]) -> Option<usize>,
        mut tear: impl FnMut(usize, &mut [u8], &[u8]) -> Option<u32>,
    ) -> CrashImage {
        let ss = self.sector_size;
        let mut content = self.durable.clone();
        let mut choices = Vec::with_capacity(self.sectors.len());
        for (ordinal, (&sector, cands)) in self.sectors.iter().enumerate() {
            let chosen = pick(ordinal, cands);
            let mut torn = None;
            if let Some(k) = chosen {
                let w = &self.writes[cands[k]];
                let (mut value, end) = self.value(sector, w);
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
                kept: chosen.map(|k| self.writes[cands[k]].id),
                torn,
            });
        }
        CrashImage {
            content,
            mode,
            choices,
        }
    }

    /// How many crash states there are (`None` past `u64::MAX`).
    fn count(&self) -> Option<u64> {
        self.sectors
            .values()
            .try_fold(1u64, |acc, c| acc.checked_mul(c.len() as u64 + 1))
    }
}

impl SimDisk {
    /// Sample one crash state of the disk as it stands, drawing from `rng`
    /// (give it the case's `Crash` stream). Call it with the simulation
    /// stopped: the pending writes are those of this moment.
    pub fn crash_image(&self, rng: &mut impl Rng) -> Result<CrashImage, CrashError> {
        let base = CrashBase::new(self)?;
        let opts = &self.inner.options.crash;
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
                base.writes.iter().map(|_| rng.gen_bool(p)).collect()
            }
            _ => Vec::new(),
        };
        let mut picks: Vec<Option<usize>> = Vec::with_capacity(base.sectors.len());
        for cands in base.sectors.values() {
            picks.push(match mode {
                CrashMode::Writes => cands.iter().rposition(|&i| landed[i]),
                _ => {
                    let k = rng.gen_range(0..=cands.len());
                    k.checked_sub(1)
                }
            });
        }
        let mut tears: Vec<(u32, Option<Vec<u8>>)> = Vec::new();
        // Tears are drawn after the picks, in sector order, so that turning
        // tearing on does not change which values the sectors took.
        if opts.tear_ppm > 0 {
            let ss = base.sector_size as usize;
            for p in &picks {
                if p.is_some() && rng.gen_range(0..PPM) < opts.tear_ppm {
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
        let image = base.build(
            mode,
            |ordinal, _| picks[ordinal],
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
        );
        Ok(image)
    }

    /// Every crash state of the disk as it stands (sector by sector, no
    /// tearing), the all-durable state first, at most `cap` of them.
    pub fn crash_states(&self, cap: u64) -> Result<CrashStates, CrashError> {
        let base = CrashBase::new(self)?;
        let radix: Vec<usize> = base.sectors.values().map(|c| c.len() + 1).collect();
        Ok(CrashStates {
            total: base.count(),
            counter: vec![0; radix.len()],
            radix,
            base,
            cap,
            emitted: 0,
            done: false,
        })
    }
}

/// The iterator of `SimDisk::crash_states`.
#[derive(Debug)]
pub struct CrashStates {
    base: CrashBase,
    radix: Vec<usize>,
    /// The next state, as one digit per touched sector (0: durable).
    counter: Vec<usize>,
    cap: u64,
    emitted: u64,
    total: Option<u64>,
    done: bool,
}

impl CrashStates {
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
        let image = self.base.build(
            CrashMode::Enumerated,
            |ordinal, _| counter[ordinal].checked_sub(1),
            |_, _, _| None,
        );
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
