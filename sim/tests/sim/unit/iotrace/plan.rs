//! The unit tests of `sim::iotrace::plan`.

use engine::CreateOptions;
use sim::case::{Op, MAX_OPS, MAX_VIRTUAL_SIZE};
use sim::iotrace::format::parse_str;
use sim::iotrace::plan::*;

fn plan(size: u64) -> TracePlan {
    TracePlan::new(
        7,
        CreateOptions {
            size,
            ..CreateOptions::default()
        },
    )
}

fn run(text: &str, p: &TracePlan) -> Result<TraceCase, PlanError> {
    plan_case(&parse_str(text).unwrap(), p)
}

#[test]
fn windows_flush_barriers_and_overlaps() {
    let mut p = plan(1 << 20);
    p.depth = 2;
    let tc = run(
        "w 0 4096\nw 4096 4096\nw 8192 4096\nf\nr 0 512\nr 0 512\nw 0 1\nd 0 4096\n",
        &p,
    )
    .unwrap();
    let w = |sector, sectors| Op::Write {
        sector,
        sectors,
        fua: false,
    };
    let r = |sector, sectors| Op::Read { sector, sectors };
    assert_eq!(
        tc.case.workload,
        vec![
            vec![w(0, 8), w(8, 8)],
            vec![w(16, 8)],
            vec![Op::Flush],
            vec![r(0, 1), r(0, 1)],
            vec![w(0, 1)],
            vec![Op::Discard {
                sector: 0,
                sectors: 8,
                fua: false,
            }],
        ]
    );
    assert_eq!(tc.lines[3], [5, 6]);
    assert_eq!(tc.stats.rounded, 1);
    assert_eq!(tc.group_lines(3), Some((5, 6)));
}

#[test]
fn long_requests_are_split_and_crashes_drawn() {
    let mut p = plan(8 << 20);
    p.crashes = 2;
    p.crash_after_flush = true;
    let tc = run("z 0 5242880\nf\nw 0 512\nf\n", &p).unwrap();
    assert_eq!(tc.stats.split, 1);
    let ops: usize = tc.case.workload.iter().map(Vec::len).sum();
    assert_eq!(ops as u64, tc.stats.ops);
    assert_eq!(tc.stats.crashes, 2);
    assert_eq!(tc.case.crashes() as u64, 2 + tc.stats.crashes_after_flush);
    // The same seed draws the same windows; the case is valid.
    assert_eq!(run("z 0 5242880\nf\nw 0 512\nf\n", &p).unwrap(), tc);
    tc.case.validate().unwrap();
}

#[test]
fn fua_requests_keep_their_flag_when_split_or_rounded() {
    let mut p = plan(8 << 20);
    p.depth = 4;
    // 5 MiB FUA write_zeroes: three operations, every one FUA; an
    // unaligned FUA write rounded out; a plain write stays plain.
    let tc = run(
        "z 0 5242880 fua\nw 6291457 100 fua\nw 7340032 512\nd 0 512 fua\n",
        &p,
    )
    .unwrap();
    let ops: Vec<&Op> = tc.case.workload.iter().flatten().collect();
    let fua: Vec<bool> = ops.iter().map(|o| o.is_fua()).collect();
    assert_eq!(fua, [true, true, true, true, false, true]);
    assert_eq!(
        *ops[3],
        Op::Write {
            sector: 12288,
            sectors: 1,
            fua: true
        }
    );
    assert_eq!((tc.stats.fua, tc.stats.fua_ops), (3, 5));
    assert_eq!((tc.stats.split, tc.stats.rounded), (1, 1));
    tc.case.validate().unwrap();
    // A trace without the word plans exactly as before: no FUA.
    let plain = run("z 0 5242880\nw 6291457 100\n", &p).unwrap();
    assert!(plain.case.workload.iter().flatten().all(|o| !o.is_fua()));
    assert_eq!((plain.stats.fua, plain.stats.fua_ops), (0, 0));
}

#[test]
fn limits_are_named() {
    let p = plan(1 << 20);
    let e = run("w 0 512\n\nw 1048064 1024\n", &p).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3: `w 1048064 1024` ends at byte 1049088, past the end of the 1048576-byte disk"
    );
    let e = run("f\n", &plan(MAX_VIRTUAL_SIZE * 2)).unwrap_err();
    assert!(e.to_string().contains("case::MAX_VIRTUAL_SIZE"), "{e}");
    let mut c = plan(1 << 20);
    c.crashes = 3;
    let e = run("w 0 512\nf\n", &c).unwrap_err();
    assert_eq!(
        e.to_string(),
        "3 crashes: the replay has only 2 windows of requests to crash in"
    );
    let many = "f\n".repeat(MAX_OPS + 1);
    let e = run(&many, &p).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("line {}: the trace needs more than", MAX_OPS + 1)),
        "{e}"
    );
    let mut d = plan(1 << 20);
    d.depth = 0;
    assert!(matches!(run("f\n", &d), Err(PlanError::Depth(0))));
    let mut b = plan(1 << 20);
    b.create.backing_file = Some("b.raw".into());
    assert!(matches!(run("f\n", &b), Err(PlanError::Image(_))));
}
