//! The deterministic executor: seeded schedules, the simulated clock, join
//! handles, and the hang and livelock reports.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use sim::exec::{ExecError, ExecOptions, RunEnd, Sim};

/// Eight tasks that each yield a few times, recording the order in which
/// they finish; returns that order and the trace hash.
fn race(seed: u64) -> (Vec<u64>, u64) {
    let sim = Sim::new(seed);
    let order = Rc::new(RefCell::new(Vec::new()));
    for i in 0..8u64 {
        let s = sim.clone();
        let o = order.clone();
        sim.spawn(async move {
            for _ in 0..3 {
                s.yield_now().await;
            }
            o.borrow_mut().push(i);
        });
    }
    sim.run().unwrap();
    let v = order.borrow().clone();
    (v, sim.trace_hash())
}

#[test]
fn same_seed_same_schedule_other_seeds_differ() {
    let (a, ha) = race(1);
    let (b, hb) = race(1);
    assert_eq!(a, b);
    assert_eq!(ha, hb);
    assert_eq!(a.len(), 8);
    // Among a handful of other seeds, the schedule must change at least once
    // (the chance that 8 tasks finish in one order for 5 seeds is tiny).
    let others: Vec<_> = (2..7).map(race).collect();
    assert!(
        others.iter().any(|(o, _)| *o != a),
        "schedule ignores the seed"
    );
    assert!(
        others.iter().all(|(_, h)| *h != ha),
        "trace hash ignores the seed"
    );
}

#[test]
fn clock_jumps_to_timers_and_join_handles_chain() {
    let sim = Sim::new(0);
    let s = sim.clone();
    let a = sim.spawn_named("sleeper", async move {
        s.sleep(500).await;
        s.sleep_until(300).await; // already past: returns at once
        s.now()
    });
    let s = sim.clone();
    let b = sim.spawn(async move {
        let t = a.await;
        s.sleep(1_000).await;
        (t, s.now())
    });
    sim.run().unwrap();
    assert_eq!(b.take(), Some((500, 1_500)));
    assert_eq!(sim.now(), 1_500);
    assert!(b.is_finished());
}

#[test]
fn timers_due_together_run_in_seeded_order() {
    let order_for = |seed| {
        let sim = Sim::new(seed);
        let order = Rc::new(RefCell::new(Vec::new()));
        for i in 0..6u64 {
            let s = sim.clone();
            let o = order.clone();
            sim.spawn(async move {
                s.sleep(100).await;
                o.borrow_mut().push(i);
            });
        }
        sim.run().unwrap();
        let v = order.borrow().clone();
        v
    };
    let a = order_for(11);
    assert_eq!(a, order_for(11));
    assert!((12..20).any(|s| order_for(s) != a));
}

#[test]
fn hang_names_the_stuck_tasks() {
    let sim = Sim::new(0);
    let s = sim.clone();
    sim.spawn_named("finishes", async move { s.sleep(10).await });
    sim.spawn_named("waits-forever", std::future::pending::<()>());
    match sim.run() {
        Err(ExecError::Hang { now, stuck }) => {
            assert_eq!(now, 10);
            assert_eq!(stuck, vec!["#1 waits-forever".to_string()]);
        }
        other => panic!("expected a hang, got {other:?}"),
    }
}

#[test]
fn step_budget_ends_a_livelock() {
    let sim = Sim::with_options(
        0,
        ExecOptions {
            steps_max: 1_000,
            ..ExecOptions::default()
        },
    );
    let s = sim.clone();
    sim.spawn_named("spinner", async move {
        loop {
            s.yield_now().await;
        }
    });
    let err = sim.run().unwrap_err();
    assert!(matches!(
        err,
        ExecError::StepBudget {
            steps_max: 1_000,
            ..
        }
    ));
    assert!(err.to_string().contains("spinner"), "{err}");
}

