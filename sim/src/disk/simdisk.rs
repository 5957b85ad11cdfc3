//! `SimDisk`: the simulated block device the engine runs on in simulation.
//!
//! The disk keeps three things apart, as a real disk with a volatile write
//! cache does:
//! - the *volatile* view: every completed write applied in completion order;
//!   reads are served from it;
//! - the *durable* state: what survives a crash for certain;
//! - the *pending* writes: in flight (issued, not completed) or completed
//!   but not yet durable, each with its payload.
//!
//! Durability follows the Linux rule: a flush makes durable exactly the
//! writes that completed before the flush was *issued*; a FUA write is
//! durable when it completes. Every request takes a latency drawn from the
//! `Latency` stream and completes on the executor's clock, so completions
//! come back in another order than submissions, and a write changes the
//! volatile view only when it completes.
//!
//! The durability rules live in `durability`; this module keeps the
//! volatile view, times the requests and records them.
//!
//! Faults are decided at issue by `faults::FaultState` and recorded; the
//! stores only see what a decision lets through.
//!
//! Latency outliers (`OutlierOptions`) are decided at issue too, from the
//! disk's own `Outliers` stream at the rates of its `DeviceRole`: a held
//! request is an ordinary request that completes late, so the durability
//! rules apply to it unchanged (a flush issued while a held write is in
//! flight does not make it durable; a crash may keep it or not).

use std::cell::{Cell, Ref, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use engine::dev::{BlockDev, DevError, IoOp, WriteFlags, ZeroFlags};

use super::durability::{Durability, Payload};
use super::faults::{FaultKind, FaultState, InjectedFault};
use super::log::{DiskCounters, LogEntry};
use super::options::{
    DeviceRole, DiscardEffect, DiskOptions, HeldRequest, NthRequest, OptionsError,
    MAX_OUTLIER_FACTOR, PPM,
};
use super::overlap::{InFlightWrite, InFlightWrites, Overlap};
use super::payload::Data;
use super::store::SparseStore;
use crate::exec::{Nanos, Sim, TaskId};
use crate::rng::{self, Stream};
use crate::trace::hash_bytes;

pub(crate) struct State {
    pub(crate) volatile: SparseStore,
    /// Empty (and unused) when crash tracking is off.
    pub(crate) dur: Durability,
    /// The content the disk started with, for replays of the log.
    pub(crate) initial: SparseStore,
    /// The device length, counting writes that were issued.
    len: u64,
    /// Orders every issue and completion on this disk (see
    /// `LogEntry::issue_seq`).
    seq: u64,
    next_id: u64,
    latency: ChaCha8Rng,
    /// Draws which requests are held, and for how long (outliers).
    outliers: ChaCha8Rng,
    /// Requests held so far (latency outliers).
    held: u64,
    /// Each request held so far, by rank (what `OutlierOptions::held`
    /// would name to hold the same ones).
    held_list: Vec<HeldRequest>,
    /// Requests scheduled so far, by kind (`kind_slot`): the ranks
    /// `OutlierOptions::held` names.
    scheduled: [u64; 6],
    /// Tasks whose requests this disk holds long, by factor
    /// (`SimDisk::hold_task`).
    held_tasks: BTreeMap<TaskId, u32>,
    faults: FaultState,
    /// Draws the effect of each discard under `DiscardEffect::Either`.
    discard: ChaCha8Rng,
    /// When each channel is next free (empty: unlimited channels).
    channels: Vec<Nanos>,
    /// Where the previous read or write ended, for seeks.
    last_end: u64,
    /// When the bus is next free (unlimited channels only).
    bus_free: Nanos,
    counters: DiskCounters,
    pub(crate) log: Vec<LogEntry>,
    log_data_bytes: u64,
    injected: Vec<InjectedFault>,
    /// The write-like requests in flight, and the overlaps among them.
    in_flight: InFlightWrites,
}

pub(crate) struct Inner {
    pub(crate) sim: Sim,
    pub(crate) options: DiskOptions,
    /// This disk's index on its simulation (selects its streams).
    pub(crate) index: u32,
    /// Which of the case's devices it is (selects its outlier rates).
    role: DeviceRole,
    faults_enabled: Cell<bool>,
    pub(crate) state: RefCell<State>,
}

/// The simulated disk. Cheap to clone: clones are the same disk, so a test
/// can keep one while the engine owns another.
#[derive(Clone)]
pub struct SimDisk {
    pub(crate) inner: Rc<Inner>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.inner.state.borrow();
        f.debug_struct("SimDisk")
            .field("index", &self.inner.index)
            .field("len", &st.len)
            .field("pending", &st.dur.pending().len())
            .field("counters", &st.counters)
            .finish()
    }
}

