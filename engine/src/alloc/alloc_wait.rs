//! Waiting on the allocation table: a task waits in the queue named by
//! what it waits for ([`AllocWait`], `Image::alloc_waits`), and whoever
//! changes an allocation in a way someone may wait for wakes those queues
//! only: a writer ending wakes `WritersDone` of its allocation; an
//! allocation leaving the table or going back to Open wakes every wait on
//! it and on its guest start. Each waiter re-checks its condition
//! (`AllocTable::wait_over`, and the image's failure).

use crate::alloc::allocs::{Alloc, AllocId, AllocWait};
use crate::dev::BlockDev;
use crate::image::Image;

impl<D: BlockDev> Image<D> {
    /// Wait until `w` is over.
    pub(crate) async fn wait_alloc(&self, w: AllocWait) {
        self.alloc_waits
            .wait_until(w, || self.alloc_wait_over(w))
            .await
    }

    /// Allocation `id`, at guest start `start`, has left the table or is
    /// Open again: wake every wait on it. (Nothing waits for an allocation
    /// to begin committing or be doomed, so those moves wake nobody; a
    /// doomed allocation wakes its waiters when it is given up.)
    pub(crate) fn wake_alloc_waiters(&self, start: u64, id: AllocId) {
        for w in [
            AllocWait::Settled { start },
            AllocWait::Gone { start },
            AllocWait::CommitEnded { start },
            AllocWait::WritersDone { id },
        ] {
            self.alloc_waits.wake(w);
        }
    }

    fn alloc_wait_over(&self, w: AllocWait) -> bool {
        let over = self
            .inflight
            .borrow()
            .allocs
            .wait_over(w, self.opts.switches.delayed_cow);
        over || (matches!(w, AllocWait::Settled { .. }) && self.is_poisoned())
    }

    /// Whether a write may join allocation `a` (delayed COW, Open).
    pub(crate) fn may_join(&self, a: &Alloc) -> bool {
        a.may_join(self.opts.switches.delayed_cow)
    }
}
