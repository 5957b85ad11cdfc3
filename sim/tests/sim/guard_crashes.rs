//! Three ways generated cases reach windows a crash at a random moment or
//! flush almost never hits: crashes armed at a guard
//! (`CrashOptions::at_guards`: the power goes at the flush after a rare
//! guarded condition arises), background reads that later groups do not
//! wait for (`Op::BackgroundRead`, held long by the disk across a free and
//! a reuse of their cluster), and requests held by rank
//! (`OutlierOptions::held`, what shrinking pins drawn outliers to); and
//! the count of where such crashes land inside multi-step metadata
//! operations (`RunStats::crash_points`).

use engine::Compat;
use engine::Guard;
use engine::{MetaOp, Step};
use sim::campaign::run_guarded;
use sim::case::{Case, ImageSpec, Op};
use sim::disk::{HeldRequest, OutlierOptions, CRASH_GUARDS};
use sim::exec::SchedulePolicy;
use sim::workload::Profile;

/// The first seed from `from` whose generated case satisfies `f`.
fn first_case(from: u64, f: impl Fn(&Case) -> bool) -> Case {
    (from..from + 2000)
        .map(|s| Case::generate(s, Profile::Mixed))
        .find(|c| f(c))
        .expect("a generated case of that kind within 2000 seeds")
}

#[test]
fn generated_cases_arm_the_rare_guards_swarm_style() {
    let cases: Vec<Case> = (0..200)
        .map(|s| Case::generate(s, Profile::Mixed))
        .collect();
    for g in CRASH_GUARDS {
        let armed = cases
            .iter()
            .filter(|c| c.disk.crash.at_guards.contains(&g))
            .count();
        assert!(
            (60..=140).contains(&armed),
            "{} armed in {armed} of 200",
            g.name()
        );
    }
    let ones = cases
        .iter()
        .filter(|c| c.disk.crash.at_guard_one_in == 1)
        .count();
    assert!(ones > 40 && ones < 200, "{ones}");
}

/// A case whose correct run grows the refcount table, armed at that
/// growth, to crash at its first arising.
fn armed_growth_case() -> Case {
    first_case(0, |c| {
        c.disk.crash.at_guards == [Guard::ReftableBeforeHeader]
            && c.disk.crash.at_guard_one_in == 1
            && run_guarded(c).stats.guards.get(Guard::ReftableBeforeHeader) > 0
    })
}

#[test]
fn an_armed_guard_crashes_at_its_flush_and_only_when_armed() {
    // A case whose correct run grows the refcount table, armed at that
    // growth: the power goes there once, and the crash state is judged.
    let case = armed_growth_case();
    let armed = run_guarded(&case);
    assert!(armed.passed(), "{:?}", armed.failures);
    assert_eq!(armed.stats.counts.crashes_at_guard, 1, "seed {}", case.seed);
    assert!(armed.stats.counts.crashes_at_flush >= 1);
    let mut unarmed = case.clone();
    unarmed.disk.crash.at_guards.clear();
    let r = run_guarded(&unarmed);
    assert!(r.passed(), "{:?}", r.failures);
    assert_eq!(r.stats.counts.crashes_at_guard, 0);
    assert_eq!(
        r.stats.counts.crashes + 1,
        armed.stats.counts.crashes,
        "one crash more"
    );
}

#[test]
fn crash_guards_are_checked_when_a_case_is_read() {
    let case = Case::generate(3, Profile::Random);
    let mut v: serde_json::Value = serde_json::from_str(&case.to_json()).unwrap();
    v["disk"]["crash"]["at_guards"] = serde_json::json!(["no_such_guard"]);
    let e = Case::from_json(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("no_such_guard"), "{e}");
    v["disk"]["crash"]["at_guards"] =
        serde_json::json!(["reftable_before_header", "reftable_before_header"]);
    let e = Case::from_json(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("twice"), "{e}");
    v["disk"]["crash"]["at_guards"] = serde_json::json!(["reftable_before_header"]);
    v["disk"]["crash"]["at_guard_one_in"] = 0.into();
    let e = Case::from_json(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("at_guard_one_in"), "{e}");
    v["disk"]["crash"]["at_guard_one_in"] = 2.into();
    let back = Case::from_json(&v.to_string()).unwrap();
    assert_eq!(back.disk.crash.at_guards, [Guard::ReftableBeforeHeader]);
}

