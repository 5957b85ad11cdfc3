//! Single-threaded async primitives for the engine's cooperative
//! concurrency: a FIFO mutex that owns what it protects (QEMU's CoMutex), a wait queue (a condition
//! variable: waiters re-check their condition after every wake-up), and
//! wait queues by what is awaited (`WaitMap`: a wake-up reaches only those
//! waiting for that key).
//!
//! They hold no thread-safety machinery because every engine future runs on
//! one thread; waking order is FIFO, and keys are kept in order (never in
//! hash order), so that a seeded executor stays deterministic.

use std::cell::{Cell, Ref, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A fair async mutex that owns the state it protects: the only way to the
/// state is through a guard (`lock`), so code that touches it without the
/// lock does not compile. The guard hands out `RefCell` borrows, which are
/// never held across an await; the lock orders critical sections that span
/// awaits.
///
/// Two ways in without the lock, each named for why it is sound:
/// `read_unlocked`, a shared borrow for synchronous queries (one thread, so
/// nothing changes while it is held; the caller accepts seeing a locked
/// sequence half done), and `get_mut`, for a caller that holds the only
/// reference (`&mut`), so no lock holder can exist.
pub struct CoMutex<T> {
    locked: Cell<bool>,
    next_ticket: Cell<u64>,
    /// Tickets waiting, in arrival order, with their wakers.
    queue: RefCell<VecDeque<(u64, Option<Waker>)>>,
    data: RefCell<T>,
}

/// Holding the lock: the protected state is borrowed through it
/// (`borrow`, `borrow_mut`, by deref to the `RefCell`).
pub struct CoMutexGuard<'a, T> {
    m: &'a CoMutex<T>,
}

impl<T> CoMutex<T> {
    /// A mutex, unlocked, owning `data`.
    pub fn new(data: T) -> Self {
        CoMutex {
            locked: Cell::new(false),
            next_ticket: Cell::new(0),
            queue: RefCell::new(VecDeque::new()),
            data: RefCell::new(data),
        }
    }

    /// Take the lock, after every caller that asked before (FIFO).
    pub fn lock(&self) -> impl Future<Output = CoMutexGuard<'_, T>> {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        self.queue.borrow_mut().push_back((ticket, None));
        LockFuture { m: self, ticket }
    }

    /// A shared borrow without the lock, for synchronous queries (see the
    /// type's doc).
    pub fn read_unlocked(&self) -> Ref<'_, T> {
        self.data.borrow()
    }

    /// The state itself, for the only holder of the mutex.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T> Deref for CoMutexGuard<'_, T> {
    type Target = RefCell<T>;

    fn deref(&self) -> &RefCell<T> {
        &self.m.data
    }
}

struct LockFuture<'a, T> {
    m: &'a CoMutex<T>,
    ticket: u64,
}

impl<'a, T> Future for LockFuture<'a, T> {
    type Output = CoMutexGuard<'a, T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let m = self.m;
        let mut q = m.queue.borrow_mut();
        let first = q.front().map(|(t, _)| *t);
        if !m.locked.get() && first == Some(self.ticket) {
            q.pop_front();
            m.locked.set(true);
            return Poll::Ready(CoMutexGuard { m });
        }
        if let Some(slot) = q.iter_mut().find(|(t, _)| *t == self.ticket) {
            slot.1 = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl<T> Drop for LockFuture<'_, T> {
    fn drop(&mut self) {
        // A cancelled waiter gives up its place; if it was first, wake the next.
        let mut q = self.m.queue.borrow_mut();
        if let Some(pos) = q.iter().position(|(t, _)| *t == self.ticket) {
            q.remove(pos);
            if pos == 0 && !self.m.locked.get() {
                if let Some((_, Some(w))) = q.front() {
                    w.wake_by_ref();
                }
            }
        }
    }
}

impl<T> Drop for CoMutexGuard<'_, T> {
    fn drop(&mut self) {
        self.m.locked.set(false);
        if let Some((_, Some(w))) = self.m.queue.borrow().front() {
            w.wake_by_ref();
        }
    }
}

/// A wait queue: `wait_until` suspends until a condition holds, re-checking
/// it each time someone calls `notify_all`.
#[derive(Default)]
pub struct WaitQueue {
    waiters: RefCell<Vec<Waker>>,
}

impl WaitQueue {
    /// Wake every waiter, to check its condition again.
    pub fn notify_all(&self) {
        let ws = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in ws {
            w.wake();
        }
    }

    /// Resolve once `cond()` is true. `cond` must not hold RefCell borrows
    /// past its return.
    pub async fn wait_until(&self, mut cond: impl FnMut() -> bool) {
        std::future::poll_fn(|cx| {
            if cond() {
                Poll::Ready(())
            } else {
                self.waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// Wait queues by key: `wait_until(key, cond)` suspends until `cond`
/// holds, re-checking it each time someone wakes `key`. Each waiter names
/// what it waits for, and each wake-up reaches only the waiters of its key.
pub struct WaitMap<K> {
    waiters: RefCell<BTreeMap<K, Vec<Waker>>>,
}

impl<K> Default for WaitMap<K> {
    fn default() -> Self {
        WaitMap {
            waiters: RefCell::new(BTreeMap::new()),
        }
    }
}

impl<K: Ord + Copy> WaitMap<K> {
    /// Wake every task waiting for `key`.
    pub fn wake(&self, key: K) {
        let ws = self.waiters.borrow_mut().remove(&key);
        for w in ws.into_iter().flatten() {
            w.wake();
        }
    }

    /// Resolve once `cond()` is true, re-checking it whenever `key` is
    /// woken. `cond` must not hold RefCell borrows past its return.
    pub async fn wait_until(&self, key: K, mut cond: impl FnMut() -> bool) {
        std::future::poll_fn(|cx| {
            if cond() {
                Poll::Ready(())
            } else {
                self.waiters
                    .borrow_mut()
                    .entry(key)
                    .or_default()
                    .push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}
