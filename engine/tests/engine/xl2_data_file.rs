//! Review: extended L2 entries combined with an external data file, on
//! images QEMU writes. Guest cluster 0 lives at offset 0 of the data file,
//! so its extended entry has host offset 0 with COPIED and allocated
//! subclusters; QEMU tells it from an unallocated cluster by COPIED.

use engine::dev::MemDev;
use engine::{EngineOptions, Image};
use futures::executor::block_on;

use crate::support::{qemu_create, tool_in};

#[test]
fn qemu_written_cluster_zero_reads_back_with_a_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qemu_create(
        &d.join("x.qcow2"),
        "data_file=x.data,extended_l2=on,cluster_size=65536",
        "4M",
        None,
    );
    tool_in(
        d,
        "qemu-io",
        &[
            "-c",
            "write -P 0x5a 0 4k",
            "-c",
            "write -P 0x33 64k 64k",
            "x.qcow2",
        ],
    );
    let image = MemDev::from_bytes(std::fs::read(d.join("x.qcow2")).unwrap());
    let data = MemDev::from_bytes(std::fs::read(d.join("x.data")).unwrap());
    let img = block_on(Image::open_with_data(
        image,
        Some(data),
        EngineOptions::default(),
    ))
    .expect("the engine opens QEMU's image");
    let mut buf = vec![0u8; 4096];
    block_on(img.read(0, &mut buf)).expect("guest cluster 0 reads");
    assert!(
        buf.iter().all(|&b| b == 0x5a),
        "cluster 0 reads {:#x}",
        buf[0]
    );
    let mut buf = vec![0u8; 65536];
    block_on(img.read(65536, &mut buf)).expect("guest cluster 1 reads");
    assert!(buf.iter().all(|&b| b == 0x33));
    // A write in the rest of cluster 0 fills subclusters in place: the
    // written subcluster must survive.
    block_on(img.write(8192, &[0x77; 2048])).expect("write into cluster 0");
    let mut buf = vec![0u8; 12288];
    block_on(img.read(0, &mut buf)).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 0x5a));
    assert!(buf[4096..8192].iter().all(|&b| b == 0));
    assert!(buf[8192..10240].iter().all(|&b| b == 0x77));
    assert!(buf[10240..].iter().all(|&b| b == 0));
    // QEMU reads back what the engine linked, and the image checks clean.
    let (image, data) = block_on(img.close_with_data()).unwrap();
    std::fs::write(d.join("x.qcow2"), image.into_bytes()).unwrap();
    std::fs::write(d.join("x.data"), data.unwrap().into_bytes()).unwrap();
    tool_in(d, "qemu-img", &["check", "x.qcow2"]);
    let out = String::from_utf8(tool_in(
        d,
        "qemu-io",
        &[
            "-c",
            "read -P 0x5a 0 4k",
            "-c",
            "read -P 0 4k 4k",
            "-c",
            "read -P 0x77 8k 2k",
            "-c",
            "read -P 0x33 64k 64k",
            "x.qcow2",
        ],
    ))
    .unwrap();
    assert!(!out.contains("Pattern verification failed"), "{out}");
}
