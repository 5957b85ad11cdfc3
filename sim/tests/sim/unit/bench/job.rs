//! The unit tests of `sim::bench::job`.

use engine::Switches;
use sim::bench::BenchError;
use sim::exec::ExecError;

/// The chain `{:#}` prints: each link's message followed by its
/// sources' messages.
fn chain(e: &dyn std::error::Error) -> Vec<String> {
    let mut out = vec![e.to_string()];
    let mut link = e;
    while let Some(source) = link.source() {
        out.push(source.to_string());
        link = source;
    }
    out
}

fn assert_each_cause_once(e: &dyn std::error::Error) {
    let links = chain(e);
    for pair in links.windows(2) {
        assert!(
            !pair[0].contains(&pair[1]),
            "'{}' repeats its source '{}'",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn a_bench_error_prints_its_cause_once() {
    let engine = BenchError::Engine {
        workload: "seq4k",
        switches: Switches::default(),
        during: "writing",
        source: engine::Error::ReadOnly,
    };
    assert_each_cause_once(&engine);
    assert_eq!(chain(&engine).last().unwrap(), "image is read-only");
    let exec = BenchError::Exec(
        ExecError::Hang {
            now: 7,
            stuck: vec!["guest".into()],
        },
        "seq4k",
    );
    assert_each_cause_once(&exec);
    assert_eq!(chain(&exec)[0], "seq4k: the simulation stopped");
}
