//! QEMU as a second oracle: the images a run exports (every post-crash
//! image, as the runner judged it, and the final image) are checked by
//! `qemu-img check`, which must count the same corruptions, leaks and
//! check errors as `oracle::check::check` on the same bytes, and read by
//! `qemu-img convert -O raw`, which must yield what the engine reads from
//! the same file (opened read-only on an in-memory device, with its
//! backing file and its external data file as exported with the image).

use std::path::{Path, PathBuf};
use std::process::Command;

use engine::dev::MemDev;
use engine::{Backing, EngineOptions, Image};
use serde_json::Value;
use sim::case::{BackingSpec, Case, DATA_FILE_NAME};
use sim::runner::{run_case, RunOptions};
use sim::workload::Profile;

/// Seeds of the default (mixed) profile whose images are compared; chosen
/// by measurement to keep the test under a minute on two cores.
const SEEDS: u64 = 200;

/// What `qemu-img check` and the project's checker must agree on.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    corruptions: u64,
    leaks: u64,
    check_errors: u64,
}

fn qemu_check(path: &Path) -> Counts {
    let out = Command::new("qemu-img")
        .args(["check", "--output", "json", "-f", "qcow2"])
        .arg(path)
        // QEMU finds a relative data file name in the working directory.
        .current_dir(path.parent().expect("in a directory"))
        .output()
        .expect("qemu-img runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "qemu-img check {}: no JSON ({e}): {text} {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let field = |name: &str| v.get(name).and_then(Value::as_u64).unwrap_or(0);
    Counts {
        corruptions: field("corruptions"),
        leaks: field("leaks"),
        check_errors: field("check-errors"),
    }
}

fn qemu_raw(path: &Path, out: &Path) -> Vec<u8> {
    let st = Command::new("qemu-img")
        .args(["convert", "-f", "qcow2", "-O", "raw"])
        .arg(path)
        .arg(out)
        .current_dir(path.parent().expect("in a directory"))
        .output()
        .expect("qemu-img runs");
    assert!(
        st.status.success(),
        "qemu-img convert {}: {}",
        path.display(),
        String::from_utf8_lossy(&st.stderr)
    );
    let bytes = std::fs::read(out).expect("converted file");
    std::fs::remove_file(out).expect("remove converted file");
    bytes
}

/// The whole virtual disk as the engine reads it from `bytes`, read-only,
/// with the case's backing file from `dir` and `data` as its data file.
fn engine_raw(bytes: Vec<u8>, data: Option<Vec<u8>>, case: &Case, dir: &Path) -> Vec<u8> {
    futures::executor::block_on(async {
        let ro = EngineOptions {
            read_only: true,
            ..Default::default()
        };
        let data = data.map(MemDev::from_bytes);
        let mut img = Image::open_with_data(MemDev::from_bytes(bytes), data, ro.clone())
            .await
            .expect("the engine opens its exported image read-only");
        if let Some(spec) = case.image.backing {
            let b = std::fs::read(dir.join(spec.file_name())).expect("exported backing file");
            let backing = match spec {
                BackingSpec::Raw { .. } => Backing::Raw(MemDev::from_bytes(b)),
                BackingSpec::Qcow2 { .. } => Backing::Qcow2(Box::new(
                    Image::open(MemDev::from_bytes(b), ro)
                        .await
                        .expect("backing image opens"),
                )),
            };
            img.attach_backing(backing);
        }
        let mut buf = vec![0u8; img.virtual_size() as usize];
        img.read(0, &mut buf).await.expect("engine reads the image");
        buf
    })
}

/// Compare every image exported for `case` under `dir`; returns how many.
fn compare_seed(case: &Case, dir: &Path) -> usize {
    let mut images: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "qcow2")
                && p.file_name().is_some_and(|n| n != "backing.qcow2")
        })
        .collect();
    images.sort();
    assert!(
        !images.is_empty(),
        "seed {}: nothing exported in {}",
        case.seed,
        dir.display()
    );
    for path in &images {
        let what = format!("seed {} {}", case.seed, path.display());
        let bytes = std::fs::read(path).expect("exported image");
        // The image's header names DATA_FILE_NAME: put the data file as it
        // was with this image there, for qemu-img.
        let data = case.image.data_file.map(|_| {
            let data = std::fs::read(path.with_extension("data")).expect("exported data file");
            std::fs::write(dir.join(DATA_FILE_NAME), &data).expect("data file for qemu-img");
            data
        });
        let ours = oracle::check::check(&bytes);
        // A checker that cannot open an image counts nothing in it.
        assert_eq!(ours.failure, None, "{what}: the checker opens the image");
        let ours = Counts {
            corruptions: ours.corruptions,
            leaks: ours.leaks,
            check_errors: ours.check_errors,
        };
        assert_eq!(qemu_check(path), ours, "{what}: qemu-img check vs checker");
        let theirs = qemu_raw(path, &dir.join("converted.raw"));
        let engine = engine_raw(bytes, data, case, dir);
        assert_eq!(theirs.len(), engine.len(), "{what}: virtual size");
        if let Some(i) = theirs.iter().zip(&engine).position(|(a, b)| a != b) {
            panic!(
                "{what}: qemu-img convert and the engine differ first at byte {i:#x} \
                 (sector {})",
                i / 512
            );
        }
    }
    images.len()
}

#[test]
fn qemu_agrees_on_exported_images() {
    let root = tempfile::tempdir().expect("temp dir");
    let jobs = 2u64;
    let (images, crashed): (usize, usize) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..jobs)
            .map(|j| {
                let root = root.path();
                s.spawn(move || {
                    let (mut images, mut crashed) = (0, 0);
                    for seed in (j..SEEDS).step_by(jobs as usize) {
                        let case = Case::generate(seed, Profile::Mixed);
                        let opts = RunOptions {
                            export: Some(root.to_path_buf()),
                        };
                        let report = run_case(&case, &opts);
                        crashed += report.stats.counts.crash_states_checked as usize;
                        let dir = root.join(format!("seed-{seed}"));
                        images += compare_seed(&case, &dir);
                        std::fs::remove_dir_all(&dir).expect("clean up");
                    }
                    (images, crashed)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("worker"))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    });
    println!("{images} images of {SEEDS} seeds ({crashed} crash states) compared with qemu-img");
    assert!(images as u64 > SEEDS, "every seed exports several images");
}
