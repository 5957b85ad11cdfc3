//! Generated cases: valid, deterministic per seed, different across seeds,
//! and shaped as each profile promises.

use sim::case::{Case, Op};
use sim::workload::Profile;

#[test]
fn every_profile_generates_valid_bounded_cases() {
    for profile in Profile::ALL {
        for seed in 0..40 {
            let case = Case::generate(seed, profile);
            case.validate()
                .unwrap_or_else(|e| panic!("{profile} seed {seed}: {e}"));
            let ops = case.workload.iter().map(Vec::len).sum::<usize>();
            assert!(
                (20..=420).contains(&ops),
                "{profile} seed {seed}: {ops} ops"
            );
            // 2 to 4 sprinkled over the workload, and up to 2 more in
            // hazard cycles.
            let crashes = case.crashes();
            assert!(
                (2..=6).contains(&crashes),
                "{profile} seed {seed}: {crashes} crashes"
            );
            // 8 MiB, or 12 for a version 2 rare-path fill that outgrows
            // its first refcount table (8 MiB at 512-byte clusters).
            let most = if case.image.create.compat == engine::Compat::V2 {
                12 << 20
            } else {
                8 << 20
            };
            assert!(case.image.create.size <= most, "{profile} seed {seed}");
            assert!(!case.harsh());
            if profile != Profile::Mixed {
                assert_eq!(case.profile, Some(profile));
            }
            let ops = || case.workload.iter().flatten();
            assert!(ops().any(|op| matches!(op, Op::Read { .. })));
            assert!(ops().any(|op| matches!(op, Op::Discard { .. })));
            assert!(ops().any(|op| matches!(op, Op::WriteZeroes { .. })));
            assert!(ops().any(|op| matches!(op, Op::Flush)));
        }
    }
}

#[test]
fn generation_is_deterministic_per_seed() {
    for profile in Profile::ALL {
        for seed in [0, 1, 7, u64::MAX] {
            assert_eq!(
                Case::generate(seed, profile),
                Case::generate(seed, profile),
                "{profile} seed {seed}"
            );
        }
    }
}

#[test]
fn seeds_give_different_cases() {
    for profile in Profile::ALL {
        let workloads: std::collections::BTreeSet<String> = (0..20)
            .map(|seed| serde_json::to_string(&Case::generate(seed, profile).workload).unwrap())
            .collect();
        assert!(
            workloads.len() >= 19,
            "{profile}: only {} distinct",
            workloads.len()
        );
    }
}