/// The kind of latency a request draws.
#[derive(Clone, Copy)]
enum Timing {
    Read,
    Write,
    Flush,
}

impl SimDisk {
    /// An empty disk on `sim`.
    pub fn new(sim: &Sim, options: DiskOptions) -> Result<Self, OptionsError> {
        Self::with_content(sim, options, SparseStore::new())
    }

    /// A disk on `sim` whose durable content is `content` (an image prepared
    /// beforehand, or a crash image being reopened).
    pub fn with_content(
        sim: &Sim,
        options: DiskOptions,
        content: SparseStore,
    ) -> Result<Self, OptionsError> {
        Self::with_role(sim, options, content, DeviceRole::Image)
    }

    /// [`SimDisk::with_content`] for the device `role` of a case: it holds
    /// requests at that device's outlier rates.
    pub fn with_role(
        sim: &Sim,
        options: DiskOptions,
        content: SparseStore,
        role: DeviceRole,
    ) -> Result<Self, OptionsError> {
        options.validate()?;
        let index = sim.next_device_index();
        let seed = sim.seed();
        let channels = vec![0; options.latency.channels as usize];
        let state = State {
            len: content.len(),
            dur: Durability::new(if options.crash.track {
                content.clone()
            } else {
                SparseStore::new()
            }),
            initial: if options.log.enabled {
                content.clone()
            } else {
                SparseStore::new()
            },
            volatile: content,
            seq: 0,
            next_id: 0,
            latency: rng::substream(seed, Stream::Latency, index),
            outliers: rng::substream(seed, Stream::Outliers, index),
            held: 0,
            held_list: Vec::new(),
            scheduled: [0; 6],
            held_tasks: BTreeMap::new(),
            faults: FaultState::new(seed, index),
            // Fault streams use indexes (device << 4) | 0..=5; 15 is free.
            discard: rng::substream(seed, Stream::Faults, (index << 4) | 15),
            channels,
            last_end: 0,
            bus_free: 0,
            counters: DiskCounters::default(),
            log: Vec::new(),
            log_data_bytes: 0,
            injected: Vec::new(),
            in_flight: InFlightWrites::default(),
        };
        Ok(Self {
            inner: Rc::new(Inner {
                sim: sim.clone(),
                faults_enabled: Cell::new(options.faults.enabled),
                options,
                index,
                role,
                state: RefCell::new(state),
            }),
        })
    }

    /// A disk holding `bytes`, all durable.
    pub fn from_bytes(sim: &Sim, options: DiskOptions, bytes: &[u8]) -> Result<Self, OptionsError> {
        Self::with_content(sim, options, SparseStore::from_bytes(bytes))
    }

    pub fn options(&self) -> &DiskOptions {
        &self.inner.options
    }

    pub fn sim(&self) -> &Sim {
        &self.inner.sim
    }

    /// Turn fault injection on or off as a whole (e.g. off while the runner
    /// repairs an image after a crash). Starts as `options.faults.enabled`.
    pub fn set_faults_enabled(&self, on: bool) {
        self.inner.faults_enabled.set(on);
    }

    pub fn counters(&self) -> DiskCounters {
        self.inner.state.borrow().counters
    }

    /// Flushes issued so far (`counters().flushes` without copying every
    /// count: runs that crash at a flush read it after every step).
    pub fn flushes(&self) -> u64 {
        self.inner.state.borrow().counters.flushes
    }

