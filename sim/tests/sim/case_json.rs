//! Cases as JSON: round trips, and strict refusal of what is not a case.

use sim::case::{Case, CaseError, Op, CASE_VERSION};
use sim::workload::Profile;

#[test]
fn generated_cases_round_trip_through_json() {
    for profile in Profile::ALL {
        for seed in 0..5 {
            let case = Case::generate(seed, profile);
            let text = case.to_json();
            let back = Case::from_json(&text).unwrap_or_else(|e| panic!("{profile} {seed}: {e}"));
            assert_eq!(back, case);
            assert_eq!(back.to_json(), text);
        }
    }
}

#[test]
fn save_and_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("case.json");
    let case = Case::generate(11, Profile::Backing);
    case.save(&path).unwrap();
    assert_eq!(Case::load(&path).unwrap(), case);
    let missing = Case::load(&dir.path().join("none.json")).unwrap_err();
    assert!(matches!(missing, CaseError::Io { .. }), "{missing}");
    assert!(missing.to_string().contains("none.json"), "{missing}");
}

fn edited(f: impl FnOnce(&mut serde_json::Value)) -> Result<Case, CaseError> {
    let case = Case::generate(3, Profile::Random);
    let mut v: serde_json::Value = serde_json::from_str(&case.to_json()).unwrap();
    f(&mut v);
    Case::from_json(&v.to_string())
}

#[test]
fn unknown_fields_are_refused_everywhere() {
    let top = edited(|v| v["surprise"] = 1.into()).unwrap_err();
    assert!(top.to_string().contains("surprise"), "{top}");
    let nested = edited(|v| v["disk"]["faults"]["surprise"] = 1.into()).unwrap_err();
    assert!(nested.to_string().contains("surprise"), "{nested}");
    let in_op = edited(|v| v["workload"][0][0]["surprise"] = 1.into()).unwrap_err();
    assert!(in_op.to_string().contains("surprise"), "{in_op}");
}

#[test]
fn other_versions_are_refused_by_version() {
    let e = edited(|v| {
        v["version"] = 2.into();
        v["new_field"] = true.into();
    })
    .unwrap_err();
    assert!(matches!(e, CaseError::Version { found: 2 }), "{e}");
    assert_eq!(CASE_VERSION, 1);
}

#[test]
fn invalid_cases_are_refused_with_the_reason() {
    let e = edited(|v| v["image"]["create"]["cluster_size"] = 3000.into()).unwrap_err();
    assert!(matches!(e, CaseError::ClusterSize(3000)), "{e}");
    let e = edited(|v| v["image"]["create"]["size"] = (1u64 << 41).into()).unwrap_err();
    assert!(matches!(e, CaseError::VirtualSize(_)), "{e}");
    let e = edited(|v| v["engine"]["l2_cache_tables"] = 1.into()).unwrap_err();
    assert!(matches!(e, CaseError::Engine(_)), "{e}");
    let e = edited(|v| v["disk"]["sector_size"] = 1024.into()).unwrap_err();
    assert!(matches!(e, CaseError::Disk(_)), "{e}");
    let e = edited(|v| v["workload"] = serde_json::json!([[]])).unwrap_err();
    assert!(matches!(e, CaseError::Group { group: 0, .. }), "{e}");
    let e = edited(|v| {
        v["workload"] = serde_json::json!([[{"op": "crash"}, {"op": "crash"}]]);
    })
    .unwrap_err();
    assert!(matches!(e, CaseError::Group { group: 0, .. }), "{e}");
    let e = edited(|v| {
        v["workload"] = serde_json::json!([
            [{"op": "flush"}],
            [{"op": "write", "sector": u64::MAX, "sectors": 2}]
        ]);
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            CaseError::OpRange {
                group: 1,
                index: 0,
                ..
            }
        ),
        "{e}"
    );
    let e = edited(|v| {
        v["image"]["create"]["backing_file"] = serde_json::Value::Null;
    });
    // Generated random cases may or may not have a backing file; the
    // mismatch only exists when they do.
    if let Err(e) = e {
        assert!(matches!(e, CaseError::Backing(_)), "{e}");
    }
    let e = Case::from_json("{\"version\": 1").unwrap_err();
    assert!(matches!(e, CaseError::Json(_)), "{e}");
}

#[test]
fn ops_read_as_written() {
    let json = r#"[{"op":"write","sector":8,"sectors":16},{"op":"write_zeroes","sector":0,"sectors":1,"unmap":true},{"op":"discard","sector":2,"sectors":1,"fua":true},{"op":"crash"}]"#;
    let ops: Vec<Op> = serde_json::from_str(json).unwrap();
    assert_eq!(
        ops,
        [
            Op::Write {
                sector: 8,
                sectors: 16,
                fua: false,
            },
            Op::WriteZeroes {
                sector: 0,
                sectors: 1,
                unmap: true,
                fua: false,
            },
            // FUA written only when set: older cases read as before.
            Op::Discard {
                sector: 2,
                sectors: 1,
                fua: true,
            },
            Op::Crash
        ]
    );
    assert_eq!(serde_json::to_string(&ops).unwrap(), json);
}

#[test]
fn summary_names_the_case() {
    let case = Case::generate(4, Profile::Bench);
    let s = case.summary();
    assert!(s.starts_with("seed 4 bench "), "{s}");
    assert!(s.contains(&format!("crashes={}", case.crashes())), "{s}");
    assert!(
        s.contains(&format!("cluster={}", case.image.create.cluster_size)),
        "{s}"
    );
    let mut other = case.clone();
    other.image.create.size /= 2;
    assert_ne!(other.summary(), s);
}

/// Fields added after cases were first saved read, when missing, as the
/// behaviour before they existed, so saved cases replay as they ran:
/// growing the image file ahead (`engine.grow_ahead`) off, and no cost for
/// extending the disk (`disk.latency.extend`).
#[test]
fn fields_missing_from_older_cases_mean_the_old_behaviour() {
    let case = edited(|v| {
        v["engine"]["grow_ahead"] = 1_048_576u64.into();
        v["disk"]["latency"]["extend"] = 7u64.into();
    })
    .unwrap();
    assert_eq!(case.engine.grow_ahead, 1 << 20);
    assert_eq!(case.disk.latency.extend, 7);
    let old = edited(|v| {
        v["engine"].as_object_mut().unwrap().remove("grow_ahead");
        v["disk"]["latency"]
            .as_object_mut()
            .unwrap()
            .remove("extend");
    })
    .unwrap();
    assert_eq!(old.engine.grow_ahead, 0);
    assert_eq!(old.disk.latency.extend, 0);
    // New defaults are not the old behaviour: they must be written out.
    assert_ne!(engine::EngineOptions::default().grow_ahead, 0);
    assert_ne!(sim::disk::LatencyOptions::ssd().extend, 0);
    let text = Case::generate(3, Profile::Random).to_json();
    assert!(text.contains("\"grow_ahead\""), "{text}");
    assert!(text.contains("\"extend\""), "{text}");
}
