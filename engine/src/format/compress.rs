//! Compressed clusters, both ways. The header's compression type says
//! how: type 0 is raw deflate (no zlib header), type 1 is zstd. A zstd
//! cluster is one or more zstd frames written back to back, then padding
//! up to the end of the last 512-byte sector; nothing records the frames'
//! length, so the decoder runs until it has produced one whole cluster and
//! ignores what follows.
//!
//! Input comes from the image, so it is hostile: output is capped at one
//! cluster, and zstd's window (the memory it allocates from what a frame
//! header claims) is capped at a size no cluster needs to exceed.
//!
//! Encoding ([`compress_cluster`]) makes what QEMU's qcow2 driver reads
//! back: deflate with a 4 KiB window (QEMU inflates with window bits -12,
//! so a longer match distance would not decode there), through the
//! `zlib-rs` crate, the only Rust deflate here that takes zlib's window
//! and memory-level settings (flate2's default backend always uses a
//! 32 KiB window); zstd as one frame at zstd's default level. The
//! compressed form must fit in one byte less than a cluster, or the
//! caller writes the cluster uncompressed, as QEMU does.

use std::io::Read;

use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};

use crate::error::{Error, Result};
use crate::format::header::CompressionType;

/// Largest zstd window accepted, as a power of two: 4 MiB, twice the
/// largest cluster.
const ZSTD_WINDOW_LOG_MAX: u32 = 22;

/// Decode the compressed bytes `raw` found at host offset `host` into one
/// cluster of `cluster_size` bytes.
pub(crate) fn decompress_cluster(
    kind: CompressionType,
    raw: &[u8],
    cluster_size: usize,
    host: u64,
) -> Result<Vec<u8>> {
    let out = match kind {
        CompressionType::Zlib => inflate(raw, cluster_size, host)?,
        CompressionType::Zstd => unzstd(raw, cluster_size, host)?,
    };
    if out.len() != cluster_size {
        return Err(Error::corrupt(
            format!(
                "{} compressed cluster decodes to {} bytes, less than a cluster",
                kind.name(),
                out.len()
            ),
            host,
        ));
    }
    Ok(out)
}

fn inflate(raw: &[u8], cluster_size: usize, host: u64) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(cluster_size);
    let mut dec = flate2::read::DeflateDecoder::new(raw).take(cluster_size as u64);
    dec.read_to_end(&mut out)
        .map_err(|e| Error::corrupt(format!("compressed cluster does not inflate: {e}"), host))?;
    Ok(out)
}

fn unzstd(raw: &[u8], cluster_size: usize, host: u64) -> Result<Vec<u8>> {
    let bad = |e: std::io::Error| {
        Error::corrupt(
            format!("zstd compressed cluster does not decode: {e}"),
            host,
        )
    };
    let mut dec = Decoder::new().map_err(bad)?;
    dec.set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))
        .map_err(bad)?;
    let mut out = vec![0u8; cluster_size];
    let mut input = InBuffer::around(raw);
    let mut output = OutBuffer::around(&mut out[..]);
    while output.pos() < cluster_size {
        let before = (input.pos(), output.pos());
        dec.run(&mut input, &mut output).map_err(bad)?;
        if (input.pos(), output.pos()) == before {
            // No progress: the input ended before a whole cluster.
            break;
        }
    }
    let n = output.pos();
    out.truncate(n);
    Ok(out)
}

/// zstd's default compression level (`ZSTD_CLEVEL_DEFAULT`), what a
/// compression context uses unless told otherwise.
const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// Compress one whole cluster `data`, or `None` when the compressed form
/// does not fit in `data.len() - 1` bytes: QEMU gives its compressor that
/// much room and writes the cluster uncompressed when it is not enough.
pub(crate) fn compress_cluster(kind: CompressionType, data: &[u8]) -> Result<Option<Vec<u8>>> {
    let room = data.len().saturating_sub(1);
    match kind {
        CompressionType::Zlib => Ok(deflate(data, room)),
        CompressionType::Zstd => zstd_frame(data, room),
    }
}

fn deflate(data: &[u8], room: usize) -> Option<Vec<u8>> {
    let config = zlib_rs::DeflateConfig {
        // zlib's default level, its largest memory level and raw
        // deflate with a 4 KiB window, as QEMU's deflateInit2 call.
        level: 6,
        method: zlib_rs::Method::Deflated,
        window_bits: -12,
        mem_level: 9,
        strategy: zlib_rs::Strategy::Default,
    };
    let mut out = vec![0u8; room];
    let (done, rc) = zlib_rs::compress_slice(&mut out, data, config);
    // Anything but a finished stream (the buffer filled first) is "does
    // not fit": the cluster is then written as it is.
    if rc != zlib_rs::ReturnCode::Ok {
        return None;
    }
    let n = done.len();
    out.truncate(n);
    Some(out)
}

fn zstd_frame(data: &[u8], room: usize) -> Result<Option<Vec<u8>>> {
    let mut out = vec![0u8; room];
    let mut c = zstd::bulk::Compressor::new(ZSTD_DEFAULT_LEVEL)
        .map_err(|e| Error::Unsupported(format!("zstd compressor: {e}")))?;
    match c.compress_to_buffer(data, &mut out[..]) {
        Ok(n) => {
            out.truncate(n);
            Ok(Some(out))
        }
        // zstd says only that the output did not fit (or, never for a
        // cluster of plain bytes, that it could not compress at all):
        // both mean the cluster goes uncompressed.
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