    /// Requests that change what the disk holds (writes, zeroings,
    /// discards, truncations) and flushes issued so far: read after every
    /// executor step while a crash waits for an operation's first
    /// request, so without copying every count.
    pub fn changes(&self) -> u64 {
        let st = self.inner.state.borrow();
        let c = &st.counters;
        c.writes + c.write_zeroes + c.discards + c.truncates + c.flushes
    }

    /// Every fault injected so far, in issue order.
    pub fn injected_faults(&self) -> Vec<InjectedFault> {
        self.inner.state.borrow().injected.clone()
    }

    /// The disk's index on its simulation, in the order disks were made:
    /// what `HeldRequest::device` and `NthRequest::device` name.
    pub fn index(&self) -> u32 {
        self.inner.index
    }

    /// The requests that failed with EIO so far, by rank on this disk:
    /// what `FaultOptions::error_at` names to fail the same ones again.
    pub fn failed_by_rank(&self) -> Vec<NthRequest> {
        self.inner
            .state
            .borrow()
            .injected
            .iter()
            .filter(|f| matches!(f.kind, FaultKind::Io { .. }))
            .map(|f| NthRequest {
                op: f.op,
                n: f.rank,
                device: Some(self.index()),
            })
            .collect()
    }

    /// How many faults have been injected so far, without copying them:
    /// the runner asks at every guest operation.
    pub fn fault_count(&self) -> usize {
        self.inner.state.borrow().injected.len()
    }

    /// Fault number `i` in issue order, if there is one.
    pub fn injected_fault(&self, i: usize) -> Option<InjectedFault> {
        self.inner.state.borrow().injected.get(i).cloned()
    }

