//! The deterministic single-threaded executor and its simulated clock.
//!
//! Many tasks (guest requests, the engine's own background work, the disk's
//! completions) run interleaved on one thread. At every step the executor
//! picks *which* ready task to poll from the seed's `Schedule` stream: that
//! choice is the scheduling nondeterminism a campaign explores, and it is the
//! only one. Time is simulated (nanoseconds, `u64`): it stands still while
//! tasks run and jumps to the earliest timer when no task is ready, so a run
//! takes as long in wall time as its computation, whatever the latencies.
//!
//! Everything is reachable from one seed: ready tasks and timers are kept in
//! ordered sets, never hashed, and each choice is fed to the trace hash.
//! The choice is uniform, PCT-style by priorities, or uniform but for
//! starved tasks that run only when nothing else can (`SchedulePolicy`).
//!
//! Two ways a run can go wrong are reported, never looped on: a *hang*
//! (tasks remain, none is ready and no timer is pending: they wait for a wake
//! that will never come) and a *livelock* (the step or time budget ran out).
//! Daemon tasks (background loops) do not keep a run going; `abort_all`
//! drops every task at once, as a power cut does.
//!
//! ```
//! use sim::exec::Sim;
//! let sim = Sim::new(7);
//! let s = sim.clone();
//! let h = sim.spawn(async move {
//!     s.sleep(1_000).await;
//!     s.now()
//! });
//! sim.run().unwrap();
//! assert_eq!(h.take(), Some(1_000));
//! ```

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::rng::{self, Stream};
use crate::trace::TraceHasher;

/// A task's number, in spawn order (the first task is 0).
pub type TaskId = u64;

/// Simulated time in nanoseconds since the start of the run.
pub type Nanos = u64;

/// The executor's limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecOptions {
    /// Most task polls the simulation may make (over all its runs) before
    /// a run fails as a livelock. Any value is accepted; 0 fails at once.
    pub steps_max: u64,
    /// Latest simulated time a run may reach before it fails as a livelock
    /// (a task that sleeps in a loop forever). Any value is accepted.
    pub time_max: Nanos,
    /// How the next task is chosen among the ready ones.
    pub policy: SchedulePolicy,
}

/// Most change points a `SchedulePolicy::Priority` draws.
pub const CHANGE_POINTS_MAX: u32 = 1024;

/// How the executor chooses which ready task to poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum SchedulePolicy {
    /// Uniformly at random at every step.
    #[default]
    Random,
    /// Probabilistic concurrency testing (PCT): every task gets a random
    /// priority at spawn and the highest-priority ready task runs; at
    /// `change_points` steps drawn in `1..=steps_hint`, the running task
    /// drops below every other (at most `CHANGE_POINTS_MAX` points are
    /// drawn). Finds ordering bugs that need a few specific preemptions far
    /// more often than uniform choice does.
    Priority { change_points: u32, steps_hint: u64 },
    /// Starvation: the victims (task `task`, and with `every` > 0 every
    /// `every`-th task spawned after it) are polled only when no other task
    /// is ready, until step `release_after`; from then on, and among the
    /// other tasks, the choice is uniform. A victim that has issued a
    /// request stays behind while every other task runs through whole
    /// cycles (its cluster discarded, flushed, reused), the interleavings a
    /// long-lived request needs. Never a hang: a victim runs as soon as it
    /// is the only ready task.
    Starve {
        task: TaskId,
        every: u64,
        release_after: u64,
    },
}

impl fmt::Display for SchedulePolicy {
    /// `random`, `pct (2 change points over 12000 steps)` or `starve (task
    /// 5, every 3rd after it, until step 4000)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SchedulePolicy::Random => write!(f, "random"),
            SchedulePolicy::Priority {
                change_points,
                steps_hint,
            } => write!(
                f,
                "pct ({change_points} change points over {steps_hint} steps)"
            ),
            SchedulePolicy::Starve {
                task,
                every,
                release_after,
            } => {
                write!(f, "starve (task {task}")?;
                if every > 0 {
                    write!(f, ", every {every}th after it")?;
                }
                write!(f, ", until step {release_after})")
            }
        }
    }
}

