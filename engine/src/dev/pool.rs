//! The worker threads a [`super::FileDev`] runs its blocking syscalls on,
//! and the one decision that lets a request skip them.
//!
//! An [`IoPool`] takes jobs over a channel; each job's future waits on a
//! one-shot completion the worker fills and wakes. Several files (the
//! images of one backing chain) can share a pool.
//!
//! Running alone: a request that finds nothing else in flight on its pool,
//! and no other request about to be issued, runs its syscall on the
//! calling thread instead ([`IoPool::alone`]). Nothing could overlap it, so
//! blocking the caller's executor costs no parallelism, and it saves what a
//! hand-off costs: an owned copy of the data (a worker may outlive the
//! request's future, so it cannot borrow the caller's buffer) and two
//! thread wake-ups. At queue depth 1 that is most of the CPU a large
//! O_DIRECT write costs (the copy alone was 66% of the samples of 1 MiB
//! writes; docs/measured.md). "About to be issued" is learnt by
//! yielding once before deciding: every other task the executor has ready
//! runs first, and a request among them registers as deciding too, so at
//! queue depth 64 no request runs alone but the last ones.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread::JoinHandle;

use super::YieldN;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Worker threads that run blocking file syscalls. Cheap to clone; the
/// threads stop when the last clone (and every device using it) is gone.
/// Several files, such as the images of one backing chain, can share a pool.
#[derive(Clone)]
pub struct IoPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    /// `None` only while dropping, so that the workers see the channel close.
    tx: Option<mpsc::Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
    /// Shared with the jobs, which count themselves out as they finish
    /// (the workers cannot hold `PoolInner`: its drop joins them).
    load: Arc<Load>,
}

/// What a pool is doing, for [`IoPool::alone`].
#[derive(Debug, Default)]
struct Load {
    /// Jobs handed to a worker and not finished, and requests running alone.
    busy: AtomicUsize,
    /// Requests that have yielded in [`IoPool::alone`] and not yet decided.
    deciding: AtomicUsize,
    /// Requests that ran alone on their caller's thread, ever.
    alone_runs: AtomicU64,
}

impl fmt::Debug for IoPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoPool")
            .field("threads", &self.inner.workers.len())
            .finish()
    }
}

impl IoPool {
    /// Start a pool of `threads` workers (at least 1).
    pub fn new(threads: usize) -> io::Result<IoPool> {
        assert!(threads >= 1, "an I/O pool needs at least one thread");
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            let handle = std::thread::Builder::new()
                .name(format!("qcsim-io-{i}"))
                .spawn(move || worker_loop(&rx))?;
            workers.push(handle);
        }
        Ok(IoPool {
            inner: Arc::new(PoolInner {
                tx: Some(tx),
                workers,
                load: Arc::default(),
            }),
        })
    }

    /// The number of worker threads.
    pub fn threads(&self) -> usize {
        self.inner.workers.len()
    }

    /// Requests that ran on their caller's thread ([`IoPool::alone`]) so
    /// far, over every file of the pool.
    pub fn alone_runs(&self) -> u64 {
        self.inner.load.alone_runs.load(Ordering::Relaxed)
    }

    /// Whether the caller's request may run on its own thread: after every
    /// other ready task of the caller's executor has run once, no job of
    /// this pool is in flight and no other request is deciding. The permit
    /// counts as a job in flight until dropped, so that a request from
    /// another thread does not take it for idle meanwhile.
    pub async fn alone(&self) -> Option<Busy> {
        let load = &self.inner.load;
        let deciding = Deciding::enter(load);
        // Pending once, waking itself: the executor runs its other ready
        // tasks before polling this one again.
        YieldN(1).await;
        let others = load.deciding.load(Ordering::SeqCst) - 1 + load.busy.load(Ordering::SeqCst);
        drop(deciding);
        if others > 0 {
            return None;
        }
        load.alone_runs.fetch_add(1, Ordering::Relaxed);
        Some(Busy::enter(load))
    }

    /// Run `job` on a worker; the returned future resolves to its result.
    pub fn submit<T, F>(&self, job: F) -> Completion<T>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(SlotState::Waiting(None)));
        let promise = Promise {
            slot: Some(Arc::clone(&slot)),
        };
        // Counted out when the job ends, even by a panic.
        let busy = Busy::enter(&self.inner.load);
        let boxed: Job = Box::new(move || {
            let value = job();
            drop(busy);
            promise.fulfil(value)
        });
        let tx = self.inner.tx.as_ref().expect("pool used while dropping");
        // The receiver lives as long as any worker; if all workers are gone,
        // the job (and so the promise) is dropped here, which abandons the
        // slot and the future reports the failure instead of hanging.
        let _ = tx.send(boxed);
        Completion { slot }
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        drop(self.tx.take());
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker_loop(rx: &Mutex<mpsc::Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for the next job, never while
        // running it. A poisoned lock cannot happen (nothing panics while
        // holding it), but recovering keeps the pool alive regardless.
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        match job {
            // A panicking job drops its promise during unwinding, which
            // abandons the slot; catching the panic keeps the worker alive.
            Ok(job) => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
            Err(mpsc::RecvError) => return,
        }
    }
}

