//! What the tools' tests share: qcow2 images written by the engine on a
//! `MemDev` and saved as files, and the damage the checker must find.

use std::path::{Path, PathBuf};

use engine::dev::MemDev;
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

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

/// Cut the file at `path` to its first `len` bytes.
pub fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}