#[test]
fn mixed_covers_every_profile_and_options_vary() {
    let cases: Vec<Case> = (0..200)
        .map(|s| Case::generate(s, Profile::Mixed))
        .collect();
    for p in Profile::CONCRETE {
        assert!(
            cases.iter().any(|c| c.profile == Some(p)),
            "{p} never chosen"
        );
    }
    let distinct = |f: &dyn Fn(&Case) -> String| {
        cases
            .iter()
            .map(f)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    assert!(distinct(&|c| c.image.create.cluster_size.to_string()) >= 5);
    assert!(distinct(&|c| format!("{:?}", c.engine.switches)) >= 10);
    assert!(distinct(&|c| format!("{:?}", c.disk.faults)) >= 5);
    assert!(cases.iter().any(|c| c.disk.sector_size == 4096));
    assert!(cases.iter().any(|c| c.image.backing.is_some()));
    let kinds = |c: &Case| {
        let mut k = [false; 11];
        for op in c.workload.iter().flatten() {
            k[match op {
                Op::Write { .. } => 0,
                Op::Read { .. } | Op::BackgroundRead { .. } => 1,
                Op::WriteZeroes { .. } => 2,
                Op::Discard { .. } => 3,
                Op::Flush => 4,
                Op::Crash => 5,
                Op::WriteCompressed { .. } => 6,
                Op::SnapshotCreate => 7,
                Op::SnapshotApply { .. } | Op::SnapshotDelete { .. } => 8,
                Op::Amend { .. } => 9,
                Op::Resize { .. } => 10,
            }] = true;
        }
        k
    };
    let all = cases.iter().map(kinds).fold([false; 11], |mut a, k| {
        for i in 0..11 {
            a[i] |= k[i];
        }
        a
    });
    assert_eq!(all, [true; 11]);
}

#[test]
fn crashes_happen_both_at_rest_and_in_flight() {
    let (mut alone, mut in_flight) = (0, 0);
    for seed in 0..50 {
        for g in &Case::generate(seed, Profile::Random).workload {
            if g.contains(&Op::Crash) {
                if g.len() == 1 {
                    alone += 1
                } else {
                    in_flight += 1
                }
            }
        }
    }
    assert!(
        alone > 10 && in_flight > 10,
        "{alone} at rest, {in_flight} in flight"
    );
}

#[test]
fn profiles_have_their_shape() {
    // sequential: writes of one block size in ascending order within a run.
    let case = Case::generate(5, Profile::Sequential);
    let writes: Vec<(u64, u64)> = case
        .workload
        .iter()
        .flatten()
        .filter_map(|op| match *op {
            Op::Write {
                sector, sectors, ..
            } => Some((sector, sectors)),
            _ => None,
        })
        .collect();
    assert!(writes.len() > 4);
    assert!(writes.windows(2).any(|w| w[1].0 == w[0].0 + w[0].1));
    assert!(writes.iter().all(|w| w.1 >= 1 && w.1 <= 2048));

    // backing: every case has a backing file, and writes are mostly
    // shorter than a cluster.
    for seed in 0..10 {
        let case = Case::generate(seed, Profile::Backing);
        assert!(case.image.backing.is_some());
        assert!(case.image.create.backing_file.is_some());
    }

    // mkfs: starts by discarding the whole disk.
    let case = Case::generate(9, Profile::Mkfs);
    let discarded: u64 = case
        .workload
        .iter()
        .take_while(|g| matches!(g[0], Op::Discard { .. }))
        .filter_map(|g| g[0].range())
        .map(|(_, n)| n)
        .sum();
    assert!(
        discarded >= case.sectors() - 4096,
        "{discarded} of {}",
        case.sectors()
    );
}

#[test]
fn numbered_ops_count_from_one_in_order() {
    let case = Case::generate(2, Profile::Random);
    let numbers: Vec<u64> = case.numbered_ops().map(|(_, n, _)| n).collect();
    let total = case.workload.iter().map(Vec::len).sum::<usize>() as u64;
    assert_eq!(numbers, (1..=total).collect::<Vec<_>>());
    let groups: Vec<usize> = case.numbered_ops().map(|(g, _, _)| g).collect();
    assert!(groups.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn the_model_of_a_case_covers_its_disk_and_backing() {
    let case = (0..)
        .map(|s| Case::generate(s, Profile::Backing))
        .find(|c| c.backing_data().is_some_and(|b| b.has_data(0)))
        .unwrap();
    let model = case.model();
    assert_eq!(model.sectors(), case.image.create.size / 512);
    assert_eq!(model.unwritten(0), oracle::model::Value::Backing);
    let plain = Case::generate(0, Profile::Sequential);
    assert_eq!(plain.model().unwritten(0), oracle::model::Value::Zero);
}

/// FUA requests, swarm-style: many cases send none, some a few, some
/// nearly all; the journal profile commits with FUA, the dsync profile
/// flags every write of its own, and mixed picks each of them now and then.
#[test]
fn fua_requests_come_in_some_cases_and_not_others() {
    let fua_share = |c: &Case| {
        let (mut fua, mut all) = (0, 0);
        for op in c.workload.iter().flatten() {
            if matches!(
                op,
                Op::Write { .. } | Op::WriteZeroes { .. } | Op::Discard { .. }
            ) {
                all += 1;
                fua += usize::from(op.is_fua());
            }
        }
        (fua, all)
    };
    let cases: Vec<Case> = (0..200)
        .map(|s| Case::generate(s, Profile::Mixed))
        .collect();
    let with = cases.iter().filter(|c| fua_share(c).0 > 0).count();
    assert!((40..=140).contains(&with), "{with} of 200 cases send FUA");
    assert!(cases.iter().any(|c| {
        let (f, a) = fua_share(c);
        f > 0 && f * 5 < a
    }));
    assert!(cases.iter().any(|c| {
        let (f, a) = fua_share(c);
        a > 0 && f * 5 > a * 4
    }));
    for p in Profile::FUA {
        assert!(
            cases.iter().any(|c| c.profile == Some(p)),
            "{p} never chosen"
        );
    }
    for seed in 0..20 {
        let c = Case::generate(seed, Profile::Journal);
        let commits = c
            .workload
            .iter()
            .flatten()
            .filter(|op| matches!(op, Op::Write { fua: true, .. }))
            .count();
        assert!(commits > 0, "journal seed {seed} commits nothing with FUA");
        // Every write of the profile's own; hazards and extras drawn for
        // any profile add a few plain ones.
        let (f, a) = fua_share(&Case::generate(seed, Profile::Dsync));
        assert!(f * 2 > a, "dsync seed {seed}: {f} of {a} FUA");
    }
}