enum SlotState<T> {
    /// Not done yet; the waker of the task awaiting it, once polled.
    Waiting(Option<Waker>),
    Done(T),
    /// The worker dropped the job without a result (it panicked, or the pool
    /// was gone).
    Abandoned,
    /// The result was taken by the future.
    Taken,
}

/// The worker's half of a one-shot completion.
struct Promise<T> {
    slot: Option<Arc<Mutex<SlotState<T>>>>,
}

impl<T> Promise<T> {
    fn fulfil(mut self, value: T) {
        let slot = self.slot.take().expect("promise fulfilled twice");
        settle(&slot, SlotState::Done(value));
    }
}

impl<T> Drop for Promise<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            settle(&slot, SlotState::Abandoned);
        }
    }
}

fn settle<T>(slot: &Mutex<SlotState<T>>, new: SlotState<T>) {
    let waker = {
        let mut state = slot.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, new) {
            SlotState::Waiting(w) => w,
            _ => unreachable!("a completion slot is settled once"),
        }
    };
    // Wake outside the lock: the woken task may poll on another thread.
    if let Some(w) = waker {
        w.wake();
    }
}

/// The awaiting half of a one-shot completion. Dropping it early is fine:
/// the worker still finishes the syscall and its result is discarded.
pub struct Completion<T> {
    slot: Arc<Mutex<SlotState<T>>>,
}

/// The worker died without answering.
pub struct Abandoned;

impl<T> Future for Completion<T> {
    type Output = Result<T, Abandoned>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, SlotState::Taken) {
            SlotState::Waiting(_) => {
                *state = SlotState::Waiting(Some(cx.waker().clone()));
                Poll::Pending
            }
            SlotState::Done(v) => Poll::Ready(Ok(v)),
            SlotState::Abandoned => Poll::Ready(Err(Abandoned)),
            SlotState::Taken => panic!("completion polled after it was ready"),
        }
    }
}

/// A request running alone, or a job on a worker: counted in
/// [`Load::busy`] while it lives.
pub struct Busy {
    load: Arc<Load>,
}

impl Busy {
    fn enter(load: &Arc<Load>) -> Busy {
        load.busy.fetch_add(1, Ordering::SeqCst);
        Busy {
            load: Arc::clone(load),
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.load.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request between its yield and its decision, counted in
/// [`Load::deciding`] (also when its future is dropped meanwhile).
struct Deciding<'a>(&'a Load);

impl<'a> Deciding<'a> {
    fn enter(load: &'a Load) -> Deciding<'a> {
        load.deciding.fetch_add(1, Ordering::SeqCst);
        Deciding(load)
    }
}

impl Drop for Deciding<'_> {
    fn drop(&mut self) {
        self.0.deciding.fetch_sub(1, Ordering::SeqCst);
    }
}
