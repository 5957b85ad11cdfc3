//! Amends among a workload's requests (`Op::Amend`, `qemu-img amend`):
//! each change runs alone on the image, changes it or is refused as QEMU
//! refuses it, leaves the guest disk reading the same, and a crash inside
//! one is counted at its step and judged like any other.

use engine::{Compat, CreateOptions, MetaOp, Step};
use sim::campaign::run_guarded;
use sim::case::{Amend, Case, ImageSpec, Op};
use sim::disk::FaultOptions;
use sim::workload::Profile;

/// The case of `seed` on a plain 1 MiB image made by `create` (4 KiB
/// clusters, no backing file), faults off, no crash but the workload's,
/// which lands at a flush (`case_resize` uses it too).
pub(crate) fn plain(seed: u64, create: CreateOptions, workload: Vec<Vec<Op>>) -> Case {
    let mut c = Case::generate(seed, Profile::Random);
    c.image = ImageSpec {
        create: CreateOptions {
            size: 1 << 20,
            cluster_size: 4096,
            ..create
        },
        backing: None,
        data_file: None,
    };
    c.disk.faults = FaultOptions::default();
    c.disk.crash.at_guards.clear();
    c.disk.crash.at_steps = false;
    c.disk.crash.at_flush_ppm = 1_000_000;
    c.workload = workload;
    c.validate().expect("a valid case");
    c
}

fn write(sector: u64, sectors: u64) -> Op {
    Op::Write {
        sector,
        sectors,
        fua: false,
    }
}

fn amend(change: Amend) -> Vec<Op> {
    vec![Op::Amend { change }]
}

#[test]
fn amends_change_the_image_or_are_refused_as_qemu_refuses() {
    let workload = vec![
        vec![write(0, 64), write(200, 8)],
        vec![Op::Flush],
        vec![Op::SnapshotCreate],
        // A cluster the snapshot shares has refcount 2: one bit is too
        // narrow, two are not.
        amend(Amend::RefcountBits(1)),
        amend(Amend::RefcountBits(2)),
        amend(Amend::LazyRefcounts(true)),
        vec![
            write(8, 16),
            Op::Read {
                sector: 0,
                sectors: 64,
            },
        ],
        // Version 2 needs 16-bit refcounts.
        amend(Amend::Version(2)),
        amend(Amend::RefcountBits(16)),
        amend(Amend::Version(2)),
        // Lazy refcounts need version 3.
        amend(Amend::LazyRefcounts(true)),
        vec![write(300, 8)],
        amend(Amend::Version(3)),
        vec![Op::Read {
            sector: 0,
            sectors: 400,
        }],
    ];
    let case = plain(0, CreateOptions::default(), workload);
    let r = run_guarded(&case);
    assert!(r.passed(), "{:?}", r.failures);
    assert_eq!(r.stats.counts.amends, 8);
    assert_eq!(r.stats.counts.amends_refused, 3);
    assert_eq!(r.stats.counts.failed_ops, 0);
}

#[test]
fn a_crash_inside_each_kind_of_amend_is_counted_at_its_step_and_judged() {
    let v2 = CreateOptions {
        compat: Compat::V2,
        ..CreateOptions::default()
    };
    let lazy = CreateOptions {
        lazy_refcounts: true,
        ..CreateOptions::default()
    };
    let kinds = [
        (v2.clone(), Amend::Version(3), MetaOp::AmendVersion),
        (
            CreateOptions::default(),
            Amend::Version(2),
            MetaOp::AmendVersion,
        ),
        (
            lazy,
            Amend::LazyRefcounts(false),
            MetaOp::AmendLazyRefcounts,
        ),
        (
            CreateOptions::default(),
            Amend::RefcountBits(4),
            MetaOp::AmendRefcountBits,
        ),
    ];
    for (create, change, op) in kinds {
        let on_v2 = create.compat == Compat::V2;
        let mut seen = std::collections::BTreeSet::new();
        // The crash stream of each seed picks the flush the power goes
        // at: the first, or a later one.
        for seed in 0..40 {
            let workload = vec![
                vec![write(0, 64), write(100, 8)],
                vec![Op::Flush],
                vec![write(40, 32)],
                vec![Op::Amend { change }, Op::Crash],
                vec![Op::Read {
                    sector: 0,
                    sectors: 200,
                }],
            ];
            let case = plain(seed, create.clone(), workload);
            let r = run_guarded(&case);
            assert!(r.passed(), "{change} seed {seed}: {:?}", r.failures);
            let points = r.stats.crash_points.on(on_v2);
            assert!(points.total() <= 1, "{change} seed {seed}: {points}");
            seen.extend(points.crashed_steps(op));
            if seen.len() >= 2 {
                break;
            }
        }
        assert!(seen.len() >= 2, "{change}: crashes landed at {seen:?} only");
        if op == MetaOp::AmendRefcountBits {
            assert!(seen.contains(&Step::Table) || seen.contains(&Step::Header));
        }
    }
}