#[test]
fn pinning_the_held_requests_by_rank_replays_the_run_alike() {
    let case = first_case(0, |c| {
        c.disk.latency.outliers.any() && run_guarded(c).stats.counts.held_requests > 0
    });
    let drawn = run_guarded(&case);
    assert!(!drawn.held.is_empty());
    assert_eq!(drawn.held.len() as u64, drawn.stats.counts.held_requests);
    let mut pinned = case.clone();
    let o = &mut pinned.disk.latency.outliers;
    o.image = Default::default();
    o.data_file = Default::default();
    o.backing = Default::default();
    o.held = drawn.held.clone();
    pinned.validate().unwrap();
    let again = run_guarded(&pinned);
    assert_eq!(again.trace_hash, drawn.trace_hash, "seed {}", case.seed);
    assert_eq!(again.held, drawn.held);
    // Without them the run goes otherwise.
    let mut none = case.clone();
    none.disk.latency.outliers = OutlierOptions::default();
    assert_ne!(run_guarded(&none).trace_hash, drawn.trace_hash);
}

/// `W(a) F`, a background read of `a`, then `discard(a) F W(c) F R(a)`
/// step by step, 4 KiB clusters, nothing random but the schedule.
fn outlived_read_case() -> Case {
    let mut case = Case::generate(5, Profile::Sequential);
    case.disk = sim::disk::DiskOptions::default();
    case.schedule = SchedulePolicy::Random;
    case.image = ImageSpec::new(1 << 20, 4096, 16, Compat::V3, false, None);
    case.engine = engine::EngineOptions::default();
    let w = |c: u64| Op::Write {
        sector: c * 8,
        sectors: 8,
        fua: false,
    };
    case.workload = vec![
        vec![w(0)],
        vec![Op::Flush],
        vec![Op::BackgroundRead {
            sector: 0,
            sectors: 8,
            hold: 0,
        }],
        vec![Op::Discard {
            sector: 0,
            sectors: 8,
            fua: false,
        }],
        vec![Op::Flush],
        vec![w(5)],
        vec![Op::Flush],
        vec![Op::Read {
            sector: 0,
            sectors: 8,
        }],
    ];
    case.validate().unwrap();
    case
}

#[test]
fn a_background_read_held_long_outlives_the_free_of_its_cluster() {
    let case = outlived_read_case();
    let quick = run_guarded(&case);
    assert!(quick.passed(), "{:?}", quick.failures);
    assert_eq!(quick.stats.guards.get(Guard::FreeAfterInflightIo), 0);
    // Hold every read of the image's disk long: the background read is
    // still in flight when the flush's writeback would apply the free, so
    // the free waits (the guard's condition arises) and the run passes.
    let mut held = case.clone();
    let image_disk = 1;
    held.disk.latency.outliers.held = (1..=16)
        .map(|n| HeldRequest {
            device: image_disk,
            op: engine::dev::IoOp::Read,
            n,
            factor: 1000,
        })
        .collect();
    let r = run_guarded(&held);
    assert!(r.passed(), "{:?}", r.failures);
    assert!(
        r.stats.guards.get(Guard::FreeAfterInflightIo) > 0,
        "{}",
        r.stats.guards
    );
    let json = held.to_json();
    assert!(json.contains("\"background_read\""), "{json}");
    assert_eq!(Case::from_json(&json).unwrap(), held);
}