/// The three kinds of schedule, as a campaign counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleMode {
    Random,
    Pct,
    Starve,
}

impl ScheduleMode {
    pub const ALL: [ScheduleMode; 3] = [
        ScheduleMode::Random,
        ScheduleMode::Pct,
        ScheduleMode::Starve,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ScheduleMode::Random => "random",
            ScheduleMode::Pct => "pct",
            ScheduleMode::Starve => "starve",
        }
    }
}

/// A schedule policy that cannot be run as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schedule: {0}")]
pub struct ScheduleError(pub String);

impl SchedulePolicy {
    /// Whether it is the uniform choice (what a case saved before cases
    /// recorded their schedule runs under).
    pub fn is_random(&self) -> bool {
        *self == SchedulePolicy::Random
    }

    pub fn mode(&self) -> ScheduleMode {
        match self {
            SchedulePolicy::Random => ScheduleMode::Random,
            SchedulePolicy::Priority { .. } => ScheduleMode::Pct,
            SchedulePolicy::Starve { .. } => ScheduleMode::Starve,
        }
    }

    /// Check the bounds a run relies on: PCT with 1 to
    /// [`CHANGE_POINTS_MAX`] change points over at least one step.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if let SchedulePolicy::Priority {
            change_points,
            steps_hint,
        } = *self
        {
            if !(1..=CHANGE_POINTS_MAX).contains(&change_points) {
                return Err(ScheduleError(format!(
                    "change_points {change_points}: must be 1 to {CHANGE_POINTS_MAX}"
                )));
            }
            if steps_hint == 0 {
                return Err(ScheduleError("steps_hint must be at least 1".into()));
            }
        }
        Ok(())
    }

    /// A policy drawn from `seed` (swarm testing), from the schedule
    /// configuration stream: a third of the cases uniform, a third PCT
    /// with one to four change points spread over `steps_hint` steps
    /// (about how many polls a run takes), a third starving a task drawn
    /// among the first `tasks_hint` (about how many tasks a run spawns),
    /// half of them every few tasks after it too, released at a step drawn
    /// up to twice `steps_hint` (so some never are).
    pub fn swarm(seed: u64, steps_hint: u64, tasks_hint: u64) -> Self {
        let mut r = rng::stream(seed, Stream::ScheduleConfig);
        let steps_hint = steps_hint.max(1);
        match r.gen_range(0..3) {
            0 => SchedulePolicy::Random,
            1 => SchedulePolicy::Priority {
                change_points: r.gen_range(1..=4),
                steps_hint,
            },
            _ => SchedulePolicy::Starve {
                task: r.gen_range(0..tasks_hint.max(1)),
                every: if r.gen_bool(0.5) {
                    0
                } else {
                    r.gen_range(2..=16)
                },
                release_after: r.gen_range(1..=steps_hint.saturating_mul(2)),
            },
        }
    }

    /// Whether task `id` is a victim of a starving policy at `step`.
    fn starves(&self, id: TaskId, step: u64) -> bool {
        match *self {
            SchedulePolicy::Starve {
                task,
                every,
                release_after,
            } => {
                // With `every` 0, only `task` (0 is a multiple of 0 only).
                step < release_after && id >= task && (id - task).is_multiple_of(every)
            }
            _ => false,
        }
    }
}

impl Default for ExecOptions {
    fn default() -> Self {
        Self {
            // About ten seconds of polling: far beyond a simulated case, and
            // enough for a 256 MiB benchmark in 4 KiB requests.
            steps_max: 20_000_000,
            // One simulated hour: a 256 MiB benchmark of random 4 KiB writes
            // on the HDD model takes minutes.
            time_max: 3_600 * 1_000_000_000,
            policy: SchedulePolicy::Random,
        }
    }
}

