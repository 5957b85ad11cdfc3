//! The unit tests of `sim::iotrace::blkparse`.

use sim::iotrace::blkparse::*;
use sim::iotrace::format::to_text;
use sim::iotrace::{Import, TraceError};

fn imp(text: &str, action: Action) -> Result<Import, TraceError> {
    import(
        text.as_bytes(),
        &BlkparseOptions {
            action,
            device: None,
        },
    )
}

const SAMPLE: &str = "\
  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]
  8,0    3        2     0.000001829   697  G   W 223490 + 8 [kjournald]
  8,0    3        3     0.000002197   697  Q  WS 223498 + 16 [kjournald]
  8,0    3        4     0.000005533   697  Q   R 0 + 8 [cat]
  8,0    3        5     0.000010000   697  Q   D 4096 + 2048 [fstrim]
  8,0    3        6     0.000020000   697  Q FWS [kjournald]
  8,0    3        7     0.000030000   697  Q WFS 100 + 1 [kjournald]
  8,0    3        8     0.000040000   697  Q  FN [kworker/3:1]
  8,0    1        9     0.009026214     0  C   W 223490 + 8 [0]
  8,0    1       10     0.009026214     0  C   W 223498 + 16 (  123) [-5]
  8,0    3        0     0.000050000     0  m   N cfq697 insert_request
CPU3 (8,0):
 Reads Queued:           1,        4KiB  Writes Queued:           3,       12KiB
Total (8,0):
Throughput (R/W): 0KiB/s / 8,495KiB/s
Events (8,0): 11 entries
";

#[test]
fn queued_events_become_requests() {
    let t = imp(SAMPLE, Action::Queued).unwrap();
    // `WFS` is a FUA write, no longer a write and a flush.
    assert_eq!(
        to_text(&t.trace),
        "w 114426880 4096\nw 114430976 8192\nr 0 4096\nd 2097152 1048576\nf\nw 51200 512 fua\nf\n"
    );
    let lines: Vec<u64> = t.trace.entries.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 3, 4, 5, 6, 7, 8]);
    assert_eq!(t.trace.counts().fua, 1);
    assert_eq!(t.summary.skipped["events of other actions than Q"], 4);
}

#[test]
fn preflush_fua_and_barriers() {
    let rec = "\
8,0 0 1 0.1 1 Q FWFS 8 + 8 [jbd2]
8,0 0 2 0.2 1 Q FWS 16 + 8 [jbd2]
8,0 0 3 0.3 1 Q WFSM 24 + 8 [xfs]
8,0 0 4 0.4 1 Q DF 32 + 8 [fstrim]
8,0 0 5 0.5 1 Q RF 40 + 8 [dd]
8,0 0 6 0.6 1 Q WBS 48 + 8 [old]
8,0 0 7 0.7 1 Q FWFS [jbd2]
";
    let t = imp(rec, Action::Queued).unwrap();
    // Preflush + FUA: a flush, then the FUA write; preflush alone: a
    // flush before a plain write; FUA in any place after the letter;
    // a FUA discard; a read's FUA dropped; a barrier between flushes;
    // a preflush + FUA without data: a flush.
    assert_eq!(
        to_text(&t.trace),
        "f\nw 4096 4096 fua\nf\nw 8192 4096\nw 12288 4096 fua\nd 16384 4096 fua\n\
             r 20480 4096\nf\nw 24576 4096\nf\nf\n"
    );
    assert_eq!(t.trace.counts().fua, 3);
    assert_eq!(
        t.summary.notes["FUA flags on reads dropped (a read makes nothing durable)"],
        1
    );
    assert_eq!(
        t.summary.notes["barrier requests (B) followed by a flush"],
        1
    );
}

#[test]
fn completed_events_without_error() {
    let t = imp(SAMPLE, Action::Completed).unwrap();
    assert_eq!(to_text(&t.trace), "w 114426880 4096\n");
    assert_eq!(t.summary.skipped["completions with an error"], 1);
}

#[test]
fn several_devices_must_be_chosen_and_errors_name_lines() {
    let two = "8,0 0 1 0.1 1 Q W 0 + 8 [a]\n8,16 0 2 0.2 1 Q W 8 + 8 [a]\n";
    assert_eq!(
        imp(two, Action::Queued).unwrap_err().to_string(),
        "the recording holds events of devices 8,0, 8,16: choose one with --device MAJ,MIN"
    );
    let t = import(
        two.as_bytes(),
        &BlkparseOptions {
            action: Action::Queued,
            device: Some((8, 16)),
        },
    )
    .unwrap();
    assert_eq!(to_text(&t.trace), "w 4096 4096\n");
    assert_eq!(
        imp("8,0 0 1 0.1 1 Q W 0 + x [a]\n", Action::Queued)
            .unwrap_err()
            .to_string(),
        "line 1: sector count \"x\" is not a number"
    );
    assert_eq!(
        imp("\n8,0 0 1 0.1 1 Q W 0 + 8\n", Action::Queued)
            .unwrap_err()
            .to_string(),
        "line 2: expected `SECTOR + SECTORS [...]` or `[...]` after \"W\""
    );
    assert_eq!(
        imp("8,0 0 1 0.1 1 Q X 0 + 8 [a]\n", Action::Queued)
            .unwrap_err()
            .to_string(),
        "line 1: RWBS \"X\" names no operation"
    );
    assert_eq!(
        imp(
            &format!("8,0 0 1 0.1 1 Q W {} + 8 [a]\n", u64::MAX),
            Action::Queued
        )
        .unwrap_err()
        .to_string(),
        format!(
            "line 1: sector {} is past the largest byte offset",
            u64::MAX
        )
    );
}
