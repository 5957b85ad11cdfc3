//! Crash safety of the snapshot operations: every request a create, an
//! apply and a delete send to the device is journaled, and the image is
//! rebuilt as a crash would leave it after each request, once with only
//! what the last flush made durable and once with every write so far.
//! The checker (`oracle::check`) must find each state consistent: leaks
//! are allowed, a cluster referenced more often than counted never is,
//! nor a COPIED flag on a cluster whose refcount is not 1 (a flag missing
//! where the refcount is 1 is the safe side, repaired by a check).

use std::cell::RefCell;
use std::rc::Rc;

use engine::dev::{BlockDev, DevError, MemDev, WriteFlags, ZeroFlags};
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;
use oracle::check::FindingKind;

#[derive(Debug, Clone)]
pub(crate) enum Ev {
    Write(u64, Vec<u8>),
    /// A write sent with FUA: durable when it completes.
    FuaWrite(u64, Vec<u8>),
    Zero(u64, u64),
    Truncate(u64),
    Flush,
}

/// A `MemDev` that journals every change and flush.
pub(crate) struct Journaled {
    inner: MemDev,
    log: Rc<RefCell<Vec<Ev>>>,
}

impl BlockDev for Journaled {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.inner.read(offset, buf).await
    }
    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        let ev = if flags.fua {
            Ev::FuaWrite(offset, buf.to_vec())
        } else {
            Ev::Write(offset, buf.to_vec())
        };
        self.log.borrow_mut().push(ev);
        self.inner.write(offset, buf, flags).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.log.borrow_mut().push(Ev::Zero(offset, len));
        self.inner.write_zeroes(offset, len, flags).await
    }
    async fn discard(&self, _offset: u64, _len: u64) -> Result<(), DevError> {
        // Content after a discard is either; keeping it is one of them.
        Ok(())
    }
    async fn flush(&self) -> Result<(), DevError> {
        self.log.borrow_mut().push(Ev::Flush);
        self.inner.flush().await
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.log.borrow_mut().push(Ev::Truncate(len));
        self.inner.truncate(len).await
    }
}

pub(crate) fn replay(base: &[u8], evs: &[Ev]) -> Vec<u8> {
    let mut b = base.to_vec();
    for e in evs {
        match e {
            Ev::Write(off, data) | Ev::FuaWrite(off, data) => {
                let end = *off as usize + data.len();
                if b.len() < end {
                    b.resize(end, 0);
                }
                b[*off as usize..end].copy_from_slice(data);
            }
            Ev::Zero(off, len) => {
                let end = (off + len) as usize;
                if b.len() < end {
                    b.resize(end, 0);
                }
                b[*off as usize..end].fill(0);
            }
            Ev::Truncate(len) => b.resize(*len as usize, 0),
            Ev::Flush => {}
        }
    }
    b
}

/// Every crash state of `evs` over `base` is consistent.
pub(crate) fn assert_crash_states_consistent(base: &[u8], evs: &[Ev], what: &str) {
    let mut durable = 0;
    for k in 0..=evs.len() {
        if k > 0 && matches!(evs[k - 1], Ev::Flush) {
            durable = k;
        }
        for (state, upto) in [("durable", durable), ("all", k)] {
            let bytes = replay(base, &evs[..upto]);
            let r = oracle::check::check(&bytes);
            assert!(r.failure.is_none(), "{what} at {k} ({state}): {r:?}");
            for f in &r.findings {
                let safe = match f.kind {
                    FindingKind::Leak => true,
                    FindingKind::Corruption => {
                        f.message.contains("OFLAG_COPIED") && f.message.ends_with("refcount=1")
                    }
                    _ => false,
                };
                assert!(safe, "{what}: crash after request {k} ({state}): {f:?}");
            }
        }
    }
}

/// Run `op` on an image of `base`, journaling what it sends.
pub(crate) fn journal(
    base: &[u8],
    op: impl AsyncFnOnce(&mut Image<Journaled>),
) -> (Vec<u8>, Vec<Ev>) {
    let log = Rc::new(RefCell::new(Vec::new()));
    let dev = Journaled {
        inner: MemDev::from_bytes(base.to_vec()),
        log: log.clone(),
    };
    let mut img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    block_on(op(&mut img));
    let dev = block_on(img.close()).unwrap();
    let evs = log.borrow().clone();
    (dev.inner.to_bytes(), evs)
}

#[test]
fn every_crash_during_snapshot_operations_leaves_a_consistent_image() {
    for o in [
        CreateOptions {
            size: 1 << 20,
            cluster_size: 4096,
            ..CreateOptions::default()
        },
        CreateOptions {
            size: 1 << 20,
            cluster_size: 512,
            lazy_refcounts: true,
            ..CreateOptions::default()
        },
    ] {
        let dev = MemDev::new();
        block_on(Image::create(&dev, &o)).unwrap();
        let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
        block_on(img.write(0, &[0x11; 300_000])).unwrap();
        let base = block_on(img.close()).unwrap().to_bytes();

        let (s1, evs) = journal(&base, async |img| {
            img.snapshot_create("a", 0, 0).await.unwrap();
        });
        assert_crash_states_consistent(&base, &evs, "create");
        let (s2, _) = journal(&s1, async |img| {
            img.write(4096, &[0x22; 200_000]).await.unwrap();
            img.snapshot_create("b", 0, 0).await.unwrap();
            img.write(0, &[0x33; 100_000]).await.unwrap();
        });
        let (s3, evs) = journal(&s2, async |img| {
            img.snapshot_apply("a").await.unwrap();
        });
        assert_crash_states_consistent(&s2, &evs, "apply");
        let (_, evs) = journal(&s3, async |img| {
            img.snapshot_delete("a").await.unwrap();
        });
        assert_crash_states_consistent(&s3, &evs, "delete");
    }
}
