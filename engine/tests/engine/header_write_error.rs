//! A failed header write must poison the image like any other
//! metadata write. Growing the refcount table switches the in-memory
//! header to the new table and then writes it; if that write fails and the
//! image goes on, later refcounts land only in blocks the new table names
//! while the header on disk still names the old table, and the image on
//! disk is corrupt.

use std::cell::Cell;
use std::process::Command;
use std::rc::Rc;

use engine::dev::{Faulty, Injected, IoOp, MemDev};
use engine::{CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

#[test]
fn failed_header_switch_leaves_no_corruption() {
    const CHUNK: usize = 64 << 10;
    let broken = Rc::new(Cell::new(false));
    // Writes to the header cluster fail while `broken` is set.
    let dev = {
        let broken = broken.clone();
        Faulty::new(MemDev::new(), move |op, _, offset, _, _| {
            (op == IoOp::Write && offset == 0 && broken.get()).then_some(Injected::Eio)
        })
    };
    // 512-byte clusters and 64-bit refcounts: one refcount table cluster
    // counts 64 blocks of 64 clusters, 2 MiB of file.
    let co = CreateOptions {
        size: 8 << 20,
        cluster_size: 512,
        refcount_bits: 64,
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    let img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    let table_before = img.header().refcount_table_offset;

    broken.set(true);
    let mut failed_at = None;
    for i in 0..(4 << 20) / CHUNK {
        let off = (i * CHUNK) as u64;
        let r = block_on(async {
            img.write(off, &vec![0x5a; CHUNK]).await?;
            img.flush().await
        });
        if r.is_err() {
            failed_at = Some(i);
            break;
        }
    }
    let failed_at = failed_at.expect("growing the refcount table writes the header, which fails");
    assert_ne!(
        img.header().refcount_table_offset,
        table_before,
        "the failure came from the header switch"
    );
    // The device works again; whatever the engine still accepts must leave
    // a consistent image on disk.
    broken.set(false);
    for i in failed_at + 1..failed_at + 8 {
        let off = (i * CHUNK) as u64;
        let _ = block_on(async {
            img.write(off, &vec![0x6b; CHUNK]).await?;
            img.flush().await
        });
    }
    let bytes = img.device().inner().to_bytes();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img.qcow2");
    std::fs::write(&path, &bytes).unwrap();
    let out = Command::new("qemu-img")
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // 0: clean; 3: leaked clusters only (the unreferenced new table).
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "qemu-img check finds corruption:\n{}",
        text.lines().take(12).collect::<Vec<_>>().join("\n")
    );
}
