//! The unit tests of `engine::dev::pool`.

use engine::dev::pool::*;
use futures::executor::block_on;
use futures::future::join_all;
use std::sync::mpsc;

#[test]
fn a_panicking_job_is_reported_not_hung_and_the_pool_survives() {
    let pool = IoPool::new(1).unwrap();
    let panicked = block_on(pool.submit(|| -> u32 {
        panic!("deliberate panic in an I/O job");
    }));
    assert!(matches!(panicked, Err(Abandoned)));
    // The single worker is still there to run the next job, and the
    // panicked one no longer counts as in flight.
    let ok = block_on(pool.submit(|| 42u32));
    assert!(matches!(ok, Ok(42)));
    assert!(block_on(pool.alone()).is_some());
}

#[test]
fn a_request_alone_runs_alone_and_one_among_others_does_not() {
    let pool = IoPool::new(2).unwrap();
    assert!(block_on(pool.alone()).is_some());
    // Four requests issued together, each handing its job to a worker
    // when it may not run alone (as `FileDev` does); the jobs wait for
    // a release, so none is finished while another decides.
    let mut releases = Vec::new();
    let mut requests = Vec::new();
    for _ in 0..4 {
        let (release, wait) = mpsc::channel::<()>();
        releases.push(release);
        let pool = &pool;
        requests.push(async move {
            match pool.alone().await {
                Some(_alone) => None,
                None => Some(pool.submit(move || wait.recv().is_ok())),
            }
        });
    }
    let handed = block_on(join_all(requests));
    assert!(
        handed.iter().all(Option::is_some),
        "a request ran alone among four"
    );
    for r in releases {
        r.send(()).unwrap();
    }
    for job in handed.into_iter().flatten() {
        assert!(matches!(block_on(job), Ok(true)));
    }
    assert_eq!(pool.alone_runs(), 1);
}

#[test]
fn a_job_in_flight_or_a_request_running_alone_keeps_others_off() {
    let pool = IoPool::new(1).unwrap();
    let (release, wait) = mpsc::channel::<()>();
    let job = pool.submit(move || wait.recv().is_ok());
    assert!(block_on(pool.alone()).is_none(), "a worker is busy");
    release.send(()).unwrap();
    assert!(matches!(block_on(job), Ok(true)));
    let permit = block_on(pool.alone()).expect("idle again");
    assert!(block_on(pool.alone()).is_none(), "one runs alone already");
    drop(permit);
    assert!(block_on(pool.alone()).is_some());
}
