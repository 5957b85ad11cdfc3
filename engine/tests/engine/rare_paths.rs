//! The rare-path counters count what they name: an image with 512-byte
//! clusters and 64-bit refcounts outgrows its first refcount table (64
//! blocks of 64 clusters: 2 MiB) once 3 MiB are written, creating refcount
//! blocks on the way, and caches of two tables evict, dirty tables too; the
//! data reads back after a reopen, and the counts reach reports under the
//! names `RarePaths::named` gives.

use engine::dev::MemDev;
use engine::{Compat, CreateOptions, EngineOptions, Image};
use futures::executor::block_on;

const CS: u64 = 512;
const WRITTEN: u64 = 3 << 20;

fn byte(i: u64) -> u8 {
    (i * 13 + 5) as u8
}

#[test]
fn a_small_cluster_image_outgrows_its_refcount_table_and_evicts() {
    let dev = MemDev::new();
    let co = CreateOptions {
        size: 4 << 20,
        cluster_size: CS,
        refcount_bits: 64,
        compat: Compat::V3,
        ..Default::default()
    };
    block_on(Image::create(&dev, &co)).unwrap();
    let opts = EngineOptions {
        l2_cache_tables: 2,
        refcount_cache_tables: 2,
        ..Default::default()
    };
    let img = block_on(Image::open(dev, opts.clone())).unwrap();
    let chunk = 64 << 10;
    for i in 0..WRITTEN / chunk {
        block_on(img.write(i * chunk, &vec![byte(i); chunk as usize])).unwrap();
    }
    block_on(img.flush()).unwrap();
    let rare = img.counters().rare_paths();
    assert!(rare.reftable_growths >= 1, "{rare:?}");
    // 3 MiB of 512-byte clusters need 96 blocks of 64 clusters at least;
    // the image was created with one.
    assert!(rare.refblocks_created >= 95, "{rare:?}");
    assert!(
        rare.l2_evictions > 0 && rare.l2_dirty_evictions > 0,
        "{rare:?}"
    );
    assert!(
        rare.refblock_evictions > 0 && rare.refblock_dirty_evictions > 0,
        "{rare:?}"
    );
    assert_eq!(rare.dirty_rebuilds, 0, "{rare:?}");
    assert_eq!(rare.cow_failures + rare.allocs_dropped, 0, "{rare:?}");

    let dev = block_on(img.close()).unwrap();
    let img = block_on(Image::open(dev, opts)).unwrap();
    for i in 0..WRITTEN / chunk {
        let mut buf = vec![0u8; chunk as usize];
        block_on(img.read(i * chunk, &mut buf)).unwrap();
        assert!(buf.iter().all(|&b| b == byte(i)), "chunk {i}");
    }

    // The names reports carry are the field names.
    let json = serde_json::to_value(rare).unwrap();
    for (k, n) in rare.named() {
        assert_eq!(json[k], serde_json::json!(n), "{k}");
    }
    assert_eq!(json.as_object().unwrap().len(), rare.named().len());
}