    /// The write log (empty when `options.log.enabled` is off). Do not hold
    /// it across an await: requests update it.
    pub fn log(&self) -> Ref<'_, [LogEntry]> {
        Ref::map(self.inner.state.borrow(), |s| s.log.as_slice())
    }

    /// The last `n` logged write-like requests that touched any byte of
    /// `[offset, offset + len)`, oldest first (for violation messages).
    pub fn writes_touching(&self, offset: u64, len: u64, n: usize) -> Vec<LogEntry> {
        let st = self.inner.state.borrow();
        let mut v: Vec<LogEntry> = st
            .log
            .iter()
            .rev()
            .filter(|e| e.is_write() && e.touches(offset, len))
            .take(n)
            .cloned()
            .collect();
        v.reverse();
        v
    }

    /// The number of the last event (issue or completion) on this disk: the
    /// latest moment `crash_point_at` accepts.
    pub fn event_seq(&self) -> u64 {
        self.inner.state.borrow().seq
    }

    /// Writes in flight or not yet durable.
    pub fn pending_count(&self) -> usize {
        self.inner.state.borrow().dur.pending().len()
    }

    /// Bytes the pending writes' payloads hold in memory (see
    /// `disk::payload`: guest data is kept as a few words per run).
    pub fn pending_payload_bytes(&self) -> u64 {
        let st = self.inner.state.borrow();
        st.dur.pending().values().map(|p| p.payload_bytes()).sum()
    }

    /// What reads return now.
    pub fn volatile(&self) -> SparseStore {
        self.inner.state.borrow().volatile.clone()
    }

    /// What would survive a crash for certain (empty when crash tracking is
    /// off).
    pub fn durable(&self) -> SparseStore {
        self.inner.state.borrow().dur.durable.clone()
    }

    /// A new disk on the same simulation with the same options, holding
    /// `content` (a crash image's store): the reopen after a crash. Its
    /// latency and fault streams are its own.
    pub fn reopen(&self, content: SparseStore) -> SimDisk {
        Self::with_role(
            &self.inner.sim,
            self.inner.options.clone(),
            content,
            self.inner.role,
        )
        .expect("options were validated when this disk was built")
    }

    /// Requests this disk has held far longer than the rest (latency
    /// outliers).
    pub fn held_requests(&self) -> u64 {
        self.inner.state.borrow().held
    }

    /// Hold every request `task` issues from now on `factor` times its
    /// latency draw, as an outlier (a background read the case asks to be
    /// held: `Op::BackgroundRead::hold`), unless a rank already holds it.
    pub fn hold_task(&self, task: TaskId, factor: u32) {
        self.inner
            .state
            .borrow_mut()
            .held_tasks
            .insert(task, factor.clamp(1, MAX_OUTLIER_FACTOR));
    }

    /// The requests this disk held, by rank: put in
    /// `OutlierOptions::held` (with the rates at 0), they are held again
    /// alike.
    pub fn held_list(&self) -> Vec<HeldRequest> {
        self.inner.state.borrow().held_list.clone()
    }

    fn sector_size(&self) -> u64 {
        u64::from(self.inner.options.sector_size)
    }

    /// When a request issued now completes, drawing its service time.
    ///
    /// With limited channels a request waits for a free one and holds it
    /// for its latency and transfer. With unlimited channels latencies
    /// overlap freely, but transfers share one bus at `bandwidth`, one after
    /// the other, so that many requests at once cannot beat the bandwidth.
    fn schedule(
        st: &mut State,
        o: &DiskOptions,
        (role, device, task): (DeviceRole, u32, Option<TaskId>),
        now: Nanos,
        req: &Request,
    ) -> Nanos {
        let l = &o.latency;
        let (min, mean) = match req.timing {
            Timing::Read => (l.read_min, l.read_mean),
            Timing::Write => (l.write_min, l.write_mean),
            Timing::Flush => (l.flush_min, l.flush_mean),
        };
        let mut service = st.latency.gen_range(min..=2 * mean - min);
        // An outlier: its own stream, drawn only for a kind that may be
        // held, so that other draws stay where they were. The extra time
        // holds neither the bus nor a channel (the device goes on serving
        // others, as a request stuck in a drive's queue lets the rest
        // pass), so it is added to the completion only.
        let mut hold: Nanos = 0;
        let slot = kind_slot(req.op);
        st.scheduled[slot] += 1;
        let n = st.scheduled[slot];
        let by_rank = l
            .outliers
            .held
            .iter()
            .find(|h| h.device == device && h.op == req.op && h.n == n)
            .map(|h| h.factor)
            .or_else(|| task.and_then(|t| st.held_tasks.get(&t).copied()));
        let rate = l.outliers.rates(role).of(req.op);
        let factor = by_rank.or_else(|| {
            (rate > 0 && st.outliers.gen_range(0..PPM) < rate).then(|| {
                st.outliers
                    .gen_range(l.outliers.factor_min..=l.outliers.factor_max)
            })
        });
        if let Some(factor) = factor {
            // A zero draw (a minimum of 0) is held by the mean instead.
            hold = service
                .max(mean)
                .saturating_mul(u64::from(factor).saturating_sub(1));
            st.held += 1;
            st.held_list.push(HeldRequest {
                device,
                op: req.op,
                n,
                factor,
            });
        }
        let mut transfer = 0;
        if !matches!(req.timing, Timing::Flush) {
            // An efficient write_zeroes on a disk with a journal is a
            // write there (`LatencyOptions::zeroes_journal`).
            let journal = l
                .zeroes_journal
                .filter(|_| req.op == IoOp::WriteZeroes && req.transfer == 0);
            let at = journal.unwrap_or(req.offset);
            if at != st.last_end {
                service += l.seek + l.travel(at.abs_diff(st.last_end));
            }
            if req.extends {
                service += l.extend;
            }
            st.last_end = match journal {
                Some(j) => j,
                None => req.offset.saturating_add(req.len),
            };
            if l.bandwidth > 0 {
                let t = u128::from(req.transfer) * 1_000_000_000 / u128::from(l.bandwidth);
                transfer = u64::try_from(t).unwrap_or(u64::MAX / 4);
            }
        }
        // Saturating: validated options keep every sum far below u64::MAX
        // (`MAX_LATENCY_NS`), and if it were ever reached, time standing
        // still is better than a wrapped clock or a panic.
        if st.channels.is_empty() {
            let bus_done = st.bus_free.max(now).saturating_add(transfer);
            st.bus_free = bus_done;
            return bus_done.saturating_add(service).saturating_add(hold);
        }
        let service = service.saturating_add(transfer);
        let (i, free) = st
            .channels
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(i, t)| (t, i))
            .expect("at least one channel");
        let done = free.max(now).saturating_add(service);
        st.channels[i] = done;
        done.saturating_add(hold)
    }

    /// Record a new request: its number, fault decision, log entry, trace
    /// event and completion time.
    fn issue(&self, st: &mut State, req: &Request) -> Issued {
        let o = &self.inner.options;
        let now = self.inner.sim.now();
        let id = st.next_id;
        st.next_id += 1;
        let issue_seq = Self::next_seq(st);
        let fault = if req.may_fault {
            st.faults.decide(
                &o.faults,
                self.inner.faults_enabled.get(),
                req.op,
                req.offset,
                req.len,
                self.sector_size(),
            )
        } else {
            None
        };
        if let Some(kind) = fault {
            st.injected.push(InjectedFault {
                request: id,
                rank: st.faults.rank(req.op),
                op: req.op,
                offset: req.offset,
                len: req.len,
                at: now,
                kind,
            });
        }
        let data_hash = req.data.map(hash_bytes);
        let f = req.flags;
        self.inner.sim.with_trace(|t| {
            t.event("dev.issue");
            t.write_u64(u64::from(self.inner.index));
            t.write_u64(id);
            t.write_str(req.op.name());
            t.write_u64(req.offset);
            t.write_u64(req.len);
            t.write_u64(
                u64::from(f.fua) | u64::from(f.may_unmap) << 1 | u64::from(f.no_fallback) << 2,
            );
            t.write_u64(data_hash.unwrap_or(0));
            t.write_u64(now);
        });
        // The log keeps a write's payload while its data budget (counted
        // in the payload's bytes) lasts; the caller puts it there
        // (`keep_payload`), sharing the pending write's compact copy.
        let log_payload = o.log.enabled
            && req
                .data
                .is_some_and(|d| st.log_data_bytes + d.len() as u64 <= o.log.data_bytes_max);
        if log_payload {
            st.log_data_bytes += req.len;
        }
        if o.log.enabled {
            st.log.push(LogEntry {
                id,
                op: req.op,
                offset: req.offset,
                len: req.len,
                fua: f.fua,
                may_unmap: f.may_unmap,
                no_fallback: f.no_fallback,
                issued: now,
                completed: None,
                issue_seq,
                complete_seq: None,
                result: None,
                data_hash,
                payload: None,
                fault,
                landed: None,
            });
        }
        let task = self.inner.sim.current_task();
        let done = Self::schedule(st, o, (self.inner.role, self.inner.index, task), now, req);
        Issued {
            id,
            fault,
            done,
            issue_seq,
            log_payload,
        }
    }

    /// The write-like requests issued over bytes an earlier one still in
    /// flight covered: the first few in full, and how many in all.
    pub fn overlaps(&self) -> (Vec<Overlap>, u64) {
        let st = self.inner.state.borrow();
        let (kept, n) = st.in_flight.overlaps();
        (kept.to_vec(), n)
    }

    /// The order number of the next event (issue or completion).
    fn next_seq(st: &mut State) -> u64 {
        st.seq += 1;
        st.seq
    }

    /// Record a request's completion (order number `seq`) in the log, trace
    /// and counters.
    fn finish(&self, st: &mut State, id: u64, seq: u64, result: &Result<(), DevError>) {
        let now = self.inner.sim.now();
        if result.is_err() {
            st.counters.errors += 1;
        }
        if self.inner.options.log.enabled {
            // Entries are pushed in id order, from the first id on.
            if let Some(e) = st.log.get_mut(id as usize) {
                debug_assert_eq!(e.id, id);
                e.completed = Some(now);
                e.complete_seq = Some(seq);
                e.result = Some(result.clone());
            }
        }
        self.inner.sim.with_trace(|t| {
            t.event("dev.done");
            t.write_u64(u64::from(self.inner.index));
            t.write_u64(id);
            t.write_u64(now);
            t.write_u64(match result {
                Ok(()) => 0,
                Err(DevError::Io { .. }) => 1,
                Err(DevError::NoSpace { .. }) => 2,
                Err(DevError::NotSupported { .. }) => 3,
                Err(DevError::Os { .. }) => 4,
            });
        });
    }

    fn io_error(fault: Option<FaultKind>, op: IoOp, offset: u64, len: u64) -> Result<(), DevError> {
        match fault {
            Some(FaultKind::Io { .. }) => Err(DevError::Io { op, offset, len }),
            Some(FaultKind::NoSpace) => Err(DevError::NoSpace { op, offset, len }),
            _ => Ok(()),
        }
    }

    /// The common path of write, write_zeroes and discard. `lands` says
    /// what lands on `[offset, offset + land_len)`; `None` for a discard
    /// that changes nothing.
    async fn submit_write(
        &self,
        req: Request<'_>,
        lands: Option<Lands<'_>>,
        land_len: u64,
    ) -> Result<(), DevError> {
        let (op, offset, len) = (req.op, req.offset, req.len);
        let issued = {
            let mut st = self.inner.state.borrow_mut();
            let issued = self.issue(&mut st, &req);
            st.in_flight.issue(InFlightWrite {
                id: issued.id,
                op,
                offset,
                len,
                issued: self.inner.sim.now(),
            });
            let landing = match issued.fault {
                None => Some((offset, land_len)),
                Some(FaultKind::Io { landed }) => Some((offset, landed.min(land_len))),
                Some(FaultKind::NoSpace) | Some(FaultKind::Lost) => None,
                Some(FaultKind::Misdirected { to }) => Some((to, land_len)),
            };
            if issued.fault != Some(FaultKind::NoSpace) && lands.is_some() {
                st.len = st.len.max(offset + land_len);
            }
            let mut shared = None;
            if let (Some((at, n)), Some(lands)) = (landing, lands) {
                // A misdirected write may land past the end it claimed.
                st.len = st.len.max(at + n);
                if n > 0 {
                    let payload = match lands {
                        // Crash states need the bytes until the write is
                        // durable: compact. Without crash tracking they
                        // are dropped at completion: as they are.
                        Lands::Bytes(b) if self.inner.options.crash.track => {
                            Payload::Data(Rc::new(Data::new(&b[..n as usize])))
                        }
                        Lands::Bytes(b) => Payload::Data(Rc::new(Data::raw(&b[..n as usize]))),
                        Lands::Zeroes => Payload::Zeroes,
                    };
                    if let Payload::Data(d) = &payload {
                        shared = Some(d.clone());
                    }
                    // A disk that ignores flushes ignores FUA too.
                    let fua = req.flags.fua && !self.inner.options.faults.ignores_flush;
                    st.dur.issue(issued.id, at, n, payload, fua);
                }
                Self::log_landing(&mut st, issued.id, at, n);
            }
            if let (true, Some(bytes)) = (issued.log_payload, req.data) {
                Self::keep_payload(&mut st, issued.id, bytes, shared);
            }
            issued
        };
        self.inner.sim.sleep_until(issued.done).await;
        let mut st = self.inner.state.borrow_mut();
        st.in_flight.complete(issued.id);
        let seq = Self::next_seq(&mut st);
        let result = Self::io_error(issued.fault, op, offset, len);
        if let Some(p) = st.dur.complete(issued.id, seq, result.is_ok()) {
            // The whole write reaches the volatile view, dead parts included:
            // those only say what can no longer become durable or survive a
            // crash, while reads see the newest completed data. The
            // caller's buffer is still at hand: copied, not rebuilt.
            match lands {
                Some(Lands::Bytes(b)) => st.volatile.write(p.offset, &b[..p.len as usize]),
                _ => p.apply(&mut st.volatile, p.offset, p.offset + p.len),
            }
            if !self.inner.options.crash.track {
                st.dur.forget(issued.id);
            } else if let Some(max) = self.inner.options.crash.cache_bytes_max {
                st.dur.write_back(max);
            }
            Self::share_if_settled(&mut st);
        }
        self.finish(&mut st, issued.id, seq, &result);
        result
    }

    /// When nothing is in flight or unflushed, the durable state is the
    /// volatile one (but for the corner of a shrinking truncate racing an
    /// older write, where the volatile view is the better answer): share its
    /// chunks rather than keep two copies.
    fn share_if_settled(st: &mut State) {
        if st.dur.pending().is_empty() {
            st.dur.durable = st.volatile.clone();
        }
    }

    /// Keep write `id`'s payload `bytes` in its log entry: the pending
    /// write's copy (`landed`) when the whole payload landed, so that the
    /// log costs no copy of its own, else a compact copy of all of it.
    fn keep_payload(st: &mut State, id: u64, bytes: &[u8], landed: Option<Rc<Data>>) {
        let payload = landed
            .filter(|d| d.len() == bytes.len() as u64)
            .unwrap_or_else(|| Rc::new(Data::new(bytes)));
        if let Some(e) = st.log.get_mut(id as usize) {
            e.payload = Some(payload);
        }
    }

    /// Record in the log where a write-like request's payload landed.
    fn log_landing(st: &mut State, id: u64, at: u64, len: u64) {
        if let Some(e) = st.log.get_mut(id as usize) {
            e.landed = Some((at, len));
        }
    }
}