/// Why `run` stopped without finishing every task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    #[error(
        "hang at {now} ns: {} task(s) wait but none is ready and no timer is pending: {}",
        stuck.len(), stuck.join(", ")
    )]
    Hang { now: Nanos, stuck: Vec<String> },
    #[error(
        "livelock: step budget of {steps_max} polls spent at {now} ns with {} task(s) left: {}",
        running.len(), running.join(", ")
    )]
    StepBudget {
        steps_max: u64,
        now: Nanos,
        running: Vec<String>,
    },
    #[error(
        "livelock: time budget of {time_max} ns reached with {} task(s) left: {}",
        running.len(), running.join(", ")
    )]
    TimeBudget {
        time_max: Nanos,
        running: Vec<String>,
    },
}

/// How a run ended when it did not fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every task finished.
    Finished,
    /// The caller's stop condition or time limit was met; tasks may remain.
    Stopped,
}

type LocalFuture = Pin<Box<dyn Future<Output = ()>>>;

struct Task {
    name: Rc<str>,
    /// A daemon (background work such as a periodic writeback) does not
    /// keep a run going: `run` finishes when only daemons remain.
    daemon: bool,
    /// Its priority under `SchedulePolicy::Priority` (higher runs first).
    priority: i64,
    /// `None` only while the task is being polled (it is taken out so that
    /// the task may spawn or wake others without a double borrow).
    future: Option<LocalFuture>,
}

/// The ready set, shared with wakers. Wakers must be `Send + Sync`, hence the
/// `Arc<Mutex>`, though everything runs on one thread.
type ReadySet = Arc<Mutex<ReadyTasks>>;

/// The ready tasks, ascending and each once: a sorted vector, as the set
/// holds a handful of tasks and empties and fills at almost every step,
/// which a tree paid for with a node allocated and freed each time.
/// Walked in the same order a `BTreeSet` would be.
#[derive(Default)]
struct ReadyTasks(Vec<TaskId>);

impl ReadyTasks {
    fn insert(&mut self, id: TaskId) {
        if let Err(at) = self.0.binary_search(&id) {
            self.0.insert(at, id);
        }
    }

    fn remove(&mut self, id: &TaskId) {
        if let Ok(at) = self.0.binary_search(id) {
            self.0.remove(at);
        }
    }

    fn retain(&mut self, keep: impl FnMut(&TaskId) -> bool) {
        self.0.retain(keep);
    }

    fn iter(&self) -> std::slice::Iter<'_, TaskId> {
        self.0.iter()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

struct TaskWaker {
    id: TaskId,
    ready: ReadySet,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.ready).insert(self.id);
    }
}

fn lock(ready: &ReadySet) -> std::sync::MutexGuard<'_, ReadyTasks> {
    // A poisoned lock means a task panicked while we held it, which cannot
    // happen (we never poll under the lock); take the data regardless.
    ready.lock().unwrap_or_else(|e| e.into_inner())
}

struct Inner {
    seed: u64,
    options: ExecOptions,
    now: Cell<Nanos>,
    next_task: Cell<TaskId>,
    tasks: RefCell<BTreeMap<TaskId, Task>>,
    /// How many tasks in `tasks` are not daemons.
    foreground: Cell<usize>,
    ready: ReadySet,
    /// Pending timers by (deadline, registration number).
    timers: RefCell<BTreeMap<(Nanos, u64), Waker>>,
    next_timer: Cell<u64>,
    schedule: RefCell<ChaCha8Rng>,
    /// Under `SchedulePolicy::Priority`: the steps at which the running
    /// task's priority drops, and the next (ever lower) priority to give.
    change_steps: BTreeSet<u64>,
    next_low: Cell<i64>,
    trace: RefCell<TraceHasher>,
    steps: Cell<u64>,
    running: Cell<bool>,
    devices: Cell<u32>,
    /// The task being polled, if any.
    current: Cell<Option<TaskId>>,
}

