//! The unit tests of `engine::error`.

use engine::dev::{DevError, IoOp};
use engine::error::*;

/// Each error of a `source()` chain prints only its own part: no link's
/// message repeats the message of the link it comes from, so a printer
/// of the chain (anyhow's `{:#}`) shows every cause once.
fn assert_each_cause_once(e: &dyn std::error::Error) {
    let mut link = e;
    while let Some(source) = link.source() {
        let (outer, inner) = (link.to_string(), source.to_string());
        assert!(
            !outer.contains(&inner),
            "'{outer}' repeats its source '{inner}'"
        );
        link = source;
    }
}

#[test]
fn a_device_error_prints_once() {
    let dev = DevError::Io {
        op: IoOp::Read,
        offset: 4096,
        len: 512,
    };
    let e = Error::from(dev.clone());
    assert_each_cause_once(&e);
    assert_eq!(e.to_string(), dev.to_string());
}