#[test]
fn time_budget_ends_an_endless_sleeper() {
    let sim = Sim::with_options(
        0,
        ExecOptions {
            time_max: 10_000,
            ..ExecOptions::default()
        },
    );
    let s = sim.clone();
    sim.spawn_named("ticker", async move {
        loop {
            s.sleep(1_000).await;
        }
    });
    let err = sim.run().unwrap_err();
    assert!(
        matches!(
            err,
            ExecError::TimeBudget {
                time_max: 10_000,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn run_until_time_stops_and_abort_drops_tasks() {
    let sim = Sim::new(3);
    let done = Rc::new(RefCell::new(0));
    for i in 1..=4u64 {
        let s = sim.clone();
        let d = done.clone();
        sim.spawn(async move {
            s.sleep(i * 100).await;
            *d.borrow_mut() += 1;
        });
    }
    assert_eq!(sim.run_until_time(250).unwrap(), RunEnd::Stopped);
    assert_eq!(sim.now(), 250);
    assert_eq!(*done.borrow(), 2);
    assert_eq!(sim.task_count(), 2);
    sim.abort_all();
    assert_eq!(sim.task_count(), 0);
    // Nothing left: the run ends at once, and the clock does not move.
    sim.run().unwrap();
    assert_eq!(sim.now(), 250);
    assert_eq!(*done.borrow(), 2);
}

#[test]
fn tasks_spawned_from_tasks_run() {
    let sim = Sim::new(5);
    let s = sim.clone();
    let outer = sim.spawn(async move {
        let s2 = s.clone();
        let inner = s.spawn(async move {
            s2.sleep(7).await;
            42
        });
        inner.await + 1
    });
    sim.run().unwrap();
    assert_eq!(outer.take(), Some(43));
}

#[test]
fn daemons_do_not_keep_a_run_going() {
    let sim = Sim::with_options(
        6,
        ExecOptions {
            steps_max: 10_000,
            ..ExecOptions::default()
        },
    );
    let ticks = Rc::new(RefCell::new(0u64));
    let s = sim.clone();
    let t = ticks.clone();
    sim.spawn_daemon("writeback", async move {
        loop {
            s.sleep(100).await;
            *t.borrow_mut() += 1;
        }
    });
    let s = sim.clone();
    let v = sim
        .block_on(async move {
            s.sleep(1_050).await;
            7
        })
        .unwrap();
    assert_eq!(v, 7);
    assert_eq!(*ticks.borrow(), 10);
    assert_eq!(sim.task_count(), 1, "the daemon is still there");
    assert!(
        sim.task_names().is_empty(),
        "daemons are not listed as stuck"
    );
    // A foreground task that never wakes while a daemon ticks on is caught
    // by the budget, and named.
    sim.spawn_named("stuck", std::future::pending::<()>());
    let err = sim.run().unwrap_err();
    assert!(matches!(err, ExecError::StepBudget { .. }), "{err}");
    assert!(err.to_string().ends_with("#2 stuck"), "{err}");
}

/// Four tasks that log (task, step) around yields, under `policy`.
fn interleaving(seed: u64, policy: sim::exec::SchedulePolicy) -> Vec<u64> {
    let sim = Sim::with_options(
        seed,
        ExecOptions {
            policy,
            ..ExecOptions::default()
        },
    );
    let log = Rc::new(RefCell::new(Vec::new()));
    for t in 0..4u64 {
        let s = sim.clone();
        let l = log.clone();
        sim.spawn(async move {
            for _ in 0..3 {
                l.borrow_mut().push(t);
                s.yield_now().await;
            }
        });
    }
    sim.run().unwrap();
    let v = log.borrow().clone();
    v
}

#[test]
fn priority_schedules_run_tasks_whole_until_a_change_point() {
    use sim::exec::SchedulePolicy;
    let runs = |v: &[u64]| 1 + v.windows(2).filter(|w| w[0] != w[1]).count();
    let calm = SchedulePolicy::Priority {
        change_points: 0,
        steps_hint: 12,
    };
    for seed in 0..10 {
        let v = interleaving(seed, calm);
        assert_eq!(v.len(), 12);
        assert_eq!(runs(&v), 4, "seed {seed}: {v:?}");
    }
    let orders: BTreeSet<Vec<u64>> = (0..10).map(|s| interleaving(s, calm)).collect();
    assert!(orders.len() > 1, "priorities ignore the seed");
    let stormy = SchedulePolicy::Priority {
        change_points: 3,
        steps_hint: 12,
    };
    assert_eq!(interleaving(5, stormy), interleaving(5, stormy));
    assert!(
        (0..20).any(|s| runs(&interleaving(s, stormy)) > 4),
        "change points never preempt"
    );
    // Uniform choice interleaves freely.
    assert!((0..5).any(|s| runs(&interleaving(s, SchedulePolicy::Random)) > 6));
}

#[test]
fn a_starved_task_runs_only_when_no_other_is_ready() {
    use sim::exec::SchedulePolicy;
    let starve = |task, every, release_after| SchedulePolicy::Starve {
        task,
        every,
        release_after,
    };
    for seed in 0..10 {
        // Task 1 waits until the others have finished.
        let v = interleaving(seed, starve(1, 0, u64::MAX));
        assert_eq!(v.len(), 12);
        assert_eq!(&v[9..], &[1, 1, 1], "seed {seed}: {v:?}");
        assert!(!v[..9].contains(&1), "seed {seed}: {v:?}");
        // Tasks 0 and 2 (every 2nd from 0) wait for 1 and 3.
        let v = interleaving(seed, starve(0, 2, u64::MAX));
        assert!(v[..6].iter().all(|t| t % 2 == 1), "seed {seed}: {v:?}");
    }
    // Released at the first step, it is the uniform choice again.
    assert!((0..10).any(|s| {
        let v = interleaving(s, starve(1, 0, 1));
        v[..9].contains(&1)
    }));
    assert_eq!(
        interleaving(3, starve(2, 0, 5)),
        interleaving(3, starve(2, 0, 5))
    );
}

#[test]
fn swarm_policies_mix_and_are_seeded() {
    use sim::exec::SchedulePolicy;
    let swarm = |seed| ExecOptions {
        policy: SchedulePolicy::swarm(seed, 500, 1),
        ..ExecOptions::default()
    };
    let all: Vec<ExecOptions> = (0..40).map(swarm).collect();
    assert_eq!(all[3], swarm(3));
    assert!(all.iter().any(|o| o.policy == SchedulePolicy::Random));
    assert!(all
        .iter()
        .any(|o| matches!(o.policy, SchedulePolicy::Starve { .. })));
    assert!(all.iter().any(|o| matches!(
        o.policy,
        SchedulePolicy::Priority {
            steps_hint: 500,
            ..
        }
    )));
    let json = serde_json::to_string(&all[0]).unwrap();
    assert_eq!(serde_json::from_str::<ExecOptions>(&json).unwrap(), all[0]);
}

#[test]
fn a_panicking_task_leaves_the_sim_usable() {
    let sim = Sim::new(0);
    sim.spawn_named("boom", async { panic!("task failed on purpose") });
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
    assert!(caught.is_err());
    // The panicked task is gone with its future; new work still runs.
    sim.abort_all();
    assert_eq!(sim.block_on(async { 5 }).unwrap(), 5);
}
