//! The unit tests of `tools::io::scan`.

use tools::io::parse_pattern;

#[test]
fn patterns_parse_like_strtol_base_0() {
    assert_eq!(parse_pattern("0xcd").unwrap(), 0xcd);
    assert_eq!(parse_pattern("205").unwrap(), 205);
    assert_eq!(parse_pattern("017").unwrap(), 0o17);
    assert_eq!(parse_pattern("0").unwrap(), 0);
    for bad in ["256", "x", "-1", "0x", "09"] {
        assert!(parse_pattern(bad).is_err(), "{bad}");
    }
}
