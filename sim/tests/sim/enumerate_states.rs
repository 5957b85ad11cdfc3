//! `enumerate_crash_states` on small workloads with the correct engine:
//! more than one crash state is built and every one passes.

use sim::case::{Case, Op};
use sim::runner::{enumerate_crash_states, EnumerateError, EnumerateOptions, Granularity};
use sim::workload::Profile;

fn small(seed: u64) -> Case {
    let mut c = Case::generate(seed, Profile::Random);
    // Enumeration covers one disk: no external data file.
    c.image = c.image.without_data_file();
    c.disk.faults.enabled = false;
    let w = |sector, sectors| Op::Write {
        sector,
        sectors,
        fua: false,
    };
    c.workload = vec![
        vec![w(0, 8), w(64, 8)],
        vec![Op::Flush],
        vec![w(8, 8), w(128, 16), w(0, 1), Op::Flush, Op::Crash],
    ];
    c.validate().expect("a valid case");
    c
}

#[test]
fn every_state_of_small_workloads_passes() {
    let mut most = 0;
    for seed in 0..6 {
        for granularity in [Granularity::Write, Granularity::Auto] {
            let r = enumerate_crash_states(
                &small(seed),
                &EnumerateOptions {
                    granularity,
                    cap: 64,
                },
            )
            .expect("the case has a crash point");
            assert!(r.passed(), "seed {seed}: {:#?}", r);
            assert!(r.prefix_failures.is_empty());
            assert_eq!(r.group, 2);
            assert!(r.checked >= 1 && r.checked <= 64);
            assert_ne!(r.granularity, Granularity::Auto);
            if let Some(t) = r.total {
                assert_eq!(r.checked, t.min(64));
            }
            assert_eq!(r.crash_states_checked, r.checked);
            most = most.max(r.checked);
        }
    }
    assert!(most > 1, "some workload left more than one crash state");
}

#[test]
fn by_sector_enumerates_more_than_by_write() {
    // Find a seed whose crash point has pending writes.
    let case = (0..6)
        .map(small)
        .find(|c| {
            enumerate_crash_states(
                c,
                &EnumerateOptions {
                    granularity: Granularity::Write,
                    cap: 1,
                },
            )
            .unwrap()
            .pending_writes
                > 0
        })
        .expect("a seed with pending writes");
    let w = enumerate_crash_states(
        &case,
        &EnumerateOptions {
            granularity: Granularity::Write,
            cap: 1,
        },
    )
    .unwrap();
    let s = enumerate_crash_states(
        &case,
        &EnumerateOptions {
            granularity: Granularity::Sector,
            cap: 1,
        },
    )
    .unwrap();
    assert_eq!(w.total, Some(1u64 << w.pending_writes));
    assert!(s.total.is_none_or(|t| t >= w.total.unwrap()));
    assert!(s.touched_sectors > 0);
}

#[test]
fn a_case_without_crash_is_refused() {
    let mut c = small(0);
    c.workload.pop();
    assert!(matches!(
        enumerate_crash_states(
            &c,
            &EnumerateOptions {
                granularity: Granularity::Auto,
                cap: 8
            }
        ),
        Err(EnumerateError::NoCrash)
    ));
}

/// A snapshot operation in the crash group: the power goes just after
/// each device flush it issues (every step of its metadata update), and
/// every crash state of each passes; a snapshot taken before the crash
/// group runs in the replayed prefix as in a run.
#[test]
fn every_state_inside_snapshot_operations_passes() {
    use sim::case::ImageSpec;
    use sim::runner::{enumerate_crash_states_at, run_case_counting_flushes, CrashAt};
    let w = |sector, sectors| Op::Write {
        sector,
        sectors,
        fua: false,
    };
    let mut states = 0;
    for (k, last) in [
        Op::SnapshotCreate,
        Op::SnapshotApply { pick: 0 },
        Op::SnapshotDelete { pick: 0 },
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = small(k as u64);
        c.image = ImageSpec::new(1 << 20, 4096, 16, engine::Compat::V3, false, None);
        c.workload = vec![
            vec![w(0, 8), w(64, 8)],
            vec![Op::SnapshotCreate],
            vec![w(0, 8), w(128, 16), Op::Flush],
            vec![last, Op::Crash],
        ];
        c.validate().expect("a valid case");
        let mut done = c.clone();
        done.workload[3].pop();
        let (report, flushes) = run_case_counting_flushes(&done);
        assert!(report.passed(), "{last:?}: {:?}", report.failures);
        assert!(
            flushes[3] >= 2,
            "{last:?} issued {} device flushes",
            flushes[3]
        );
        for n in 1..=flushes[3] {
            let r = enumerate_crash_states_at(
                &c,
                CrashAt::DeviceFlush(n),
                &EnumerateOptions {
                    granularity: Granularity::Auto,
                    cap: 32,
                },
                &mut |_| true,
            )
            .expect("the crash point exists");
            assert!(r.passed(), "{last:?} at flush {n}: {r:#?}");
            assert_eq!(r.group, 3);
            states += r.checked;
        }
        let drawn = enumerate_crash_states(
            &c,
            &EnumerateOptions {
                granularity: Granularity::Auto,
                cap: 32,
            },
        )
        .expect("the crash point exists");
        assert!(drawn.passed(), "{last:?} at the drawn time: {drawn:#?}");
    }
    assert!(states > 6, "only {states} crash states built");
}
