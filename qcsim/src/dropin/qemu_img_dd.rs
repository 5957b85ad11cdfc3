//! qemu-img's `dd`: `dd [-f FMT] [-O FMT] [-U] [bs=N] if=INPUT of=OUTPUT`,
//! its operand syntax and its words. The copy of a whole image is
//! `tools::convert`'s (the output created anew, of the input's size, in
//! the output format, raw by default), so blocks that read as zeroes are
//! left unallocated where QEMU's dd writes every block (`qemu-img check`
//! then counts fewer allocated clusters; the data is the same); the block
//! size is checked and otherwise changes nothing. `count=` and `skip=`,
//! which copy part of an image, are refused as not supported by qcsim.

use tools::convert::{ConvertError, ConvertOptions};
use tools::files::Format;
use tools::qemu_args::parse_size;

use super::getopt::long;
use super::qemu_img::{fail, parse_format, scan, Fail};

/// The largest block size qemu-img's dd takes.
const MAX_BS: u64 = i32::MAX as u64;

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
    for operand in &p.operands {
        let (key, value) = operand.split_once('=').unwrap_or((operand.as_str(), ""));
        match key {
            "if" => input = Some(value),
            "of" => output = Some(value),
            "bs" => match parse_size(value) {
                Ok(n) if (1..=MAX_BS).contains(&n) => {}
                _ => {
                    return fail(format!(
                        "Invalid bs specified. Must be between 1 and {MAX_BS}."
                    ))
                }
            },
            "count" | "skip" => {
                return fail(format!("dd {key}= is not supported by qcsim"));
            }
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
    let opts = ConvertOptions {
        source_format,
        output_format,
        force_share: p.has("U"),
        ..ConvertOptions::default()
    };
    let (src, dst) = (
        super::plain_file_name(input),
        super::plain_file_name(output),
    );
    futures::executor::block_on(tools::convert::convert(&src, &dst, &opts)).map_err(|e| {
        let msg = match &e {
            // qemu-img names the input, then the driver's reason.
            ConvertError::Source(open) => format!(
                "Could not open '{}': {}",
                src.display(),
                super::open_error_text(&src, open)
            ),
            _ => super::chain(&e),
        };
        Fail(msg, 1)
    })?;
    Ok(0)
}
