//! The unit tests of `tools::io::parse`.

use tools::io::{parse_command, Cmd, PatternCheck, ReadCmd, Report, WriteCmd, WriteData};

fn parse(line: &str) -> Cmd {
    parse_command(line).unwrap().unwrap()
}

fn parse_err(line: &str) -> String {
    parse_command(line).unwrap_err().to_string()
}

#[test]
fn commands_parse_with_qemu_io_flags() {
    assert_eq!(
        parse("read -P 0xab 0 64k"),
        Cmd::Read(ReadCmd {
            op: "read",
            offset: 0,
            lens: vec![65536],
            pattern: Some(PatternCheck {
                byte: 0xab,
                offset: 0,
                len: None
            }),
            verbose: false,
            report: Report::default(),
            vmstate: false,
        })
    );
    assert_eq!(
        parse("read -vP171 -s 1 -l 2 1M 512"),
        Cmd::Read(ReadCmd {
            op: "read",
            offset: 1 << 20,
            lens: vec![512],
            pattern: Some(PatternCheck {
                byte: 171,
                offset: 1,
                len: Some(2)
            }),
            verbose: true,
            report: Report::default(),
            vmstate: false,
        })
    );
    assert!(matches!(
        parse("read -b 0 512"),
        Cmd::Read(ReadCmd { vmstate: true, .. })
    ));
    assert!(matches!(
        parse("write -b -P 1 1T 4k"),
        Cmd::Write(WriteCmd { vmstate: true, .. })
    ));
    assert_eq!(
        parse("write -q 512 1k"),
        Cmd::Write(WriteCmd {
            op: "write",
            offset: 512,
            lens: vec![1024],
            data: WriteData::Pattern(0xcd),
            fua: false,
            report: Report {
                quiet: true,
                csv: false
            },
            vmstate: false,
        })
    );
    assert_eq!(
        parse("writev -P 3 0 512 1k"),
        Cmd::Write(WriteCmd {
            op: "writev",
            offset: 0,
            lens: vec![512, 1024],
            data: WriteData::Pattern(3),
            fua: false,
            report: Report::default(),
            vmstate: false,
        })
    );
    assert_eq!(parse("write -zu 0 1M"), parse("write -z -u 0 1M"));
    assert_eq!(
        parse("alloc 4k"),
        Cmd::Alloc {
            offset: 4096,
            count: 512
        }
    );
    assert_eq!(parse("flush"), Cmd::Flush);
    assert_eq!(parse("aio_flush"), Cmd::AioFlush);
    assert_eq!(parse(" q "), Cmd::Quit);
    assert_eq!(parse("sigraise 9"), Cmd::Sigraise(9));
    assert_eq!(parse_command("   ").unwrap(), None);
}

/// `write -c` is a compressed write of the pattern; with `-z` qemu-io
/// zeroes (it does not look at -c then); `-f` with it is refused and
/// writev and aio_write have no -c, as in qemu-io.
#[test]
fn write_c_is_a_compressed_write() {
    let compressed = |line: &str| match parse(line) {
        Cmd::Write(WriteCmd { data, .. }) => data,
        other => panic!("{line}: {other:?}"),
    };
    assert_eq!(compressed("write -c 0 64k"), WriteData::Compressed(0xcd));
    assert_eq!(
        compressed("write -c -P 0x11 64k 128k"),
        WriteData::Compressed(0x11)
    );
    assert_eq!(
        compressed("write -c -z 0 64k"),
        WriteData::Zeroes { unmap: false }
    );
    assert_eq!(
        parse_err("write -c -f 0 64k"),
        "-f and -b or -c cannot be specified at the same time"
    );
    assert_eq!(
        parse_err("writev -c 0 64k"),
        "writev: invalid option -- 'c'"
    );
    assert_eq!(
        parse_err("aio_write -c 0 64k"),
        "aio_write: invalid option -- 'c'"
    );
}

#[test]
fn bad_commands_say_what_qemu_io_says() {
    let cases = [
        ("bogus 1 2", "command \"bogus\" not found", true),
        (
            "read 0 abc",
            "Parsing error: non-numeric argument, or extraneous/unrecognized suffix -- abc",
            false,
        ),
        (
            "read 0",
            "bad argument count 1 to read, expected 2 arguments",
            true,
        ),
        (
            "read -P 0x1ff 0 4k",
            "0x1ff is not a valid pattern byte",
            false,
        ),
        (
            "read -P 1 -s 3 -l 2 0 4",
            "pattern verification range exceeds end of read data",
            false,
        ),
        ("read -x 0 1", "read: invalid option -- 'x'", true),
        ("write -u 0 4k", "-u requires -z to be specified", false),
        (
            "write -z -P 1 0 4k",
            "Only one of -z, -P, and -s can be specified at the same time",
            false,
        ),
        ("flush now", "bad argument count 1 to flush", true),
        // Only aio_write zeroes: writev has no -z, -u or -i.
        ("writev -f -z 0 4k", "writev: invalid option -- 'z'", true),
        ("writev -u 0 4k", "writev: invalid option -- 'u'", true),
        ("writev -i 0 4k", "writev: invalid option -- 'i'", true),
    ];
    for (line, want, stderr) in cases {
        let e = parse_command(line).unwrap_err();
        assert!(e.message.starts_with(want), "{line}: {}", e.message);
        assert_eq!(e.stderr, stderr, "{line}");
    }
    assert!(parse_err("write 0 4G").starts_with("length cannot exceed"));
    assert!(matches!(
        parse("aio_write -f -z 0 4k"),
        Cmd::Write(WriteCmd {
            fua: true,
            data: WriteData::Zeroes { unmap: false },
            ..
        })
    ));
}
