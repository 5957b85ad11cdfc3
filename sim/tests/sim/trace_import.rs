//! Traces: the text format's round trip, and each importer on its real
//! fixture (`traces/`: strace recordings made on the development machine,
//! blkparse's default output written by hand; see `traces/README.md`).

use std::path::PathBuf;

use proptest::prelude::*;
use sim::iotrace::blkparse::{self, Action, BlkparseOptions};
use sim::iotrace::format::{self, parse_str, to_text};
use sim::iotrace::strace::{self, StraceOptions};
use sim::iotrace::{Import, Kind, Request, Trace, MAX_END, MAX_LENGTH};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sim/traces")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

fn strace_of(name: &str, fd: Option<u64>) -> Result<Import, sim::iotrace::TraceError> {
    strace::import(&read(name)[..], &StraceOptions { fd })
}

fn count(t: &Trace, kind: Kind) -> usize {
    t.requests().filter(|r| r.kind() == kind).count()
}

/// A trace survives being written and parsed back, comments and all.
fn round_trip(t: &Trace) {
    let requests: Vec<Request> = t.requests().collect();
    let mut text = Vec::new();
    format::write(
        &mut text,
        &["a header".into(), "of two\nlines".into()],
        &requests,
    )
    .unwrap();
    let back = format::parse(&text[..]).unwrap();
    assert_eq!(back.requests().collect::<Vec<_>>(), requests);
    // The requests start after the three header lines.
    assert!(back.entries.first().is_none_or(|e| e.line == 4));
}

#[test]
fn mke2fs_recording_imports() {
    let t = strace_of("mke2fs.strace", None).unwrap();
    let tr = &t.trace;
    // mke2fs -E discard: the whole 16 MiB file discarded first (after a
    // 1 KiB probe), then its tables zeroed and written, and fsync.
    assert_eq!(
        &tr.requests().take(4).collect::<Vec<_>>()[2..],
        [
            Request::Discard {
                offset: 0,
                length: 1024,
                fua: false
            },
            Request::Discard {
                offset: 0,
                length: 16 << 20,
                fua: false
            }
        ]
    );
    assert_eq!(count(tr, Kind::Flush), 4);
    assert_eq!(count(tr, Kind::Discard), 2);
    assert_eq!(count(tr, Kind::WriteZeroes), 3);
    assert_eq!(count(tr, Kind::Write), 156);
    assert_eq!(tr.end(), 16 << 20);
    // Lines name the recording's lines: the first request is on line 1.
    assert_eq!(tr.entries[0].line, 1);
    assert_eq!(t.summary.lines, 166);
    assert_eq!(t.summary.skipped["lines about processes and signals"], 1);
    round_trip(tr);
}

#[test]
fn threaded_writer_recording_imports() {
    // It also writes a second file: the descriptor must be chosen.
    let e = strace_of("writer.strace", None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the recording writes through file descriptors 3, 4: choose the image file's with --fd"
    );
    let t = strace_of("writer.strace", Some(3)).unwrap();
    let tr = &t.trace;
    // The first calls, in one thread: pwrite64, then pwritev2 (an iovec
    // of 4096 + 512 bytes), then pwritev2 with RWF_DSYNC, a FUA write
    // (until FUA was carried, a write then a flush), then fdatasync.
    let w = |offset, length| Request::Write {
        offset,
        length,
        fua: false,
    };
    assert_eq!(
        tr.requests().take(4).collect::<Vec<_>>(),
        [
            w(0, 4096),
            w(8192, 4608),
            w(65536, 1024).with_fua(true),
            Request::Flush,
        ]
    );
    // The recording has no descriptor calls (they were not traced): only
    // the RWF_DSYNC write is FUA.
    assert_eq!(tr.counts().fua, 1);
    // Two threads, 40 writes of 4 KiB each, joined from their
    // unfinished/resumed halves, in whatever order they completed.
    let mut thread_writes: Vec<u64> = tr
        .requests()
        .filter_map(|r| match r {
            Request::Write {
                offset,
                length: 4096,
                fua: false,
            } if (1 << 20..3 << 20).contains(&offset) => Some(offset),
            _ => None,
        })
        .collect();
    thread_writes.sort_unstable();
    let want: Vec<u64> = [1u64 << 20, 2 << 20]
        .iter()
        .flat_map(|&base| (0..40).map(move |i| base + i * 4096))
        .collect();
    assert_eq!(thread_writes, want);
    // Then pwritev of 2 x 2048 bytes, a punched hole, a zeroed range, and
    // fsync, in that order.
    let tail: Vec<Request> = tr.requests().skip(tr.entries.len() - 4).collect();
    assert_eq!(
        tail,
        [
            w(3 << 20, 4096),
            Request::Discard {
                offset: 1 << 20,
                length: 8192,
                fua: false
            },
            Request::WriteZeroes {
                offset: 2 << 20,
                length: 4096,
                fua: false
            },
            Request::Flush
        ]
    );
    // fdatasync, 8 fsyncs in the threads and the final two (12 while
    // RWF_DSYNC was read as a flush after its write).
    assert_eq!(count(tr, Kind::Flush), 11);
    let s = &t.summary;
    assert_eq!(s.skipped["failed calls"], 1);
    assert_eq!(s.skipped["calls on other file descriptors"], 1);
    assert_eq!(
        s.skipped["fallocate calls that only preallocate (no byte changes)"],
        1
    );
    assert!(s.skipped["lines about processes and signals"] >= 1);
    round_trip(tr);
}