/// A handle on one simulation: its executor, clock, trace and seed. Cheap to
/// clone; every clone is the same simulation.
#[derive(Clone)]
pub struct Sim {
    inner: Rc<Inner>,
}

impl fmt::Debug for Sim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.inner.seed)
            .field("now", &self.inner.now.get())
            .field("tasks", &self.inner.tasks.borrow().len())
            .finish()
    }
}

impl Sim {
    /// A simulation of case `seed` with default limits.
    pub fn new(seed: u64) -> Self {
        Self::with_options(seed, ExecOptions::default())
    }

    /// A simulation of case `seed` with the given limits.
    pub fn with_options(seed: u64, options: ExecOptions) -> Self {
        let mut schedule = rng::stream(seed, Stream::Schedule);
        let mut change_steps = BTreeSet::new();
        if let SchedulePolicy::Priority {
            change_points,
            steps_hint,
        } = options.policy
        {
            // More change points than this only slow the start down.
            for _ in 0..change_points.min(CHANGE_POINTS_MAX) {
                change_steps.insert(schedule.gen_range(1..=steps_hint.max(1)));
            }
        }
        Self {
            inner: Rc::new(Inner {
                seed,
                options,
                now: Cell::new(0),
                next_task: Cell::new(0),
                tasks: RefCell::new(BTreeMap::new()),
                foreground: Cell::new(0),
                ready: Arc::new(Mutex::new(ReadyTasks::default())),
                timers: RefCell::new(BTreeMap::new()),
                next_timer: Cell::new(0),
                schedule: RefCell::new(schedule),
                change_steps,
                next_low: Cell::new(-1),
                trace: RefCell::new(TraceHasher::new()),
                steps: Cell::new(0),
                running: Cell::new(false),
                devices: Cell::new(0),
                current: Cell::new(None),
            }),
        }
    }

    /// The task being polled now (`None` between polls): what a device
    /// asks to tell whose request it serves.
    pub fn current_task(&self) -> Option<TaskId> {
        self.inner.current.get()
    }

    pub fn seed(&self) -> u64 {
        self.inner.seed
    }

    /// The simulated time.
    pub fn now(&self) -> Nanos {
        self.inner.now.get()
    }

    /// Task polls made so far, over all runs.
    pub fn steps(&self) -> u64 {
        self.inner.steps.get()
    }

    /// The trace hash so far.
    pub fn trace_hash(&self) -> u64 {
        self.inner.trace.borrow().finish()
    }

    /// Trace events recorded so far.
    pub fn trace_events(&self) -> u64 {
        self.inner.trace.borrow().events()
    }

    /// Feed the trace (devices record their requests through this).
    pub fn with_trace<R>(&self, f: impl FnOnce(&mut TraceHasher) -> R) -> R {
        f(&mut self.inner.trace.borrow_mut())
    }

    /// A fresh index for a device opened on this simulation, so that each
    /// disk (one per reopen after a crash) draws from its own streams.
    pub fn next_device_index(&self) -> u32 {
        let i = self.inner.devices.get();
        self.inner.devices.set(i + 1);
        i
    }

    /// Tasks not yet finished, daemons included.
    pub fn task_count(&self) -> usize {
        self.inner.tasks.borrow().len()
    }

    /// Names of the tasks (not daemons) not yet finished, in spawn order.
    pub fn task_names(&self) -> Vec<String> {
        self.inner
            .tasks
            .borrow()
            .iter()
            .filter(|(_, t)| !t.daemon)
            .map(|(id, t)| format!("#{id} {}", t.name))
            .collect()
    }