#[test]
fn a_background_read_that_asks_to_be_held_is_held() {
    let mut case = outlived_read_case();
    case.workload[2] = vec![Op::BackgroundRead {
        sector: 0,
        sectors: 8,
        hold: 1000,
    }];
    let r = run_guarded(&case);
    assert!(r.passed(), "{:?}", r.failures);
    assert!(r.stats.counts.held_requests > 0);
    assert!(
        r.stats.guards.get(Guard::FreeAfterInflightIo) > 0,
        "{}",
        r.stats.guards
    );
    // Its hold is part of the case, and bounded.
    let json = case.to_json();
    assert!(json.contains("\"hold\": 1000"), "{json}");
    case.workload[2] = vec![Op::BackgroundRead {
        sector: 0,
        sectors: 8,
        hold: sim::disk::MAX_OUTLIER_FACTOR + 1,
    }];
    let e = case.validate().unwrap_err().to_string();
    assert!(e.contains("hold"), "{e}");
}

#[test]
fn a_crash_inside_a_metadata_operation_is_counted_by_operation_and_step() {
    // The armed guard crash above lands inside the refcount table's growth,
    // after the new table is written: counted there, on the case's version.
    let case = armed_growth_case();
    let r = run_guarded(&case);
    let points = r
        .stats
        .crash_points
        .on(case.image.create.compat == Compat::V2);
    assert!(
        points.get(MetaOp::ReftableGrowth, Step::Table) >= 1,
        "seed {}: {points}",
        case.seed
    );
    // A snapshot create cut at its first, second or third flush (drawn
    // from each case's crash stream): every crash is counted inside it, at
    // one step, and the cases between them reach more than one step.
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..400 {
        let mut c = Case::generate(seed, Profile::Mixed);
        if c.image.create.compat != Compat::V3
            || c.image.data_file.is_some()
            || c.image.backing.is_some()
            || c.harsh()
        {
            continue;
        }
        c.disk.faults.enabled = false;
        c.disk.crash.at_guards.clear();
        c.disk.crash.at_flush_ppm = 1_000_000;
        c.workload = vec![
            vec![Op::Write {
                sector: 0,
                sectors: 8,
                fua: false,
            }],
            vec![Op::Flush],
            vec![Op::SnapshotCreate, Op::Crash],
        ];
        let r = run_guarded(&c);
        assert!(r.passed(), "seed {seed}: {:?}", r.failures);
        let p = r.stats.crash_points.v3;
        let steps: Vec<Step> = p.crashed_steps(MetaOp::SnapshotCreate).collect();
        // The crash inside the create, and perhaps one inside the
        // rebuild at the reopen of the dirty image it left.
        assert_eq!(p.of_op(MetaOp::SnapshotCreate), 1, "seed {seed}: {p}");
        assert_eq!(
            p.total(),
            1 + p.of_op(MetaOp::DirtyRebuild),
            "seed {seed}: {p}"
        );
        assert_eq!(steps.len(), 1, "seed {seed}: {p}");
        assert_eq!(r.stats.crash_points.v2.total(), 0);
        seen.insert(steps[0]);
        if seen.len() >= 2 {
            return;
        }
    }
    panic!("every crash inside a snapshot create in one step: {seen:?}");
}

/// The reopen of an image a crash left dirty runs the rebuild of its
/// refcounts and flags; with step crashes armed, the power goes inside
/// it too, at each of its steps across cases, and the image the second
/// crash leaves is judged (strictly once the rebuild cleared the dirty
/// bit). The rebuild that clears the bit before its refcounts are
/// durable fails there.
#[test]
fn a_crash_inside_the_dirty_rebuild_is_counted_and_judged() {
    let mut seen = std::collections::BTreeSet::new();
    let mut caught = 0;
    for seed in 0..60 {
        let mut c = Case::generate(seed, Profile::Mixed);
        if c.image.create.compat != Compat::V3 || c.harsh() {
            continue;
        }
        c.image.create.lazy_refcounts = true;
        c.disk.faults.enabled = false;
        c.disk.crash.at_guards.clear();
        c.disk.crash.at_steps = true;
        let write = |sector| {
            vec![Op::Write {
                sector,
                sectors: 8,
                fua: false,
            }]
        };
        // Two flushed allocations, the second cut by the crash: the
        // dirty bit is set, the refcounts on disk stale.
        c.workload = vec![
            write(0),
            vec![Op::Flush],
            write(64),
            vec![Op::Flush, Op::Crash],
            write(128),
            vec![Op::Flush],
        ];
        let r = run_guarded(&c);
        assert!(r.passed(), "seed {seed}: {:?}", r.failures);
        seen.extend(r.stats.crash_points.v3.crashed_steps(MetaOp::DirtyRebuild));
        let mut broken = c.clone();
        broken.engine.broken = Some(engine::options::Broken::RebuildCleansFirst);
        caught += usize::from(!run_guarded(&broken).passed());
    }
    assert!(
        seen.contains(&Step::Refcounts) && seen.contains(&Step::Header),
        "crashes inside the rebuild only at {seen:?}"
    );
    assert!(caught > 0, "the rebuild that cleans first was never caught");
}

