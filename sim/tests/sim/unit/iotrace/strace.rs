//! The unit tests of `sim::iotrace::strace`.

use sim::iotrace::format::to_text;
use sim::iotrace::strace::*;
use sim::iotrace::Import;

fn imp(text: &str) -> Import {
    import(text.as_bytes(), &StraceOptions::default()).unwrap()
}

#[test]
fn prefixes_and_timestamps() {
    assert_eq!(
        split_prefix("123 fsync(3) = 0"),
        (Some(123), "fsync(3) = 0")
    );
    assert_eq!(
        split_prefix("[pid  77] 10:00:01.123456 fsync(3) = 0"),
        (Some(77), "fsync(3) = 0")
    );
    assert_eq!(
        split_prefix("1700000000.123456 fsync(3) = 0"),
        (None, "fsync(3) = 0")
    );
    assert_eq!(split_prefix("fsync(3) = 0"), (None, "fsync(3) = 0"));
}

#[test]
fn calls_become_requests() {
    let t = imp(concat!(
            "pwrite64(3, \"ab, )\\\"c\"..., 4096, 8192) = 4096\n",
            "pwritev(3, [{iov_base=\"x\"..., iov_len=512}, {iov_base=\"y\", iov_len=1024}], 2, 0) = 1536\n",
            "pwritev2(3</img.raw>, [{iov_base=\"z\"..., iov_len=512}], 1, 4096, RWF_DSYNC) = 512 <0.000010>\n",
            "fallocate(3, FALLOC_FL_KEEP_SIZE|FALLOC_FL_PUNCH_HOLE, 0, 65536) = 0\n",
            "fallocate(3, FALLOC_FL_ZERO_RANGE, 65536, 512) = 0\n",
            "fallocate(3, 0, 0, 1048576) = 0\n",
            "fdatasync(3) = 0\n",
            "pwrite64(3, \"\"..., 512, 0) = -1 ENOSPC (No space left on device)\n",
            "pwrite64(3, \"ab\"..., 4096, 0) = 1024\n",
            "fsync(3)                = 0\n",
            "+++ exited with 0 +++\n",
        ));
    // pwritev2 with RWF_DSYNC: a FUA write, no flush after it.
    assert_eq!(
        to_text(&t.trace),
        "w 8192 4096\nw 0 1536\nw 4096 512 fua\nd 0 65536\nz 65536 512\nf\nw 0 1024\nf\n"
    );
    let lines: Vec<u64> = t.trace.entries.iter().map(|e| e.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 5, 7, 9, 10]);
    assert_eq!(t.trace.counts().fua, 1);
    assert_eq!(t.summary.skipped["failed calls"], 1);
    assert_eq!(
        t.summary.skipped["fallocate calls that only preallocate (no byte changes)"],
        1
    );
    assert_eq!(
        t.summary.notes["short pwrite64 calls (the bytes moved count)"],
        1
    );
}

#[test]
fn pwritev2_flags_make_that_call_alone_fua() {
    let t = imp(concat!(
        "pwritev2(3, [{iov_base=\"a\", iov_len=512}], 1, 0, RWF_SYNC) = 512\n",
        "pwritev2(3, [{iov_base=\"a\", iov_len=512}], 1, 512, RWF_HIPRI|RWF_DSYNC) = 512\n",
        "pwritev2(3, [{iov_base=\"a\", iov_len=512}], 1, 1024, 0) = 512\n",
        "pwritev2(3, [{iov_base=\"a\", iov_len=512}], 1, 1536, RWF_NOWAIT) = 512\n",
        // A read's flags make nothing durable.
        "preadv2(3, [{iov_base=\"a\", iov_len=512}], 1, 0, RWF_DSYNC) = 512\n",
    ));
    assert_eq!(
        to_text(&t.trace),
        "w 0 512 fua\nw 512 512 fua\nw 1024 512\nw 1536 512\nr 0 512\n"
    );
}

/// Import `text` keeping descriptor `fd`'s requests.
fn imp_fd(text: &str, fd: u64) -> Import {
    import(text.as_bytes(), &StraceOptions { fd: Some(fd) }).unwrap()
}