    /// Spawn a task; it first runs when `run` picks it.
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.spawn_named("task", future)
    }

    /// Spawn a task with a name that hang and livelock reports will show.
    pub fn spawn_named<F>(&self, name: impl Into<String>, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.spawn_task(name.into(), false, future)
    }

    /// Spawn a daemon: a task that runs while others do but does not keep a
    /// run going (`run` returns once only daemons remain; they resume on the
    /// next run). For background work that loops forever.
    pub fn spawn_daemon<F>(&self, name: impl Into<String>, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        self.spawn_task(name.into(), true, future)
    }

    fn spawn_task<F>(&self, name: String, daemon: bool, future: F) -> JoinHandle<F::Output>
    where
        F: Future + 'static,
        F::Output: 'static,
    {
        let id = self.inner.next_task.get();
        self.inner.next_task.set(id + 1);
        let state = Rc::new(RefCell::new(JoinState {
            result: None,
            finished: false,
            waiter: None,
        }));
        let s = state.clone();
        let wrapped = async move {
            let out = future.await;
            let waiter = {
                let mut st = s.borrow_mut();
                st.result = Some(out);
                st.finished = true;
                st.waiter.take()
            };
            if let Some(w) = waiter {
                w.wake();
            }
        };
        let priority = match self.inner.options.policy {
            SchedulePolicy::Random | SchedulePolicy::Starve { .. } => 0,
            // Non-negative, above every lowered priority.
            SchedulePolicy::Priority { .. } => {
                self.inner.schedule.borrow_mut().gen_range(0..i64::MAX)
            }
        };
        self.inner.tasks.borrow_mut().insert(
            id,
            Task {
                name: name.into(),
                daemon,
                priority,
                future: Some(Box::pin(wrapped)),
            },
        );
        if !daemon {
            self.inner.foreground.set(self.inner.foreground.get() + 1);
        }
        lock(&self.inner.ready).insert(id);
        JoinHandle { id, state }
    }

    /// Spawn `future`, run until every task has finished, and return its
    /// result: the short way to drive one test body.
    pub fn block_on<T: 'static>(
        &self,
        future: impl Future<Output = T> + 'static,
    ) -> Result<T, ExecError> {
        let handle = self.spawn_named("main", future);
        self.run()?;
        Ok(handle
            .take()
            .expect("run finished every task, so this one too"))
    }

    /// Run until every task (but daemons) has finished.
    pub fn run(&self) -> Result<(), ExecError> {
        self.run_until(|| false).map(|_| ())
    }

    /// Run until every task (but daemons) has finished or `stop` returns true (checked
    /// before each poll, so a task's effects are seen as soon as it yields).
    pub fn run_until(&self, stop: impl FnMut() -> bool) -> Result<RunEnd, ExecError> {
        self.run_inner(stop, None)
    }

    /// Run until every task (but daemons) has finished or simulated time would pass `t`;
    /// then the clock reads `t` (a crash at a chosen moment).
    pub fn run_until_time(&self, t: Nanos) -> Result<RunEnd, ExecError> {
        self.run_inner(|| false, Some(t))
    }

    fn run_inner(
        &self,
        mut stop: impl FnMut() -> bool,
        time_limit: Option<Nanos>,
    ) -> Result<RunEnd, ExecError> {
        assert!(!self.inner.running.get(), "Sim::run called from a task");
        self.inner.running.set(true);
        // Cleared however the loop ends, a panicking task included, so a
        // caller that catches the panic can still inspect and drop the Sim.
        struct Running<'a>(&'a Cell<bool>);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _running = Running(&self.inner.running);
        let result = loop {
            if self.inner.foreground.get() == 0 {
                break Ok(RunEnd::Finished);
            }
            if stop() {
                break Ok(RunEnd::Stopped);
            }
            if let Some(id) = self.pick_ready() {
                let steps = self.inner.steps.get() + 1;
                if steps > self.inner.options.steps_max {
                    break Err(ExecError::StepBudget {
                        steps_max: self.inner.options.steps_max,
                        now: self.now(),
                        running: self.task_names(),
                    });
                }
                self.inner.steps.set(steps);
                self.poll_task(id);
                continue;
            }
            let next = self.inner.timers.borrow().keys().next().map(|k| k.0);
            match next {
                Some(t) => {
                    if let Some(limit) = time_limit {
                        if t > limit {
                            self.inner.now.set(limit.max(self.now()));
                            break Ok(RunEnd::Stopped);
                        }
                    }
                    if t > self.inner.options.time_max {
                        break Err(ExecError::TimeBudget {
                            time_max: self.inner.options.time_max,
                            running: self.task_names(),
                        });
                    }
                    self.advance_to(t);
                }
                None => {
                    break Err(ExecError::Hang {
                        now: self.now(),
                        stuck: self.task_names(),
                    })
                }
            }
        };
        result
    }

    /// Draw the next task to poll among the ready ones, if any.
    fn pick_ready(&self) -> Option<TaskId> {
        let tasks = self.inner.tasks.borrow();
        let mut ready = lock(&self.inner.ready);
        // Wakes of tasks that have finished since are stale: drop them.
        ready.retain(|id| tasks.contains_key(id));
        if ready.is_empty() {
            return None;
        }
        let policy = self.inner.options.policy;
        let id = match policy {
            SchedulePolicy::Random => {
                let i = self.inner.schedule.borrow_mut().gen_range(0..ready.len());
                *ready.iter().nth(i).expect("index drawn below the length")
            }
            SchedulePolicy::Starve { .. } => {
                // Uniform among the tasks not starved, if any is ready;
                // else among the victims.
                let step = self.inner.steps.get() + 1;
                let others = ready
                    .iter()
                    .filter(|&&id| !policy.starves(id, step))
                    .count();
                let mut r = self.inner.schedule.borrow_mut();
                if others > 0 {
                    let i = r.gen_range(0..others);
                    *ready
                        .iter()
                        .filter(|&&id| !policy.starves(id, step))
                        .nth(i)
                        .expect("index drawn below the count")
                } else {
                    let i = r.gen_range(0..ready.len());
                    *ready.iter().nth(i).expect("index drawn below the length")
                }
            }
            SchedulePolicy::Priority { .. } => *ready
                .iter()
                .max_by_key(|id| (tasks[id].priority, std::cmp::Reverse(**id)))
                .expect("ready is not empty"),
        };
        ready.remove(&id);
        drop(tasks);
        // Steps count from 1; this pick is step `steps() + 1`.
        if self
            .inner
            .change_steps
            .contains(&(self.inner.steps.get() + 1))
        {
            let low = self.inner.next_low.get();
            self.inner.next_low.set(low - 1);
            if let Some(t) = self.inner.tasks.borrow_mut().get_mut(&id) {
                t.priority = low;
            }
        }
        let mut trace = self.inner.trace.borrow_mut();
        trace.event("poll");
        trace.write_u64(id);
        trace.write_u64(ready.len() as u64);
        Some(id)
    }

    fn poll_task(&self, id: TaskId) {
        let future = {
            let mut tasks = self.inner.tasks.borrow_mut();
            match tasks.get_mut(&id) {
                Some(task) => task.future.take(),
                None => None,
            }
        };
        let Some(mut future) = future else { return };
        let waker = Waker::from(Arc::new(TaskWaker {
            id,
            ready: self.inner.ready.clone(),
        }));
        let mut cx = Context::from_waker(&waker);
        self.inner.current.set(Some(id));
        let polled = future.as_mut().poll(&mut cx);
        self.inner.current.set(None);
        match polled {
            Poll::Ready(()) => {
                let task = self.inner.tasks.borrow_mut().remove(&id);
                if task.is_some_and(|t| !t.daemon) {
                    self.inner.foreground.set(self.inner.foreground.get() - 1);
                }
            }
            Poll::Pending => {
                if let Some(task) = self.inner.tasks.borrow_mut().get_mut(&id) {
                    task.future = Some(future);
                }
                // Otherwise the task was aborted while it ran; drop it here,
                // outside the borrow.
            }
        }
    }

    /// Move the clock to `t` and wake every timer due by then.
    fn advance_to(&self, t: Nanos) {
        debug_assert!(t >= self.now());
        self.inner.now.set(t);
        let due: Vec<Waker> = {
            let mut timers = self.inner.timers.borrow_mut();
            let later = timers.split_off(&(t + 1, 0));
            std::mem::replace(&mut *timers, later)
                .into_values()
                .collect()
        };
        let mut trace = self.inner.trace.borrow_mut();
        trace.event("clock");
        trace.write_u64(t);
        trace.write_u64(due.len() as u64);
        drop(trace);
        for w in due {
            w.wake();
        }
    }

    /// Drop every task, daemons included (a crash: in-flight requests are
    /// abandoned where they stand). Their join handles never complete.
    pub fn abort_all(&self) {
        let tasks = std::mem::take(&mut *self.inner.tasks.borrow_mut());
        self.inner.foreground.set(0);
        lock(&self.inner.ready).clear();
        // Dropping futures runs their destructors, which may touch the timers.
        drop(tasks);
        self.inner.timers.borrow_mut().clear();
        self.with_trace(|t| t.event("abort"));
    }

    /// A future that completes when the clock reaches `deadline`.
    pub fn sleep_until(&self, deadline: Nanos) -> Sleep {
        Sleep {
            sim: self.clone(),
            deadline,
            key: None,
        }
    }

    /// A future that completes `duration` nanoseconds from now.
    pub fn sleep(&self, duration: Nanos) -> Sleep {
        self.sleep_until(self.now().saturating_add(duration))
    }

    /// A future that lets every other ready task have a chance to run first
    /// (in the order the schedule picks).
    pub fn yield_now(&self) -> YieldNow {
        YieldNow { yielded: false }
    }
}

