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
pub fn decompress_cluster(
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
pub fn compress_cluster(kind: CompressionType, data: &[u8]) -> Result<Option<Vec<u8>>> {
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
