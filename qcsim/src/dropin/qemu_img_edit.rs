//! qemu-img's subcommands that change an existing image in place, on the
//! command line as qemu-img takes them: `resize`, `rebase`, `commit`. The
//! work is `tools`' (`tools::resize`, `tools::rebase`, `tools::commit`); this module owns the syntax, wording and exit codes.

use std::path::{Path, PathBuf};

use tools::commit::{commit_image, CommitError};
use tools::files::OpenOptions;
use tools::rebase::{rebase_image, RebaseError, RebaseOptions};
use tools::resize::{resize_image, ResizeError, SizeChange};

use super::getopt::long;
use super::img_common::{could_not_open, fail, image_name, parse_format, scan, Fail};

/// qemu-img's explanation after a size it cannot parse.
const SIZE_HELP: &str = "Parameter 'size' expects a non-negative number below 2^64\n\
Optional suffix k, M, G, T, P or E means kilo-, mega-, giga-, tera-, peta-\n\
and exabytes, respectively.";

/// What qemu-img adds when it refuses to shrink.
const SHRINK_WARNING: &str = "warning: Shrinking an image will delete all data beyond the \
shrunken image's end. Before performing such an operation, make sure there is no important \
data there.";

/// `resize [-f FMT] [-q] [--shrink] FILE [+|-]SIZE`. The size is taken off
/// the end before the options are scanned, as qemu-img does, so that a
/// negative size is not read as an option.
pub(super) fn resize(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let Some((size, rest)) = args.split_last() else {
        return fail(format!(
            "Expecting image file name and size\nTry '{prog} resize --help' for more info"
        ));
    };
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("preallocation", true, None),
        long("shrink", false, None),
    ];
    let p = scan(prog, rest, "f:hq", &longs)?;
    let [operand] = p.operands.as_slice() else {
        return fail(format!(
            "Expecting image file name and size\nTry '{prog} resize --help' for more info"
        ));
    };
    if let Some(mode) = p.value("preallocation") {
        if mode != "off" {
            return fail(format!(
                "Unsupported preallocation mode '{mode}' (qcsim resizes with preallocation=off)"
            ));
        }
    }
    let change = parse_change(size)?;
    let (file, driver) = image_name(&p, operand)?;
    let opts = OpenOptions {
        format: parse_format(p.value("f").map(str::to_owned).or(driver))?,
        ..OpenOptions::default()
    };
    futures::executor::block_on(resize_image(&file, &opts, change, p.has("shrink")))
        .map_err(|e| Fail(resize_error(prog, &file, &e), 1))?;
    if !p.has("q") {
        println!("Image resized.");
    }
    Ok(0)
}

/// `+N` grows by N, `-N` shrinks by N, `N` is the new size.
fn parse_change(s: &str) -> Result<SizeChange, Fail> {
    let (kind, digits): (fn(u64) -> SizeChange, &str) = match s.as_bytes().first() {
        Some(b'+') => (SizeChange::Grow, &s[1..]),
        Some(b'-') => (SizeChange::Shrink, &s[1..]),
        _ => (SizeChange::To, s),
    };
    tools::qemu_args::parse_size(digits)
        .map(kind)
        .map_err(|_| Fail(SIZE_HELP.to_owned(), 1))
}

fn resize_error(prog: &str, file: &Path, e: &ResizeError) -> String {
    match e {
        ResizeError::Open(o) => could_not_open(file, o),
        ResizeError::NeedsShrink => format!("{e}\n{prog}: {SHRINK_WARNING}"),
        other => super::shared::chain(other),
    }
}

/// `rebase [-f FMT] [-u] [-q] [-p] -b BACKING [-F FMT] FILE`: nothing is
/// printed on success.
pub(super) fn rebase(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
        long("compress", false, Some('c')),
    ];
    let p = scan(prog, args, "hf:F:b:upt:T:qUc", &longs)?;
    let [operand] = p.operands.as_slice() else {
        return fail("Expecting one image file name");
    };
    let Some(backing) = p.value("b") else {
        return fail(format!(
            "Must specify backing file (-b) or use unsafe mode (-u)\nTry '{prog} rebase --help' for more info"
        ));
    };
    let (file, driver) = image_name(&p, operand)?;
    let opts = OpenOptions {
        format: parse_format(p.value("f").map(str::to_owned).or(driver))?,
        ..OpenOptions::default()
    };
    if p.has("c") && opts.format == Some(tools::files::Format::Raw) {
        return fail("Compression not supported for this file format");
    }
    let r = RebaseOptions {
        compress: p.has("c"),
        backing: Some(backing.to_owned()),
        backing_format: p
            .value("F")
            .map(|f| match super::shared::is_qemu_driver(f) {
                true => Ok(f.to_owned()),
                false => Err(Fail(format!("Invalid format name: '{f}'"), 1)),
            })
            .transpose()?,
        unsafe_mode: p.has("u"),
    };
    futures::executor::block_on(rebase_image(&file, &opts, &r)).map_err(|e| {
        let msg = match &e {
            RebaseError::Open(o) => could_not_open(&file, o),
            other => super::shared::chain(other),
        };
        Fail(msg, 1)
    })?;
    Ok(0)
}

/// `commit [-f FMT] [-b BASE] [-d] [-q] [-p] FILE`: "Image committed."
pub(super) fn commit(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
    ];
    let p = scan(prog, args, "ht:b:dpqf:r:", &longs)?;
    let [operand] = p.operands.as_slice() else {
        return fail("Expecting one image file name");
    };
    let (file, driver) = image_name(&p, operand)?;
    let opts = OpenOptions {
        format: parse_format(p.value("f").map(str::to_owned).or(driver))?,
        ..OpenOptions::default()
    };
    let base = p.value("b").map(PathBuf::from);
    futures::executor::block_on(commit_image(&file, &opts, base.as_deref(), p.has("d"))).map_err(
        |e| {
            let msg = match &e {
                CommitError::Open(o) => could_not_open(&file, o),
                other => super::shared::chain(other),
            };
            Fail(msg, 1)
        },
    )?;
    if !p.has("q") {
        println!("Image committed.");
    }
    Ok(0)
}