/// What a write-like request lands: the caller's bytes, or zeroes.
#[derive(Clone, Copy)]
enum Lands<'a> {
    Bytes(&'a [u8]),
    Zeroes,
}

/// A request as issued.
struct Request<'a> {
    op: IoOp,
    /// Where the caller sent it (0 for flush).
    offset: u64,
    /// Its length as the caller asked (for truncate: the new length).
    len: u64,
    flags: ZeroFlags,
    /// A write's payload, for the log and the trace.
    data: Option<&'a [u8]>,
    timing: Timing,
    /// Bytes that cross the bus (0 for efficient zeroing and discards).
    transfer: u64,
    /// Whether fault injection may touch it (not for requests the device
    /// refuses before doing anything).
    may_fault: bool,
    /// It ends past the device's end: it costs `LatencyOptions::extend`.
    extends: bool,
}

impl Request<'_> {
    fn new(op: IoOp, offset: u64, len: u64, timing: Timing) -> Self {
        Self {
            op,
            offset,
            len,
            flags: ZeroFlags::default(),
            data: None,
            timing,
            transfer: 0,
            may_fault: true,
            extends: false,
        }
    }
}

/// What `issue` decided.
struct Issued {
    id: u64,
    fault: Option<FaultKind>,
    /// When the request completes.
    done: Nanos,
    /// Its place among the disk's events.
    issue_seq: u64,
    /// Whether its log entry is to keep its payload (`keep_payload`).
    log_payload: bool,
}

