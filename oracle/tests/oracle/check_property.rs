//! Property test: random clean images check clean, and flipping any one
//! bit of one L1, L2 or refcount entry is judged exactly as `qemu-img
//! check` judges it (in particular, never called clean unless QEMU also
//! calls it clean).
//!
//! The images are written by QEMU (`qemu-io`) and by qcsim's engine (a
//! dev-dependency of the tests only: the checker itself never uses the
//! engine), with the same writes and the same flips.

use crate::check_support::{get64, project, put64, qemu_check, run, Layout, Scratch};
use proptest::prelude::*;

/// One guest write: start sector, length in sectors, pattern byte.
type Write = (u64, u64, u8);

fn write_image(s: &Scratch, cluster_bits: u32, refcount_bits: u32, writes: &[Write]) -> Vec<u8> {
    let p = s.path("prop.qcow2");
    let ps = p.to_str().expect("utf-8");
    let opts = format!(
        "cluster_size={},refcount_bits={refcount_bits}",
        1u64 << cluster_bits
    );
    let o = run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "-o", &opts, ps, "2M"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cmds: Vec<String> = writes
        .iter()
        .map(|&(sector, len, pat)| format!("write -P {pat} {} {}", sector * 512, len * 512))
        .collect();
    let mut args = Vec::new();
    for c in &cmds {
        args.push("-c");
        args.push(c.as_str());
    }
    args.push(ps);
    let o = run("qemu-io", &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read(&p).expect("read image")
}

/// The same writes through qcsim's engine on an in-memory device.
fn write_image_engine(cluster_bits: u32, refcount_bits: u32, writes: &[Write]) -> Vec<u8> {
    use engine::dev::MemDev;
    use engine::{CreateOptions, EngineOptions, Image};
    use futures::executor::block_on;
    let dev = MemDev::new();
    let o = CreateOptions {
        size: 2 << 20,
        cluster_size: 1 << cluster_bits,
        refcount_bits,
        ..Default::default()
    };
    block_on(Image::create(&dev, &o)).expect("create");
    let img = block_on(Image::open(dev, EngineOptions::default())).expect("open");
    for &(sector, len, pat) in writes {
        let len = len.min(4096 - sector);
        block_on(img.write(sector * 512, &vec![pat; (len * 512) as usize])).expect("write");
    }
    block_on(img.close()).expect("close").into_bytes()
}

proptest! {
    // A fixed seed keeps CI runs reproducible, as everything in qcsim is.
    #![proptest_config(ProptestConfig {
        cases: 40,
        rng_seed: prop::test_runner::RngSeed::Fixed(0xc4ec_1e55),
        ..ProptestConfig::default()
    })]

    #[test]
    fn one_flipped_entry_is_judged_as_qemu_judges_it(
        cluster_bits in prop::sample::select(vec![9u32, 12, 16]),
        refcount_bits in prop::sample::select(vec![1u32, 8, 16, 64]),
        writes in prop::collection::vec((0u64..4000, 1u64..64, 1u8..255), 1..6),
        which in any::<prop::sample::Index>(),
        bit in 0u32..64,
        engine_writes in any::<bool>(),
    ) {
        let s = Scratch::new();
        let clean = if engine_writes {
            write_image_engine(cluster_bits, refcount_bits, &writes)
        } else {
            write_image(&s, cluster_bits, refcount_bits, &writes)
        };
        let report = oracle::check::check(&clean);
        prop_assert_eq!(report.exit_code(), 0, "clean image not clean: {:?}", report.findings);

        let l = Layout::read(&clean);
        let mut targets: Vec<u64> = l.l1_entries.clone();
        targets.extend(l.l2_entries.iter().map(|&(a, _)| a));
        targets.extend(l.reftable_used.iter().copied());
        for &t in &l.reftable_used {
            let block = get64(&clean, t) & !0x1ff;
            targets.extend((0..8).map(|k| block + 8 * k));
        }
        let at = targets[which.index(targets.len())];
        let mut flipped = clean.clone();
        put64(&mut flipped, at, get64(&clean, at) ^ (1 << bit));

        let path = s.path("flipped.qcow2");
        std::fs::write(&path, &flipped).expect("write");
        let (qrc, qjson) = qemu_check(&path, None);
        let ours = oracle::check::check(&flipped);
        prop_assert!(ours.exit_code() != 0 || qrc == 0, "called clean, qemu-img exits {}", qrc);
        prop_assert_eq!(ours.exit_code(), qrc);
        let got = ours.failure.is_none().then(|| project(&ours.to_qemu_json()));
        prop_assert_eq!(got, qjson.as_ref().map(project));
    }
}
