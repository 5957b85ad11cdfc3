//! What the tools' tests share: qcow2 images written by the engine on a
//! `MemDev` and saved as files, and the damage the checker must find.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

/// Run one test at a time. The tools take QEMU's image locks, which are
/// open file description (OFD) locks, and some tests start QEMU's tools: a
/// child forked by one test shares every file description the process has
/// open until it execs, so a file another test has just closed may still
/// hold its locks for that instant, and that test's next open meets a
/// conflict that no real user would. Serial, no file is open while a child
/// is forked. (The tests take well under a second in all.)
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The virtual size of the test images.
pub const SIZE: u64 = 4 << 20;

/// A qcow2 image of `o` with each `(offset, byte, len)` of `writes` written,
/// cleanly closed, saved as `dir/name`.
pub fn qcow2_with(
    dir: &Path,
    name: &str,
    o: &CreateOptions,
    writes: &[(u64, u8, usize)],
) -> PathBuf {
    let bytes = block_on(async {
        let dev = MemDev::new();
        Image::create(&dev, o).await.expect("create");
        let image = Image::open(dev, EngineOptions::default())
            .await
            .expect("open");
        for &(offset, byte, len) in writes {
            image.write(offset, &vec![byte; len]).await.expect("write");
        }
        image.close().await.expect("close").into_bytes()
    });
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("save the image");
    path
}

/// [`qcow2_with`] on a default [`SIZE`]-byte image.
pub fn qcow2(dir: &Path, name: &str, writes: &[(u64, u8, usize)]) -> PathBuf {
    let o = CreateOptions {
        size: SIZE,
        ..CreateOptions::default()
    };
    qcow2_with(dir, name, &o, writes)
}

fn be64(bytes: &[u8], at: usize) -> usize {
    u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
}

fn patch(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// Unlink the first L2 table from the L1 table: that table and the data
/// clusters it maps keep their refcounts, so they leak.
pub fn plant_leak(path: &Path) {
    patch(path, |b| {
        let l1 = be64(b, 40);
        b[l1..l1 + 8].fill(0);
    });
}

/// Zero the refcount of cluster `cluster` (16-bit refcounts, first
/// refcount block): a cluster still in use with refcount 0 is corruption.
pub fn plant_zero_refcount(path: &Path, cluster: usize) {
    patch(path, |b| {
        let table = be64(b, 48);
        let block = be64(b, table);
        b[block + 2 * cluster..block + 2 * cluster + 2].fill(0);
    });
}

/// Cut the file at `path` to its first `len` bytes.
pub fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}
