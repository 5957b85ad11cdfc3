//! A broken variant's failures carry their evidence as data, for a
//! campaign report to show: a wrong read's sectors with the bytes that
//! came back and each allowed value's bytes, the write ids, and where the
//! sector maps; a failed post-crash check the diff of the metadata dump
//! before and after the crash.

use engine::options::Broken;
use oracle::data::SECTOR_SIZE;
use sim::campaign::{case_for, run_guarded, CampaignPlan};
use sim::runner::{Failure, SAME_DUMP};

fn plan(broken: Broken) -> CampaignPlan {
    CampaignPlan {
        broken: Some(broken),
        rule_checks: false,
        ..CampaignPlan::new(0..200)
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The report of the first seed of `campaign --seeds 0..200 --broken b`
/// whose failures `wanted` accepts (found, not pinned, so that a change of
/// generation moves the seed, not the test's point).
fn first_report(b: Broken, wanted: impl Fn(&Failure) -> bool) -> sim::runner::RunReport {
    let p = plan(b);
    p.seeds
        .clone()
        .map(|seed| run_guarded(&case_for(&p, seed)))
        .find(|r| r.failures.iter().any(&wanted))
        .unwrap_or_else(|| panic!("{b:?}: no seed of {:?} fails as wanted", p.seeds))
}

/// link-before-data's first seed with a wrong read reads a sector that
/// holds another write's data.
#[test]
fn a_wrong_read_carries_the_bytes_and_what_was_allowed() {
    let report = first_report(
        Broken::LinkBeforeData,
        |f| matches!(f, Failure::Model { sectors, .. } if !sectors.is_empty()),
    );
    let sectors: Vec<_> = report
        .failures
        .iter()
        .filter_map(|f| match f {
            Failure::Model { sectors, .. } => Some(sectors),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(
        !sectors.is_empty(),
        "no wrong sector as data: {:?}",
        report.failures
    );
    for s in sectors {
        let got = unhex(&s.got);
        assert_eq!(got.len(), SECTOR_SIZE);
        assert!(!s.allowed.is_empty());
        for a in &s.allowed {
            if a.bytes.is_empty() {
                continue;
            }
            let allowed = unhex(&a.bytes);
            assert_eq!(allowed.len(), SECTOR_SIZE);
            assert_ne!(
                allowed, got,
                "sector {}: an allowed value is what came back",
                s.sector
            );
            if let Some(id) = a.write_id {
                assert!(s.write_ids.contains(&id));
            }
        }
        // The bytes decode to what the text says came back.
        assert_eq!(oracle::data::decode(&got).to_string(), s.observed);
    }
}

/// evict-without-flush's first seed failing the check after a crash: the
/// failure carries the dump diff (or says the crash lost no metadata
/// write).
#[test]
fn a_failed_check_after_a_crash_carries_the_dump_diff() {
    let report = first_report(
        Broken::EvictWithoutFlush,
        |f| matches!(f, Failure::Check { label, .. } if label.starts_with("crash-")),
    );
    let mut crash_checks = 0;
    for f in &report.failures {
        if let Failure::Check {
            label, dump_diff, ..
        } = f
        {
            if label.starts_with("crash-") {
                crash_checks += 1;
                let d = dump_diff
                    .as_deref()
                    .unwrap_or_else(|| panic!("{label}: no dump diff"));
                assert!(
                    d == SAME_DUMP || d.starts_with("--- qcsim dump, before the crash"),
                    "{label}: {d}"
                );
            } else {
                assert!(dump_diff.is_none(), "{label} is not after a crash");
            }
        }
    }
    assert!(
        crash_checks > 0,
        "no failed check after a crash: {:?}",
        report.failures
    );
}
