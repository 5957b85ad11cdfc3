//! What the drop-in `qemu-img`'s subcommands share: the failure they end
//! in (message and exit code), the option scan, image and size operands,
//! and opening a source and a target as qemu-img does. Below `qemu_img`
//! (the dispatcher and the small subcommands) and the `qemu_img_*`
//! modules.

use std::path::{Path, PathBuf};

use tools::files::{open_image, Format, OpenOptions};
use tools::qemu_args::ArgError;

use super::getopt::{getopt, Long, Parsed};

/// A failure: the message (after the `qemu-img: ` prefix) and exit code.
pub(super) struct Fail(pub(super) String, pub(super) i32);

pub(super) fn fail<T>(msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(msg.into(), 1))
}

pub(super) fn scan(
    prog: &str,
    args: &[String],
    short: &str,
    longs: &[Long],
) -> Result<Parsed, Fail> {
    getopt(args, short, longs)
        .map_err(|e| Fail(format!("{e}\nTry '{prog} --help' for more information"), 1))
}

/// `--object` is accepted and ignored (qcsim has no secrets or other
/// objects); `--image-opts` names the file by `filename=`.
pub(super) fn image_name(p: &Parsed, operand: &str) -> Result<(PathBuf, Option<String>), Fail> {
    if !p.has("image-opts") {
        return Ok((super::shared::plain_file_name(operand), None));
    }
    let mut file = None;
    let mut driver = None;
    let items = super::blockopts::image_opts_items(operand).map_err(|e| Fail(e, 1))?;
    for (k, v) in items {
        match (k.as_str(), v) {
            ("file.filename" | "filename", Some(v)) => file = Some(PathBuf::from(v)),
            ("driver", Some(d)) => driver = Some(d),
            _ => {}
        }
    }
    match file {
        Some(f) => Ok((f, driver)),
        None => fail("A block device must be specified for \"file\""),
    }
}

/// An image size operand as qemu-img reads one, with its two messages: a
/// number out of range (negative ones included), and anything else that
/// is not a size.
pub(super) fn parse_image_size(s: &str) -> Result<u64, Fail> {
    let negative = s
        .strip_prefix('-')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()));
    let parsed = tools::qemu_args::parse_size(s);
    let too_large = matches!(parsed, Err(ArgError::SizeTooLarge(_)))
        || matches!(parsed, Ok(v) if v > i64::MAX as u64);
    if negative || too_large {
        return fail(format!(
            "Invalid image size specified. Must be between 0 and {}.",
            i64::MAX
        ));
    }
    parsed.map_err(|_| Fail(format!("Invalid image size specified: '{s}'."), 1))
}

pub(super) fn parse_format(f: Option<String>) -> Result<Option<Format>, Fail> {
    f.map(|f| {
        f.parse::<Format>()
            .map_err(|_| Fail(format!("Unknown driver '{f}'"), 1))
    })
    .transpose()
}

/// qemu-img's words for an image it could not open: the file, then the
/// driver's reason.
pub(super) fn could_not_open(file: &Path, e: &tools::files::OpenError) -> String {
    format!(
        "Could not open '{}': {}",
        file.display(),
        super::shared::open_error_text(file, e)
    )
}

/// [`could_not_open`] as the failure it ends in.
pub(super) fn open_fail(file: &Path, e: tools::files::OpenError) -> Fail {
    Fail(could_not_open(file, &e), 1)
}

/// qemu-img's words for a failed copy request: the byte, the errno.
pub(super) fn error_at_byte(what: &str, at: u64, e: &engine::Error) -> String {
    format!(
        "error while {what} at byte {at}: {}",
        tools::io::errno_text(e)
    )
}

/// A copy's source, opened read-only (`-f`, `-U` as given).
pub(super) async fn open_source(
    src: &Path,
    format: Option<Format>,
    force_share: bool,
) -> Result<tools::files::Disk, Fail> {
    let opts = OpenOptions {
        format,
        read_only: true,
        force_share,
        ..OpenOptions::default()
    };
    open_image(src, &opts).await.map_err(|e| open_fail(src, e))
}

/// A copy's target, opened writable in `format`.
pub(super) async fn open_target(dst: &Path, format: Format) -> Result<tools::files::Disk, Fail> {
    let opts = OpenOptions {
        format: Some(format),
        ..OpenOptions::default()
    };
    open_image(dst, &opts).await.map_err(|e| open_fail(dst, e))
}
