//! The unit tests of `sim::iotrace::format`.

use sim::iotrace::format::*;
use sim::iotrace::{Request, MAX_END, MAX_LENGTH};

fn err(text: &str) -> String {
    parse_str(text).unwrap_err().to_string()
}

#[test]
fn every_request_kind_comments_and_blank_lines() {
    let t = parse_str(
        "# a header\n\nw 0 4096\n  r\t512 512  # trailing comment\nz 8192 1\nd 1 2\nf\nf # done\n",
    )
    .unwrap();
    let got: Vec<(u64, Request)> = t.entries.iter().map(|e| (e.line, e.request)).collect();
    assert_eq!(
        got,
        [
            (
                3,
                Request::Write {
                    offset: 0,
                    length: 4096,
                    fua: false
                }
            ),
            (
                4,
                Request::Read {
                    offset: 512,
                    length: 512
                }
            ),
            (
                5,
                Request::WriteZeroes {
                    offset: 8192,
                    length: 1,
                    fua: false
                }
            ),
            (
                6,
                Request::Discard {
                    offset: 1,
                    length: 2,
                    fua: false
                }
            ),
            (7, Request::Flush),
            (8, Request::Flush),
        ]
    );
    assert_eq!(to_text(&t), "w 0 4096\nr 512 512\nz 8192 1\nd 1 2\nf\nf\n");
}

#[test]
fn errors_name_the_line_and_the_problem() {
    assert_eq!(
        err("w 0 1\nx 0 1\n"),
        "line 2: unknown request \"x\": expected w, r, z, d or f"
    );
    assert_eq!(
        err("\n\nw 0\n"),
        "line 3: write needs an offset and a length: `w OFFSET LENGTH`"
    );
    assert_eq!(
        err("d\n"),
        "line 1: discard needs an offset and a length: `d OFFSET LENGTH`"
    );
    assert_eq!(
        err("w -1 5\n"),
        "line 1: offset \"-1\" is not a decimal number below 2^64"
    );
    assert_eq!(
        err("w 0 0x10\n"),
        "line 1: length \"0x10\" is not a decimal number below 2^64"
    );
    assert_eq!(
        err("w 0 99999999999999999999\n"),
        "line 1: length \"99999999999999999999\" is not a decimal number below 2^64"
    );
    assert_eq!(
        err("f 0\n"),
        "line 1: unexpected \"0\" after the request (a comment starts with #)"
    );
    assert_eq!(
        err("w 0 1 2\n"),
        "line 1: unexpected \"2\" after the request (a comment starts with #)"
    );
    assert_eq!(
        err("z 4096 0\n"),
        "line 1: length 0: a request covers at least one byte"
    );
    assert_eq!(
        err(&format!("w 0 {}\n", MAX_LENGTH + 1)),
        format!(
            "line 1: length {} is more than the {MAX_LENGTH} bytes one request may cover",
            MAX_LENGTH + 1
        )
    );
    assert_eq!(
        err(&format!("w {} 2\n", u64::MAX - 1)),
        format!(
            "line 1: offset {} + length 2 ends past byte {MAX_END}, the largest file offset",
            u64::MAX - 1
        )
    );
    assert_eq!(
        err(&format!("w {MAX_END} 1\n")),
        format!(
            "line 1: offset {MAX_END} + length 1 ends past byte {MAX_END}, the largest file offset"
        )
    );
    assert!(parse_str(&format!("w {} 1\n", MAX_END - 1)).is_ok());
    let long = format!("w 0 1 #{}\n", "x".repeat(MAX_LINE));
    assert_eq!(err(&long), format!("line 1: longer than {MAX_LINE} bytes"));
}

#[test]
fn fua_is_a_last_word_of_writes_zeroes_and_discards() {
    let t = parse_str("w 0 4096 fua\nz 4096 512\tfua # durable\nd 0 1 fua\nw 0 1\n").unwrap();
    let fua: Vec<bool> = t.requests().map(|r| r.is_fua()).collect();
    assert_eq!(fua, [true, true, true, false]);
    assert_eq!(
        t.entries[0].request,
        Request::Write {
            offset: 0,
            length: 4096,
            fua: true
        }
    );
    // The writer prints it where the parser reads it.
    assert_eq!(
        to_text(&t),
        "w 0 4096 fua\nz 4096 512 fua\nd 0 1 fua\nw 0 1\n"
    );
    assert_eq!(t.counts().fua, 3);
}

#[test]
fn fua_is_refused_where_it_means_nothing_or_is_misplaced() {
    assert_eq!(
        err("w 0 1\nr 0 4096 fua\n"),
        "line 2: a read cannot be FUA: only w, z and d take `fua`"
    );
    assert_eq!(
        err("f fua\n"),
        "line 1: a flush cannot be FUA: only w, z and d take `fua`"
    );
    // Only as the last word, spelled as written, once.
    assert_eq!(
        err("w fua 0 1\n"),
        "line 1: offset \"fua\" is not a decimal number below 2^64"
    );
    assert_eq!(
        err("w 0 1 FUA\n"),
        "line 1: unexpected \"FUA\" after the request (a comment starts with #)"
    );
    assert_eq!(
        err("w 0 1 fua fua\n"),
        "line 1: unexpected \"fua\" after the request (a comment starts with #)"
    );
    assert_eq!(
        err("z 0 0 fua\n"),
        "line 1: length 0: a request covers at least one byte"
    );
}

#[test]
fn errors_carry_their_line() {
    let e = parse_str("f\nw\n").unwrap_err();
    assert_eq!(e.line(), Some(2));
}