impl BlockDev for SimDisk {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        let len = buf.len() as u64;
        let issued = {
            let mut st = self.inner.state.borrow_mut();
            st.counters.reads += 1;
            st.counters.read_bytes += len;
            let req = Request {
                transfer: len,
                ..Request::new(IoOp::Read, offset, len, Timing::Read)
            };
            self.issue(&mut st, &req)
        };
        self.inner.sim.sleep_until(issued.done).await;
        let mut st = self.inner.state.borrow_mut();
        let seq = Self::next_seq(&mut st);
        let result = Self::io_error(issued.fault, IoOp::Read, offset, len);
        if result.is_ok() {
            st.volatile.read(offset, buf);
        }
        self.finish(&mut st, issued.id, seq, &result);
        result
    }

    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        let len = buf.len() as u64;
        let extends = {
            let mut st = self.inner.state.borrow_mut();
            st.counters.writes += 1;
            st.counters.write_bytes += len;
            st.counters.fua_writes += u64::from(flags.fua);
            let extends = offset.saturating_add(len) > st.len;
            st.counters.extends += u64::from(extends);
            extends
        };
        let req = Request {
            extends,
            flags: ZeroFlags {
                fua: flags.fua,
                ..ZeroFlags::default()
            },
            data: Some(buf),
            transfer: len,
            ..Request::new(IoOp::Write, offset, len, Timing::Write)
        };
        self.submit_write(req, Some(Lands::Bytes(buf)), len).await
    }

    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        let efficient = self.inner.options.support.write_zeroes;
        let req = Request {
            flags,
            transfer: if efficient { 0 } else { len },
            ..Request::new(IoOp::WriteZeroes, offset, len, Timing::Write)
        };
        let req = {
            let mut st = self.inner.state.borrow_mut();
            st.counters.write_zeroes += 1;
            if !efficient && flags.no_fallback {
                // Refused at once, as a kernel refuses an unsupported
                // request: no latency, no effect, no fault.
                st.counters.write_zeroes_unsupported += 1;
                let issued = self.issue(
                    &mut st,
                    &Request {
                        may_fault: false,
                        ..req
                    },
                );
                let result = Err(DevError::NotSupported {
                    op: IoOp::WriteZeroes,
                });
                let seq = Self::next_seq(&mut st);
                self.finish(&mut st, issued.id, seq, &result);
                return result;
            }
            st.counters.fua_writes += u64::from(flags.fua);
            st.counters.write_zeroes_bytes += len;
            if !efficient {
                st.counters.write_zeroes_fallback_bytes += len;
            }
            let extends = offset.saturating_add(len) > st.len;
            st.counters.extends += u64::from(extends);
            Request { extends, ..req }
        };
        self.submit_write(req, Some(Lands::Zeroes), len).await
    }

    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        {
            let mut st = self.inner.state.borrow_mut();
            st.counters.discards += 1;
            st.counters.discard_bytes += len;
        }
        // A discard never extends the device: it zeroes (if it does
        // anything) only up to the current end.
        let land_len = (offset + len).min(self.len()).saturating_sub(offset);
        let zeroes = match self.inner.options.support.discard {
            DiscardEffect::Zeroes => true,
            DiscardEffect::Nothing => false,
            DiscardEffect::Either => self.inner.state.borrow_mut().discard.gen_bool(0.5),
        };
        let lands = (zeroes && land_len > 0).then_some(Lands::Zeroes);
        let req = Request::new(IoOp::Discard, offset, len, Timing::Write);
        self.submit_write(req, lands, land_len).await
    }

    async fn flush(&self) -> Result<(), DevError> {
        let issued = {
            let mut st = self.inner.state.borrow_mut();
            st.counters.flushes += 1;
            self.issue(&mut st, &Request::new(IoOp::Flush, 0, 0, Timing::Flush))
        };
        self.inner.sim.sleep_until(issued.done).await;
        let mut st = self.inner.state.borrow_mut();
        let seq = Self::next_seq(&mut st);
        let result = Self::io_error(issued.fault, IoOp::Flush, 0, 0);
        let o = &self.inner.options;
        if result.is_ok() && o.crash.track && !o.faults.ignores_flush {
            st.dur.flush(issued.issue_seq);
            Self::share_if_settled(&mut st);
        }
        self.finish(&mut st, issued.id, seq, &result);
        result
    }

    fn len(&self) -> u64 {
        self.inner.state.borrow().len
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        let issued = {
            let mut st = self.inner.state.borrow_mut();
            st.counters.truncates += 1;
            let issued = self.issue(
                &mut st,
                &Request::new(IoOp::Truncate, 0, len, Timing::Write),
            );
            if issued.fault.is_none() {
                st.len = len;
            }
            issued
        };
        self.inner.sim.sleep_until(issued.done).await;
        let mut st = self.inner.state.borrow_mut();
        let seq = Self::next_seq(&mut st);
        let result = Self::io_error(issued.fault, IoOp::Truncate, 0, len);
        if result.is_ok() {
            // Durable at once (see `durability`); the engine does not
            // truncate with writes in flight.
            st.volatile.truncate(len);
            if self.inner.options.crash.track {
                st.dur.truncate(issued.id, len);
            }
        }
        self.finish(&mut st, issued.id, seq, &result);
        result
    }
}

/// The slot of `op` in `State::scheduled`.
fn kind_slot(op: IoOp) -> usize {
    match op {
        IoOp::Read => 0,
        IoOp::Write => 1,
        IoOp::WriteZeroes => 2,
        IoOp::Discard => 3,
        IoOp::Flush => 4,
        IoOp::Truncate => 5,
    }
}
