//! Cases with an external data file: generated ones (raw, not raw, over a
//! backing file) run and pass with the data file on its own crashing disk,
//! replay bit for bit, and export the data file beside each image; case
//! validation refuses what the engine's create refuses; enumeration
//! refuses them with a clear error.

use sim::case::{BackingSpec, Case, CaseError, DataFileSpec, DATA_FILE_NAME};
use sim::runner::{
    enumerate_crash_states, run_case, EnumerateError, EnumerateOptions, Granularity, RunOptions,
};
use sim::workload::Profile;

/// The first seed from `from` whose `profile` case has a data file that
/// `want` accepts.
fn find(profile: Profile, from: u64, want: impl Fn(&Case) -> bool) -> Case {
    (from..from + 400)
        .map(|seed| Case::generate(seed, profile))
        .find(|c| c.image.data_file.is_some() && want(c))
        .unwrap_or_else(|| panic!("no {profile} seed from {from} draws such a data file"))
}

#[test]
fn generation_draws_data_files_for_some_v3_cases() {
    let cases: Vec<Case> = (0..300)
        .map(|s| Case::generate(s, Profile::Mixed))
        .collect();
    let v3 = cases
        .iter()
        .filter(|c| c.image.create.compat == engine::Compat::V3)
        .count();
    let with = cases.iter().filter(|c| c.image.data_file.is_some()).count();
    let raw = cases
        .iter()
        .filter(|c| c.image.data_file == Some(DataFileSpec { raw: true }))
        .count();
    assert!(
        with * 100 >= v3 * 10 && with * 100 <= v3 * 30,
        "{with} data files in {v3} v3 cases"
    );
    assert!(raw > 0 && raw < with, "{raw} raw of {with}");
    for c in &cases {
        c.validate().unwrap();
        let co = &c.image.create;
        match c.image.data_file {
            None => assert!(co.data_file.is_none() && !co.data_file_raw),
            Some(spec) => {
                assert_eq!(co.data_file.as_deref(), Some(DATA_FILE_NAME));
                assert_eq!(co.data_file_raw, spec.raw);
                assert!(!(spec.raw && c.image.backing.is_some()));
            }
        }
    }
}

#[test]
fn generated_data_file_cases_run_and_pass() {
    let cases = [
        find(Profile::Mixed, 0, |c| c.image.data_file.unwrap().raw),
        find(Profile::Mixed, 0, |c| !c.image.data_file.unwrap().raw),
        find(Profile::Backing, 0, |_| true),
        find(Profile::Random, 0, |c| c.disk.faults.enabled),
    ];
    let root = tempfile::tempdir().unwrap();
    for case in &cases {
        let what = case.summary();
        let opts = RunOptions {
            export: Some(root.path().to_path_buf()),
        };
        let report = run_case(case, &opts);
        assert!(report.passed(), "{what}: {:#?}", report.failures);
        assert!(
            report.stats.counts.crash_states_checked > 0,
            "{what}: no crash"
        );
        assert!(
            report.stats.counts.read_sectors_checked > 0,
            "{what}: no read"
        );
        // The data file was exported with each image, and guest data went
        // there: the final data file holds non-zero bytes.
        let dir = root.path().join(format!("seed-{}", case.seed));
        let data = std::fs::read(dir.join("final.data"))
            .or_else(|_| std::fs::read(dir.join(format!("crash-{}.data", case.crashes()))))
            .unwrap_or_else(|e| panic!("{what}: no exported data file: {e}"));
        assert!(data.iter().any(|&b| b != 0), "{what}: empty data file");
        // Bit for bit again.
        let again = run_case(case, &RunOptions::default());
        assert_eq!(again.trace_hash, report.trace_hash, "{what}");
        let json = case.to_json();
        assert!(json.contains("\"data_file\""), "{what}");
        assert_eq!(&Case::from_json(&json).unwrap(), case, "{what}");
    }
}

#[test]
fn validation_refuses_impossible_data_files() {
    let base = find(Profile::Random, 0, |c| c.image.backing.is_none());
    let refused = |c: &Case| match c.validate() {
        Err(CaseError::DataFile(m)) => m,
        other => panic!("not refused for its data file: {other:?}"),
    };

    let mut v2 = base.clone();
    v2.image.create.compat = engine::Compat::V2;
    v2.image.create.refcount_bits = 16;
    v2.image.create.lazy_refcounts = false;
    v2.image.create.extended_l2 = false;
    assert!(refused(&v2).contains("compat 1.1"));

    let mut raw_backing = base.clone();
    let data = oracle::data::BackingData {
        sectors: 8,
        pattern: oracle::data::BackingPattern::Full,
    };
    let spec = BackingSpec::Raw { data };
    raw_backing.image.backing = Some(spec);
    raw_backing.image.create.backing_file = Some(spec.file_name().into());
    raw_backing.image.create.backing_format = Some(spec.format_name().into());
    raw_backing.image = raw_backing.image.with_data_file(DataFileSpec { raw: true });
    assert!(refused(&raw_backing).contains("backing"));

    let mut header_only = base.clone();
    header_only.image.data_file = None;
    assert!(refused(&header_only).contains("describes none"));

    let mut mismatched = base.clone();
    mismatched.image.create.data_file_raw = !mismatched.image.data_file.unwrap().raw;
    assert!(refused(&mismatched).contains(DATA_FILE_NAME));

    let mut unnamed = base;
    unnamed.image.create.data_file = None;
    unnamed.image.create.data_file_raw = false;
    assert!(refused(&unnamed).contains(DATA_FILE_NAME));
}

#[test]
fn enumerate_refuses_data_file_cases() {
    let case = find(Profile::Random, 0, |_| true);
    let opts = EnumerateOptions {
        granularity: Granularity::Auto,
        cap: 4,
    };
    let err = enumerate_crash_states(&case, &opts).unwrap_err();
    assert!(matches!(err, EnumerateError::DataFile), "{err}");
    assert!(err.to_string().contains("external data file"));
}