/// A version 2 image cut inside a snapshot create is repaired with
/// `check -r all`; with step crashes armed the power goes inside that
/// repair too (half the time), keeping any of its writes, and running it
/// again repairs the image with no guest data lost.
#[test]
fn a_crash_inside_check_repair_is_counted_and_a_second_repair_mends_it() {
    let mut cut = 0;
    for seed in 0..200 {
        let mut c = Case::generate(seed, Profile::Mixed);
        if c.image.create.compat != Compat::V2 || c.image.backing.is_some() || c.harsh() {
            continue;
        }
        c.disk.faults.enabled = false;
        c.disk.crash.at_guards.clear();
        c.disk.crash.at_steps = true;
        c.workload = vec![
            vec![Op::Write {
                sector: 0,
                sectors: 64,
                fua: false,
            }],
            vec![Op::Flush],
            vec![Op::SnapshotCreate, Op::Crash],
            vec![Op::Write {
                sector: 8,
                sectors: 8,
                fua: false,
            }],
            vec![Op::Flush],
        ];
        let r = run_guarded(&c);
        assert!(r.passed(), "seed {seed}: {:?}", r.failures);
        assert_eq!(
            r.stats
                .crash_points
                .v3
                .get(MetaOp::CheckRepair, Step::Start),
            0
        );
        cut += r
            .stats
            .crash_points
            .v2
            .get(MetaOp::CheckRepair, Step::Start);
        if cut >= 3 {
            return;
        }
    }
    panic!("only {cut} crashes inside check -r in 200 seeds");
}

/// A clean version 3 image that a crash left with leaked clusters is
/// repaired with `check -r all` before the reopen (as a user reclaims
/// them), while the case may still crash inside one; the power goes
/// inside that repair half the time, and the second repair leaves no
/// leak and loses no guest data.
#[test]
fn a_crash_inside_check_repair_of_a_leaking_version_3_image_is_counted() {
    let (mut repairs, mut cut) = (0, 0);
    for seed in 0..200 {
        let mut c = Case::generate(seed, Profile::Mixed);
        if c.image.create.compat != Compat::V3
            || c.image.create.lazy_refcounts
            || c.image.backing.is_some()
            || c.harsh()
        {
            continue;
        }
        c.disk.faults.enabled = false;
        c.disk.crash.at_guards.clear();
        c.disk.crash.at_steps = true;
        // Allocating writes far apart, each its own cluster and L2 entry,
        // cut by the power at the flush that makes their refcounts
        // durable before their entries.
        let writes: Vec<Op> = (0..24)
            .map(|i| Op::Write {
                sector: i * 256,
                sectors: 8,
                fua: false,
            })
            .collect();
        c.workload = vec![writes, vec![Op::Flush, Op::Crash], vec![Op::Flush]];
        let r = run_guarded(&c);
        assert!(r.passed(), "seed {seed}: {:?}", r.failures);
        assert_eq!(
            r.stats
                .crash_points
                .v2
                .get(MetaOp::CheckRepair, Step::Start),
            0
        );
        repairs += r.stats.counts.leak_repairs;
        cut += r
            .stats
            .crash_points
            .v3
            .get(MetaOp::CheckRepair, Step::Start);
        if cut >= 3 {
            assert!(repairs >= cut, "{repairs} repairs, {cut} cut");
            return;
        }
    }
    panic!(
        "only {cut} crashes inside check -r of version 3 images in 200 seeds ({repairs} repairs)"
    );
}