#[test]
fn writes_through_a_dsync_or_sync_descriptor_are_fua() {
    const OPENS: &str = concat!(
        "openat(AT_FDCWD, \"disk.raw\", O_RDWR|O_CREAT|O_DSYNC|O_CLOEXEC, 0644) = 3\n",
        "open(\"disk.raw\", O_WRONLY|O_SYNC) = 4</tmp/disk.raw>\n",
        "openat2(AT_FDCWD, \"disk.raw\", {flags=O_RDWR|O_DSYNC, resolve=0}, 24) = 5\n",
        "openat(AT_FDCWD, \"disk.raw\", O_RDWR) = 6\n",
        "creat(\"O_DSYNC\", 0644) = 7\n",
        "openat(AT_FDCWD, \"nope\", O_RDWR|O_DSYNC) = -1 ENOENT (No such file or directory)\n",
        "pwrite64(3, \"a\", 512, 0) = 512\n",
        "pwrite64(4, \"a\", 512, 512) = 512\n",
        "pwritev(5, [{iov_base=\"a\", iov_len=512}], 1, 1024) = 512\n",
        "pwrite64(6, \"a\", 512, 1536) = 512\n",
        "pwrite64(7, \"a\", 512, 2048) = 512\n",
        "pwrite64(8, \"a\", 512, 2560) = 512\n",
        // Reads and fallocate through a syncing descriptor: not FUA.
        "pread64(3, \"a\", 512, 0) = 512\n",
        "fallocate(3, FALLOC_FL_ZERO_RANGE, 0, 512) = 0\n",
        "fdatasync(3) = 0\n",
    );
    let t = imp_fd(OPENS, 3);
    assert_eq!(to_text(&t.trace), "w 0 512 fua\nr 0 512\nz 0 512\nf\n");
    // O_DSYNC, O_SYNC (also with -y's `4</path>`), openat2's flags;
    // plain, creat (a path spelled like a flag is not one), and a
    // descriptor whose open the recording lacks: not FUA.
    let got: Vec<bool> = (3..=8)
        .map(|fd| imp_fd(OPENS, fd).trace.requests().next().unwrap().is_fua())
        .collect();
    assert_eq!(got, [true, true, true, false, false, false]);
    assert_eq!(
        t.summary.notes["descriptors opened with O_DSYNC or O_SYNC (their writes are FUA)"],
        3
    );
    assert_eq!(t.trace.counts().fua, 1);
    assert_eq!(t.summary.skipped["failed openat calls"], 1);
}

#[test]
fn dup_and_fcntl_copy_the_flag_and_close_forgets_it() {
    const DUPS: &str = concat!(
        "openat(AT_FDCWD, \"disk.raw\", O_RDWR|O_DSYNC) = 3\n",
        "dup(3) = 4\n",
        "dup2(3, 10) = 10\n",
        "dup3(3, 11, O_CLOEXEC) = 11\n",
        "fcntl(3, F_DUPFD, 20) = 20\n",
        "fcntl(3, F_DUPFD_CLOEXEC, 0) = 21\n",
        // F_SETFL cannot take O_DSYNC off (nor put it on).
        "fcntl(3, F_SETFL, O_RDWR) = 0\n",
        "fcntl(3, F_GETFL) = 0x9002 (flags O_RDWR|O_LARGEFILE|O_DSYNC)\n",
        "pwrite64(4, \"a\", 512, 0) = 512\n",
        "pwrite64(10, \"a\", 512, 0) = 512\n",
        "pwrite64(11, \"a\", 512, 0) = 512\n",
        "pwrite64(20, \"a\", 512, 0) = 512\n",
        "pwrite64(21, \"a\", 512, 0) = 512\n",
        "pwrite64(3, \"a\", 512, 0) = 512\n",
        // Closed, then its number reused by a plain open: not FUA.
        "close(3) = 0\n",
        "openat(AT_FDCWD, \"disk.raw\", O_RDWR) = 3\n",
        "pwrite64(3, \"a\", 512, 4096) = 512\n",
        // dup2 over a syncing descriptor takes the new copy's flag.
        "dup2(3, 4) = 4\n",
        "pwrite64(4, \"a\", 512, 4096) = 512\n",
        // close_range forgets a range; with CLOSE_RANGE_CLOEXEC it
        // closes nothing yet.
        "close_range(10, 11, CLOSE_RANGE_CLOEXEC) = 0\n",
        "pwrite64(10, \"a\", 512, 8192) = 512\n",
        "close_range(10, 20, 0) = 0\n",
        "pwrite64(10, \"a\", 512, 8192) = 512\n",
        "pwrite64(20, \"a\", 512, 8192) = 512\n",
        "pwrite64(21, \"a\", 512, 8192) = 512\n",
    );
    let text = |fd| to_text(&imp_fd(DUPS, fd).trace);
    assert_eq!(text(3), "w 0 512 fua\nw 4096 512\n");
    assert_eq!(text(4), "w 0 512 fua\nw 4096 512\n");
    assert_eq!(text(10), "w 0 512 fua\nw 8192 512 fua\nw 8192 512\n");
    assert_eq!(text(11), "w 0 512 fua\n");
    assert_eq!(text(20), "w 0 512 fua\nw 8192 512\n");
    assert_eq!(text(21), "w 0 512 fua\nw 8192 512 fua\n");
    let t = imp_fd(DUPS, 3);
    assert_eq!(t.summary.skipped["fcntl calls other than F_DUPFD"], 2);
}

