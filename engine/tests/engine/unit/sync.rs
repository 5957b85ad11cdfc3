//! The unit tests of `engine::sync`.

use engine::sync::WaitMap;
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_wake_reaches_only_its_key() {
    let m: WaitMap<u32> = WaitMap::default();
    let done = Cell::new(false);
    let woken = Arc::new(Count(AtomicUsize::new(0)));
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(m.wait_until(7, || done.get()));
    assert!(f.as_mut().poll(&mut cx).is_pending());
    m.wake(8);
    assert_eq!(woken.0.load(Ordering::SeqCst), 0);
    m.wake(7);
    assert_eq!(woken.0.load(Ordering::SeqCst), 1);
    // Woken but not yet true: it waits again.
    assert!(f.as_mut().poll(&mut cx).is_pending());
    done.set(true);
    m.wake(7);
    assert_eq!(woken.0.load(Ordering::SeqCst), 2);
    assert_eq!(f.as_mut().poll(&mut cx), Poll::Ready(()));
}
