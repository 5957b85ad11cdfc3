//! The unit tests of `sim::iotrace::compressed`.

use std::io::{self, Read, Write};

use sim::iotrace::compressed::*;

fn all(input: &[u8], limit: u64) -> (Compression, io::Result<Vec<u8>>) {
    let (c, mut r) = reader(input, limit).unwrap();
    let mut out = Vec::new();
    let res = r.read_to_end(&mut out).map(|_| out);
    (c, res)
}

fn gz(text: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(text).unwrap();
    e.finish().unwrap()
}

#[test]
fn magic_bytes_choose_the_decoder() {
    let text = b"w 0 4096\nf\n".repeat(100);
    let z = zstd::stream::encode_all(&text[..], 3).unwrap();
    assert_eq!(all(&z, 1 << 20).0, Compression::Zstd);
    assert_eq!(all(&z, 1 << 20).1.unwrap(), text);
    assert_eq!(all(&gz(&text), 1 << 20).0, Compression::Gzip);
    assert_eq!(all(&gz(&text), 1 << 20).1.unwrap(), text);
    assert_eq!(all(&text, 1).0, Compression::None);
    assert_eq!(all(&text, 1).1.unwrap(), text);
    // Shorter than any magic, and empty.
    assert_eq!(all(b"f", 1).1.unwrap(), b"f");
    assert_eq!(all(b"", 1).1.unwrap(), b"");
}

#[test]
fn frames_and_members_back_to_back_are_read_in_turn() {
    let mut z = zstd::stream::encode_all(&b"w 0 512\n"[..], 1).unwrap();
    z.extend(zstd::stream::encode_all(&b"f\n"[..], 1).unwrap());
    assert_eq!(all(&z, 100).1.unwrap(), b"w 0 512\nf\n");
    let mut g = gz(b"w 0 512\n");
    g.extend(gz(b"f\n"));
    assert_eq!(all(&g, 100).1.unwrap(), b"w 0 512\nf\n");
}

#[test]
fn decompressing_past_the_limit_is_an_error() {
    let text = vec![b'\n'; 10_000];
    let z = zstd::stream::encode_all(&text[..], 3).unwrap();
    assert_eq!(all(&z, 10_000).1.unwrap().len(), 10_000);
    let e = all(&z, 9_999).1.unwrap_err();
    assert_eq!(
        e.to_string(),
        "zstd input decompresses to more than 9999 bytes"
    );
    let e = all(&gz(&text), 100).1.unwrap_err();
    assert_eq!(
        e.to_string(),
        "gzip input decompresses to more than 100 bytes"
    );
}

#[test]
fn a_corrupt_stream_is_an_error() {
    let mut z = zstd::stream::encode_all(&b"w 0 512\n".repeat(50)[..], 3).unwrap();
    z.truncate(z.len() / 2);
    assert!(all(&z, 1 << 20).1.is_err());
    let mut g = gz(&b"w 0 512\n".repeat(50));
    let n = g.len();
    g[n / 2] ^= 0xff;
    g.truncate(n - 4);
    assert!(all(&g, 1 << 20).1.is_err());
}
