//! The unit tests of `tools::bench`.

use tools::bench::*;

#[test]
fn offsets_wrap_before_the_end_like_qemu_img() {
    let o = FileBenchOptions {
        buffer_size: 4096,
        ..FileBenchOptions::default()
    };
    assert_eq!(o.effective_step(), 4096);
    assert_eq!(o.next_offset(0, 1 << 20), 4096);
    // The last offset that fits is never reached exactly: qemu-img
    // wraps modulo (size - buffer size).
    assert_eq!(o.next_offset((1 << 20) - 8192, 1 << 20), 0);
    assert_eq!(o.next_offset(0, 4096), 0);
    let o = FileBenchOptions { step: 7, ..o };
    assert_eq!(o.next_offset(100, 1 << 20), 107);
}

#[test]
fn header_matches_qemu_img() {
    let o = FileBenchOptions {
        count: 10,
        depth: 8,
        write: true,
        offset: 65536,
        ..FileBenchOptions::default()
    };
    assert_eq!(
            o.header_line(),
            "Sending 10 write requests, 4096 bytes each, 8 in parallel (starting at offset 65536, step size 4096)"
        );
}

#[test]
fn validation_names_the_flag() {
    let ok = FileBenchOptions::default();
    ok.validate().unwrap();
    for (bad, words) in [
        (
            FileBenchOptions {
                count: 0,
                ..ok.clone()
            },
            "request count",
        ),
        (
            FileBenchOptions {
                depth: 0,
                ..ok.clone()
            },
            "queue depth",
        ),
        (
            FileBenchOptions {
                buffer_size: 0,
                ..ok.clone()
            },
            "buffer size",
        ),
        (
            FileBenchOptions {
                flush_interval: 5,
                ..ok.clone()
            },
            "only available in write",
        ),
        (
            FileBenchOptions {
                depth: 1 << 20,
                buffer_size: 1 << 20,
                ..ok.clone()
            },
            "limit",
        ),
        (
            FileBenchOptions {
                write: true,
                buffer_size: (1 << 30) + 1,
                ..ok.clone()
            },
            "limit",
        ),
    ] {
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains(words), "{e}");
    }
}
