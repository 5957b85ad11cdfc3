//! What several engine test files share: an in-memory device whose requests
//! each yield a seeded number of times before they take effect, so that
//! concurrent requests interleave and complete out of order on a
//! single-threaded pool; and running the QEMU tools. (Each test file uses
//! part of it.)
#![allow(dead_code)]

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use engine::dev::{BlockDev, DevError, MemDev, WriteFlags, ZeroFlags};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Inside `impl BlockDev for` a test device that wraps `self.inner`: the
/// methods it passes straight through (discard, flush, len, truncate).
#[allow(unused_macros)]
macro_rules! pass_through_rest {
    () => {
        async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
            self.inner.discard(offset, len).await
        }
        async fn flush(&self) -> Result<(), DevError> {
            self.inner.flush().await
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        async fn truncate(&self, len: u64) -> Result<(), DevError> {
            self.inner.truncate(len).await
        }
    };
}
#[allow(unused_imports)]
pub(crate) use pass_through_rest;

pub struct YieldDev {
    pub inner: MemDev,
    rng: RefCell<ChaCha8Rng>,
}

/// A future that is pending `.0` times before it is ready.
pub struct YieldN(pub u32);

impl Future for YieldN {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 == 0 {
            Poll::Ready(())
        } else {
            self.0 -= 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

impl YieldDev {
    pub fn new(inner: MemDev, seed: u64) -> Self {
        YieldDev {
            inner,
            rng: RefCell::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }

    fn delay(&self) -> YieldN {
        YieldN(self.rng.borrow_mut().gen_range(0..6))
    }
}

impl BlockDev for YieldDev {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        self.delay().await;
        self.inner.read(offset, buf).await
    }
    async fn write(&self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DevError> {
        self.delay().await;
        self.inner.write(offset, buf, flags).await
    }
    async fn write_zeroes(&self, offset: u64, len: u64, flags: ZeroFlags) -> Result<(), DevError> {
        self.delay().await;
        self.inner.write_zeroes(offset, len, flags).await
    }
    async fn discard(&self, offset: u64, len: u64) -> Result<(), DevError> {
        self.inner.discard(offset, len).await
    }
    async fn flush(&self) -> Result<(), DevError> {
        self.delay().await;
        self.inner.flush().await
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        self.inner.truncate(len).await
    }
}

/// Run a QEMU tool; it must succeed. Returns its standard output.
pub fn run(cmd: &str, args: &[&str]) -> Vec<u8> {
    tool(None, cmd, args)
}

/// [`run`] in `dir`: QEMU resolves a relative data file name against the
/// working directory (a backing file name against the image's directory),
/// so the helpers below run in the image's directory, where both agree.
pub fn run_in(dir: &std::path::Path, cmd: &str, args: &[&str]) -> Vec<u8> {
    tool(Some(dir), cmd, args)
}

fn tool(dir: Option<&std::path::Path>, cmd: &str, args: &[&str]) -> Vec<u8> {
    let mut c = std::process::Command::new(cmd);
    c.args(args);
    if let Some(d) = dir {
        c.current_dir(d);
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd} (install qemu-utils): {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn dir_of(path: &std::path::Path) -> &std::path::Path {
    path.parent().expect("an image path has a directory")
}

/// `qemu-img create -q -f qcow2 [-o OPTS] [-b NAME -F FORMAT] IMG SIZE`
/// (`opts` empty: no `-o`; `backing`: name and format).
pub fn qemu_create(img: &std::path::Path, opts: &str, size: &str, backing: Option<(&str, &str)>) {
    let mut args = vec!["create", "-q", "-f", "qcow2"];
    if !opts.is_empty() {
        args.extend(["-o", opts]);
    }
    if let Some((name, format)) = backing {
        args.extend(["-b", name, "-F", format]);
    }
    args.extend([img.to_str().unwrap(), size]);
    run_in(dir_of(img), "qemu-img", &args);
}

/// `qemu-io -c CMD ... IMG`.
pub fn qemu_io(img: &std::path::Path, cmds: &[String]) {
    let mut args = vec![];
    for c in cmds {
        args.push("-c".to_string());
        args.push(c.clone());
    }
    args.push(img.to_str().unwrap().to_string());
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    run_in(dir_of(img), "qemu-io", &a);
}

/// The guest disk as `qemu-img convert -O raw` reads it.
pub fn qemu_raw(img: &std::path::Path) -> Vec<u8> {
    let raw = img.with_extension("ref.raw");
    run_in(
        dir_of(img),
        "qemu-img",
        &[
            "convert",
            "-O",
            "raw",
            img.to_str().unwrap(),
            raw.to_str().unwrap(),
        ],
    );
    std::fs::read(raw).unwrap()
}

/// `qemu-img check` finds neither corruption nor leak; `what` names the
/// image in a failure.
pub fn check_clean(path: &std::path::Path, what: &str) {
    let out = std::process::Command::new("qemu-img")
        .args(["check", "--output", "json", path.to_str().unwrap()])
        .current_dir(dir_of(path))
        .output()
        .unwrap_or_else(|e| panic!("cannot run qemu-img (install qemu-utils): {e}"));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{what}: {}", String::from_utf8_lossy(&out.stderr)));
    for field in ["corruptions", "leaks", "check-errors"] {
        assert_eq!(
            j.get(field).and_then(|v| v.as_u64()).unwrap_or(0),
            0,
            "{what}: {field}: {j}"
        );
    }
    assert_eq!(out.status.code(), Some(0), "{what}: {j}");
}