#[test]
fn dsync_writer_recording_imports_its_fua_writes() {
    // scripts/dsync-writer.py: one descriptor (3), opened O_DSYNC, then
    // plain, then O_SYNC by dup2; the script's comment says what it
    // writes through each, which this reads back from the recording.
    let t = strace_of("dsync-writer.strace", None).unwrap();
    let tr = &t.trace;
    let writes: Vec<Request> = tr.requests().filter(|r| r.kind() == Kind::Write).collect();
    let fua: Vec<bool> = writes.iter().map(Request::is_fua).collect();
    // O_DSYNC: 8 pwrite64 and a pwritev (glibc sends it as pwritev2
    // with no flag); plain: 4 pwrite64, RWF_DSYNC, a plain pwritev; O_SYNC
    // through the dup2'd copy: 2 pwrite64.
    let want: Vec<bool> = [
        vec![true; 9],
        vec![false; 4],
        vec![true, false],
        vec![true; 2],
    ]
    .concat();
    assert_eq!(fua, want);
    assert_eq!(tr.counts().fua, 12);
    assert_eq!(count(tr, Kind::Flush), 2);
    assert_eq!(tr.entries.len(), 19);
    // What the program wrote where: the RWF_DSYNC write is the only one of
    // 8 KiB at 3 MiB.
    assert_eq!(
        writes[13],
        Request::Write {
            offset: 3 << 20,
            length: 8192,
            fua: true
        }
    );
    assert_eq!(
        t.summary.notes["descriptors opened with O_DSYNC or O_SYNC (their writes are FUA)"],
        2
    );
    round_trip(tr);
}

#[test]
fn blkparse_output_imports() {
    let input = read("ext4-commit.blkparse");
    let q = blkparse::import(&input[..], &BlkparseOptions::default()).unwrap();
    let w = |offset, length| Request::Write {
        offset,
        length,
        fua: false,
    };
    let f = Request::Flush;
    assert_eq!(
        q.trace.requests().collect::<Vec<_>>(),
        [
            w(2048 * 512, 4096),
            w(2056 * 512, 4096),
            w(2064 * 512, 8192),
            // Q FWFS: a preflush, then the commit block, FUA (until FUA
            // was carried: a flush after it too, 13 requests, 4 flushes).
            f,
            w(2080 * 512, 4096).with_fua(true),
            Request::Read {
                offset: 24576 * 512,
                length: 4096
            },
            w(10240 * 512, 256 * 512),
            w(10496 * 512, 256 * 512),
            Request::Discard {
                offset: 16384 * 512,
                length: 4096 * 512,
                fua: false
            },
            // Q FWS without data: a flush.
            f,
            w(12288 * 512, 4096),
        ]
    );
    assert_eq!(q.trace.entries[0].line, 1);
    assert_eq!(q.trace.entries[3].line, 12);
    assert_eq!(q.trace.entries[4].line, 12);
    assert_eq!((count(&q.trace, Kind::Flush), q.trace.counts().fua), (2, 1));
    // Completions: merged requests, and the one that failed left out.
    let c = blkparse::import(
        &input[..],
        &BlkparseOptions {
            action: Action::Completed,
            device: None,
        },
    )
    .unwrap();
    assert_eq!(count(&c.trace, Kind::Write), 3);
    assert_eq!(c.summary.skipped["completions with an error"], 1);
    // `C WFS`: the commit block completed FUA.
    assert_eq!(c.trace.counts().fua, 1);
    assert_eq!(c.trace.requests().next(), Some(w(2048 * 512, 32 * 512)));
    round_trip(&q.trace);
    round_trip(&c.trace);
}

fn request() -> impl Strategy<Value = Request> {
    let range = (0..MAX_END, 1..=MAX_LENGTH).prop_map(|(o, l)| (o.min(MAX_END - l), l));
    let fua = any::<bool>();
    prop_oneof![
        (range.clone(), fua).prop_map(|((offset, length), fua)| Request::Write {
            offset,
            length,
            fua
        }),
        range
            .clone()
            .prop_map(|(offset, length)| Request::Read { offset, length }),
        (range.clone(), fua).prop_map(|((offset, length), fua)| Request::WriteZeroes {
            offset,
            length,
            fua
        }),
        (range, fua).prop_map(|((offset, length), fua)| Request::Discard {
            offset,
            length,
            fua
        }),
        Just(Request::Flush),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any valid trace reads back as written.
    #[test]
    fn traces_round_trip(requests in proptest::collection::vec(request(), 0..64)) {
        let mut t = Trace::default();
        for (i, r) in requests.iter().enumerate() {
            t.push(i as u64 + 1, *r).unwrap();
        }
        let back = parse_str(&to_text(&t)).unwrap();
        prop_assert_eq!(back, t);
    }

    /// No input makes the parser or an importer panic: each answers a
    /// trace or an error.
    #[test]
    fn junk_never_panics(text in "([wrzdf#0-9 \t\n(),=\"\\[\\]{}<>.:|+-]|pwrite64\\(|<\\.\\.\\. |iov_len=| resumed>|<unfinished \\.\\.\\.>|8,0 1 2 0.5 7 Q ){0,80}") {
        let _ = parse_str(&text);
        let _ = strace::import(text.as_bytes(), &StraceOptions::default());
        let _ = blkparse::import(text.as_bytes(), &BlkparseOptions::default());
    }
}
