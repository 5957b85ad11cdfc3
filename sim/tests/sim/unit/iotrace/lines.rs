//! The unit tests of `sim::iotrace::lines`.

use sim::iotrace::lines::*;
use sim::iotrace::TraceError;

fn collect(input: &[u8], max: usize) -> Result<Vec<(u64, String)>, TraceError> {
    let mut out = Vec::new();
    for_each_line(input, max, false, |n, s| {
        out.push((n, s.to_string()));
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn lines_are_numbered_and_stripped() {
    let got = collect(b"a\r\nb\n\nc", 8).unwrap();
    let want: Vec<(u64, String)> = [(1, "a"), (2, "b"), (3, ""), (4, "c")]
        .iter()
        .map(|&(n, s)| (n, s.to_string()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_long_line_is_refused_by_number() {
    let e = collect(b"ok\n0123456789\n", 8).unwrap_err();
    assert_eq!(e.to_string(), "line 2: longer than 8 bytes");
    // Exactly the bound is fine, with or without a line end.
    assert!(collect(b"01234567\n01234567", 8).is_ok());
    assert!(collect(b"01234567\r\n", 8).is_ok());
}

#[test]
fn bytes_that_are_not_utf8_are_refused_unless_lossy() {
    let e = collect(b"w 0 1\n\xff\n", 8).unwrap_err();
    assert_eq!(e.to_string(), "line 2: not UTF-8 text");
    let mut seen = Vec::new();
    for_each_line(&b"\xffx"[..], 8, true, |_, s| {
        seen.push(s.to_string());
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, ["\u{fffd}x"]);
}
