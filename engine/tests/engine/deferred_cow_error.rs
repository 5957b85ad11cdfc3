//! A deferred COW that fails at a guest flush: the flush fails, the new
//! cluster is given up (freed, never linked), the guest range reads as it
//! did before the allocating write, and the image `qemu-img check` sees
//! afterwards is clean with no leak.

use std::cell::Cell;
use std::process::Command;
use std::rc::Rc;

use engine::dev::{Faulty, Injected, IoOp, MemDev};
use engine::{Backing, CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

const CS: u64 = 64 * 1024;
const SIZE: u64 = 4 << 20;

/// An in-memory device whose reads fail while `broken` is set.
type FailingReads = Faulty<MemDev>;

fn failing_reads(inner: MemDev, broken: Rc<Cell<bool>>) -> FailingReads {
    Faulty::new(inner, move |op, _, _, _, _| {
        (op == IoOp::Read && broken.get()).then_some(Injected::Eio)
    })
}

fn read(img: &Image<FailingReads>, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    block_on(img.read(off, &mut buf)).expect("read");
    buf
}

#[test]
fn failed_deferred_cow_fails_the_flush_and_frees_the_cluster() {
    let broken = Rc::new(Cell::new(false));
    let base = MemDev::from_bytes(vec![0xbb; SIZE as usize]);
    let dev = failing_reads(MemDev::new(), Rc::new(Cell::new(false)));
    let co = CreateOptions {
        size: SIZE,
        cluster_size: CS,
        backing_file: Some("base.raw".into()),
        backing_format: Some("raw".into()),
        ..CreateOptions::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    let mut img = block_on(Image::open(dev, EngineOptions::default())).unwrap();
    img.attach_backing(Backing::Raw(failing_reads(base, broken.clone())));

    // A partial write into cluster 1: its head and tail COW are deferred.
    let (off, len) = (CS + 4096, 4096usize);
    block_on(img.write(off, &vec![0xcc; len])).unwrap();
    assert_eq!(read(&img, off, len), vec![0xcc; len]);
    let before = img.counters();
    assert_eq!(before.cow_performed, 0);

    // The backing file fails while the flush copies the COW areas.
    broken.set(true);
    assert!(block_on(img.flush()).is_err(), "the flush must fail");
    broken.set(false);
    let after = img.counters();
    assert_eq!(after.allocs_dropped - before.allocs_dropped, 1);
    // Given up: the cluster reads as the backing file again.
    assert_eq!(read(&img, CS, CS as usize), vec![0xbb; CS as usize]);
    assert_eq!(
        block_on(img.host_offset(off)).unwrap(),
        None,
        "the L2 entry must not point at the dropped cluster"
    );

    // The guest writes again; this time the flush succeeds.
    block_on(img.write(off, &vec![0xdd; len])).unwrap();
    block_on(img.flush()).unwrap();
    let mut want = vec![0xbb; CS as usize];
    want[4096..8192].fill(0xdd);
    assert_eq!(read(&img, CS, CS as usize), want);
    let bytes = block_on(img.close()).unwrap().into_inner().into_bytes();

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("base.raw"), vec![0xbb; SIZE as usize]).unwrap();
    let path = dir.path().join("top.qcow2");
    std::fs::write(&path, &bytes).unwrap();
    let out = Command::new("qemu-img")
        .args(["check", "--output", "json", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "qemu-img check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let raw = dir.path().join("out.raw");
    let conv = Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(&path)
        .arg(&raw)
        .output()
        .unwrap();
    assert!(conv.status.success(), "{conv:?}");
    let data = std::fs::read(&raw).unwrap();
    assert_eq!(&data[CS as usize..2 * CS as usize], &want[..]);
    assert!(data[..CS as usize].iter().all(|&b| b == 0xbb));
}
