//! The unit tests of `engine::format::compress`.

use engine::error::{Error, Result};
use engine::format::compress::*;
use engine::format::header::CompressionType;

const CS: usize = 4096;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ (i / 4096) as u8).collect()
}

#[test]
fn one_frame_then_padding_decodes() {
    let data = pattern(CS);
    let mut raw = zstd::encode_all(&data[..], 3).unwrap();
    raw.resize(raw.len().next_multiple_of(512), 0);
    let out = decompress_cluster(CompressionType::Zstd, &raw, CS, 0).unwrap();
    assert_eq!(out, data);
}

#[test]
fn several_frames_make_one_cluster() {
    let data = pattern(CS);
    let mut raw = zstd::encode_all(&data[..CS / 4], 1).unwrap();
    raw.extend(zstd::encode_all(&data[CS / 4..], 1).unwrap());
    raw.extend([0u8; 100]);
    let out = decompress_cluster(CompressionType::Zstd, &raw, CS, 0).unwrap();
    assert_eq!(out, data);
}

#[test]
fn a_frame_longer_than_a_cluster_yields_one_cluster() {
    let data = pattern(64 * CS);
    let raw = zstd::encode_all(&data[..], 1).unwrap();
    let out = decompress_cluster(CompressionType::Zstd, &raw, CS, 0).unwrap();
    assert_eq!(out, data[..CS]);
}

fn is_corrupt(r: Result<Vec<u8>>) -> bool {
    matches!(r, Err(Error::Corrupt { offset: 0x1200, .. }))
}

#[test]
fn short_garbage_and_greedy_frames_are_corrupt() {
    let data = pattern(CS);
    // Less than a cluster, then sector padding.
    let mut short = zstd::encode_all(&data[..CS / 2], 1).unwrap();
    short.resize(short.len().next_multiple_of(512), 0);
    assert!(is_corrupt(decompress_cluster(
        CompressionType::Zstd,
        &short,
        CS,
        0x1200
    )));
    // Not zstd at all.
    assert!(is_corrupt(decompress_cluster(
        CompressionType::Zstd,
        &[0x55; 512],
        CS,
        0x1200
    )));
    // A single-segment frame claiming 1 TiB of content: its window is
    // the content size, far above the cap, so nothing is allocated.
    let mut huge = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
    huge.extend((1u64 << 40).to_le_bytes());
    huge.extend([0x01, 0x00, 0x01, 0xaa]); // last raw block, 32 bytes
    huge.resize(512, 0);
    assert!(is_corrupt(decompress_cluster(
        CompressionType::Zstd,
        &huge,
        CS,
        0x1200
    )));
    // A well-formed frame whose header asks for an 8 MiB window: zstd
    // would allow it by default, the cap refuses it.
    let mut wide = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 13 << 3];
    let block_header = ((CS as u32) << 3) | 1; // last raw block of CS bytes
    wide.extend(&block_header.to_le_bytes()[..3]);
    wide.extend(&data);
    assert!(is_corrupt(decompress_cluster(
        CompressionType::Zstd,
        &wide,
        CS,
        0x1200
    )));
    wide[5] = 12 << 3; // a 4 MiB window is within the cap
    let out = decompress_cluster(CompressionType::Zstd, &wide, CS, 0x1200).unwrap();
    assert_eq!(out, data);
}

/// What the encoder makes decodes to the cluster (the last partial
/// cluster's zero padding included), for both types and several
/// cluster sizes; data that cannot shrink is refused.
#[test]
fn encoded_clusters_decode() {
    for kind in [CompressionType::Zlib, CompressionType::Zstd] {
        for cs in [512usize, 4096, 65536, 2 << 20] {
            let data = pattern(cs);
            let raw = compress_cluster(kind, &data).unwrap().unwrap();
            assert!(raw.len() < cs, "{kind:?} {cs}");
            let mut padded = raw.clone();
            padded.resize(raw.len().next_multiple_of(512), 0);
            assert_eq!(decompress_cluster(kind, &padded, cs, 0).unwrap(), data);
            let mut noise = vec![0u8; cs];
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for b in &mut noise {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            assert_eq!(
                compress_cluster(kind, &noise).unwrap(),
                None,
                "{kind:?} {cs}"
            );
        }
    }
}

/// QEMU inflates with a 4 KiB window: no match in the deflate stream
/// may reach further back. An inflater limited to that window decodes
/// data whose repeats lie 8 KiB apart.
#[test]
fn deflate_matches_stay_in_a_4k_window() {
    let cs = 65536;
    let block: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let data: Vec<u8> = block.iter().copied().cycle().take(cs).collect();
    let raw = compress_cluster(CompressionType::Zlib, &data)
        .unwrap()
        .unwrap();
    let mut out = vec![0u8; cs];
    let config = zlib_rs::InflateConfig { window_bits: -12 };
    let (got, rc) = zlib_rs::decompress_slice(&mut out, &raw, config);
    assert_eq!(rc, zlib_rs::ReturnCode::Ok);
    assert_eq!(got, &data[..]);
}

#[test]
fn deflate_still_decodes() {
    use std::io::Write;
    let data = pattern(CS);
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&data).unwrap();
    let raw = enc.finish().unwrap();
    let out = decompress_cluster(CompressionType::Zlib, &raw, CS, 0).unwrap();
    assert_eq!(out, data);
    assert!(is_corrupt(decompress_cluster(
        CompressionType::Zlib,
        &raw[..raw.len() / 2],
        CS,
        0x1200
    )));
}
