//! qemu-img's `dd`: `dd [-f FMT] [-O FMT] [-U] [bs=N] [count=N] [skip=N]
//! if=INPUT of=OUTPUT`, its operand syntax and its words, and its copy:
//! the output created anew in the output format (raw by default), of the
//! input's size cut to `count` blocks and less the `skip` blocks, then
//! every block read from the input and written to the output in turn,
//! zero blocks too (which a qcow2 output then holds as allocated data, as
//! QEMU's dd leaves it). A skip past the input's end gives an empty
//! output and a warning, not an error, as qemu-img does.

use tools::create::{prepare_image, CreateImageOptions};
use tools::files::Format;
use tools::qemu_args::parse_size;

use super::getopt::long;
use super::img_common::{fail, open_source, open_target, parse_format, scan, Fail};

/// The largest block size qemu-img's dd takes.
const MAX_BS: u64 = i32::MAX as u64;

/// A `count=` or `skip=` value: a decimal number of blocks, no suffix.
fn parse_blocks(key: &str, value: &str) -> Result<u64, Fail> {
    let digits = value.strip_prefix('-').unwrap_or(value);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return fail(format!("Invalid {key} specified: '{value}'."));
    }
    match value.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n as u64),
        _ => fail(format!(
            "Invalid {key} specified. Must be between 0 and {}.",
            i64::MAX
        )),
    }
}

pub(super) fn dd(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
    ];
    let p = scan(prog, args, "hf:O:U", &longs)?;
    if p.has("image-opts") {
        return fail("dd --image-opts is not supported by qcsim");
    }
    let (mut input, mut output) = (None, None);
    let (mut bs, mut count, mut skip) = (512u64, None, 0u64);
    for operand in &p.operands {
        let (key, value) = operand.split_once('=').unwrap_or((operand.as_str(), ""));
        match key {
            "if" => input = Some(value),
            "of" => output = Some(value),
            "bs" => match parse_size(value) {
                Ok(n) if (1..=MAX_BS).contains(&n) => bs = n,
                Ok(_) | Err(tools::qemu_args::ArgError::SizeTooLarge(_)) => {
                    return fail(format!(
                        "Invalid bs specified. Must be between 1 and {MAX_BS}."
                    ))
                }
                Err(_) => return fail(format!("Invalid bs specified: '{value}'.")),
            },
            "count" => count = Some(parse_blocks(key, value)?),
            "skip" => skip = parse_blocks(key, value)?,
            _ => return fail(format!("unrecognized operand {key}")),
        }
    }
    let (Some(input), Some(output)) = (input, output) else {
        return fail("Must specify both input and output files");
    };
    let source_format = parse_format(p.value("f").map(str::to_owned))?;
    let out_name = p.value("O").unwrap_or("raw");
    let output_format: Format = out_name
        .parse()
        // dd's words name no format, unlike convert's.
        .map_err(|_| Fail("Unknown file format".into(), 1))?;
    let (src, dst) = (
        super::shared::plain_file_name(input),
        super::shared::plain_file_name(output),
    );
    futures::executor::block_on(copy(
        prog,
        &src,
        source_format,
        &dst,
        output_format,
        p.has("U"),
        Blocks { bs, count, skip },
    ))?;
    Ok(0)
}

/// dd's block size, and the blocks `count=` and `skip=` name.
#[derive(Debug, Clone, Copy)]
struct Blocks {
    bs: u64,
    count: Option<u64>,
    skip: u64,
}

/// Create `dst` and copy `src` into it block by block, as qemu-img's dd.
async fn copy(
    prog: &str,
    src: &std::path::Path,
    src_format: Option<Format>,
    dst: &std::path::Path,
    dst_format: Format,
    force_share: bool,
    b: Blocks,
) -> Result<(), Fail> {
    let s = open_source(src, src_format, force_share).await?;
    let mut size = s.virtual_size();
    if let Some(n) = b.count.and_then(|n| n.checked_mul(b.bs)) {
        size = size.min(n);
    }
    // A skip past the end: an empty output, and a warning.
    let start = b.skip.checked_mul(b.bs).filter(|&at| at <= size);
    let opts = CreateImageOptions {
        format: dst_format,
        options: Vec::new(),
        size: Some((size - start.unwrap_or(size)).to_string()),
        backing: None,
        backing_format: None,
        unsafe_backing: false,
    };
    let name = dst.display().to_string();
    prepare_image(dst, &opts)
        .await
        .map_err(|e| Fail(format!("{name}: {}", super::shared::chain(&e)), 1))?
        .write()
        .await
        .map_err(|e| Fail(format!("{name}: {}", super::shared::chain(&e)), 1))?;
    let d = open_target(dst, dst_format).await?;
    let mut at = match start {
        Some(at) => at,
        None => {
            eprintln!("{prog}: {}: cannot skip to specified offset", src.display());
            size
        }
    };
    let errno = |e: &engine::Error| tools::io::errno_text(e);
    // One block at a time, as big as dd's, with a bound on the buffer.
    let mut buf = vec![0u8; b.bs.min(1 << 20) as usize];
    let mut out = 0;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        s.read(at, &mut buf[..n]).await.map_err(|e| {
            Fail(
                format!("error while reading from input image file: {}", errno(&e)),
                1,
            )
        })?;
        d.write(out, &buf[..n]).await.map_err(|e| {
            Fail(
                format!("error while writing to output image file: {}", errno(&e)),
                1,
            )
        })?;
        at += n as u64;
        out += n as u64;
    }
    drop(s);
    d.close().await.map_err(|e| Fail(format!("{name}: {e}"), 1))
}