/// Where a task's result lands, shared between the task and its handle.
struct JoinState<T> {
    result: Option<T>,
    finished: bool,
    waiter: Option<Waker>,
}

/// The result of a spawned task: await it from another task, or `take` it
/// after `run`.
pub struct JoinHandle<T> {
    id: TaskId,
    state: Rc<RefCell<JoinState<T>>>,
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id)
            .field("finished", &self.state.borrow().finished)
            .finish()
    }
}

impl<T> JoinHandle<T> {
    pub fn id(&self) -> TaskId {
        self.id
    }

    /// Whether the task ran to completion (its result may have been taken).
    pub fn is_finished(&self) -> bool {
        self.state.borrow().finished
    }

    /// The task's result, once; `None` if it has not finished (or was
    /// aborted, or the result was taken already).
    pub fn take(&self) -> Option<T> {
        self.state.borrow_mut().result.take()
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut st = self.state.borrow_mut();
        match st.result.take() {
            Some(v) => Poll::Ready(v),
            None => {
                assert!(!st.finished, "JoinHandle polled after its result was taken");
                st.waiter = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// A timer future (see `Sim::sleep_until`).
pub struct Sleep {
    sim: Sim,
    deadline: Nanos,
    key: Option<(Nanos, u64)>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.sim.now() >= self.deadline {
            if let Some(key) = self.key.take() {
                self.sim.inner.timers.borrow_mut().remove(&key);
            }
            return Poll::Ready(());
        }
        let key = match self.key {
            Some(key) => key,
            None => {
                let n = self.sim.inner.next_timer.get();
                self.sim.inner.next_timer.set(n + 1);
                let key = (self.deadline, n);
                self.key = Some(key);
                key
            }
        };
        self.sim
            .inner
            .timers
            .borrow_mut()
            .insert(key, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            if let Ok(mut timers) = self.sim.inner.timers.try_borrow_mut() {
                timers.remove(&key);
            }
        }
    }
}

/// See `Sim::yield_now`.
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
