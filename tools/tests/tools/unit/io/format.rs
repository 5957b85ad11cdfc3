//! The unit tests of `tools::io::format`.

use std::time::Duration;

use tools::io::{cvtstr, hexdump, timestr};

#[test]
fn sizes_print_as_qemu_io_prints_them() {
    assert_eq!(cvtstr(4096.0), "4 KiB");
    assert_eq!(cvtstr(1536.0), "1.500 KiB");
    assert_eq!(cvtstr(512.0), "512 bytes");
    assert_eq!(cvtstr(0.0), "0 bytes");
    assert_eq!(cvtstr(82.484588), "82.484588 bytes");
    assert_eq!(cvtstr(134217728.0), "128 MiB");
    assert_eq!(cvtstr(f64::INFINITY), "inf EiB");
    assert_eq!(timestr(Duration::from_millis(5), false), "00.01 sec");
    assert_eq!(timestr(Duration::from_millis(61_250), false), "0:01:01.25");
}

#[test]
fn hexdump_matches_qemu_io_layout() {
    let mut out = Vec::new();
    let mut data = vec![0xab; 16];
    data.extend_from_slice(b"Az0.");
    hexdump(&mut out, 0x20, &data).unwrap();
    let text = String::from_utf8(out).unwrap();
    let want = "00000020:  ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab ab  ................\n\
                    00000030:  41 7a 30 2e  Az0.\n";
    assert_eq!(text, want);
}