#[test]
fn bad_descriptor_calls_name_their_line() {
    let err = |t: &str| {
        import(t.as_bytes(), &StraceOptions::default())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("fsync(3) = 0\nopenat(AT_FDCWD, \"x\") = 3\n"),
        "line 2: openat with 2 arguments, expected 3 or 4"
    );
    assert_eq!(err("dup(x) = 4\n"), "line 1: dup file descriptor \"x\"");
    assert_eq!(
        err("openat(AT_FDCWD, \"x\", O_RDWR) = y\n"),
        "line 1: openat result \"y\" is not a file descriptor"
    );
    assert_eq!(
        err("close(3\n"),
        "line 1: close( without its closing parenthesis"
    );
}

#[test]
fn unfinished_calls_are_joined_by_process() {
    let t = imp(concat!(
        "[pid 10] pwrite64(3, \"a\"..., 4096, 0 <unfinished ...>\n",
        "[pid 11] pwrite64(3, \"b\"..., 512, 8192 <unfinished ...>\n",
        "[pid 11] <... pwrite64 resumed>) = 512\n",
        "[pid 10] <... pwrite64 resumed>) = 4096\n",
        "[pid 10] fsync(3strace: Process 14 attached\n",
        ")     = 0\n",
        "[pid 10] fsync(3 <unfinished ...>\n",
        "[pid 10] <... fsync resumed>)   = 0\n",
        "[pid 12] <... fsync resumed>)   = 0\n",
        "[pid 13] fsync(3 <unfinished ...>\n",
    ));
    assert_eq!(to_text(&t.trace), "w 8192 512\nw 0 4096\nf\nf\n");
    let lines: Vec<u64> = t.trace.entries.iter().map(|e| e.line).collect();
    assert_eq!(lines, [2, 1, 5, 7]);
    assert_eq!(
        t.summary.skipped["resumed calls whose start is not in the recording"],
        1
    );
    assert_eq!(
        t.summary.skipped["calls unfinished when the recording ends"],
        1
    );
}

#[test]
fn descriptors_must_be_chosen_when_several_are_written() {
    let text = "pwrite64(3, \"a\", 1, 0) = 1\npwrite64(4, \"b\", 1, 0) = 1\nfsync(4) = 0\n";
    let e = import(text.as_bytes(), &StraceOptions::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the recording writes through file descriptors 3, 4: choose the image file's with --fd"
    );
    let t = import(text.as_bytes(), &StraceOptions { fd: Some(4) }).unwrap();
    assert_eq!(to_text(&t.trace), "w 0 1\nf\n");
    // A flush of another file is not one of the image's.
    let t = imp("pwrite64(3, \"a\", 1, 0) = 1\nfsync(5) = 0\n");
    assert_eq!(to_text(&t.trace), "w 0 1\n");
}

#[test]
fn bad_calls_name_their_line() {
    let err = |t: &str| {
        import(t.as_bytes(), &StraceOptions::default())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err("fsync(3) = 0\npwrite64(3, \"a\", 1) = 1\n"),
        "line 2: pwrite64 with 3 arguments, expected 4"
    );
    assert_eq!(
        err("pwrite64(3, \"a\", 1, 0\n"),
        "line 1: pwrite64( without its closing parenthesis"
    );
    assert_eq!(
        err("pwrite64(3, \"a\", 1, x) = 1\n"),
        "line 1: pwrite64 offset \"x\" is not a number"
    );
    assert_eq!(
            err("fallocate(3, FALLOC_FL_COLLAPSE_RANGE, 0, 4096) = 0\n"),
            "line 1: fallocate mode FALLOC_FL_COLLAPSE_RANGE moves the file's data, which no block request does"
        );
    assert_eq!(
        err(&format!("pwrite64(3, \"a\", 1, {}) = 1\n", u64::MAX)),
        format!(
            "line 1: offset {} + length 1 ends past byte {}, the largest file offset",
            u64::MAX,
            i64::MAX
        )
    );
}
