//! `qemu-img amend [-f FMT] [-t CACHE] [-p] [-q] [--force] -o OPTIONS
//! FILENAME` on qcsim's engine: the syntax, the order qemu-img checks it
//! in, its `-p` lines (0 once the options are read, the driver's
//! percentages, 100 even after a refusal, then the newline), wording and
//! exit codes. The work is `tools::amend`'s.

use std::io::Write;

use tools::amend::{amend_image, AmendImageError};
use tools::files::OpenOptions;
use tools::progress::Progress;
use tools::qemu_args::wants_help;

use super::getopt::{getopt, long};
use super::img_common::{could_not_open, image_name, parse_format, Fail};

pub(super) fn amend(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let try_help = format!("Try '{prog} amend --help' for more info");
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("force", false, None),
    ];
    let p = match getopt(args, "ho:f:t:pq", &longs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{prog} amend: {e}\n{try_help}");
            return Ok(1);
        }
    };
    let mut lists = Vec::new();
    for o in &p.opts {
        if o.name == "o" {
            let v = o.value.clone().unwrap_or_default();
            if v.is_empty() || (v.ends_with(',') && !v.ends_with(",,")) {
                return Err(Fail(format!("Invalid option list: {v}"), 1));
            }
            lists.push(v);
        }
    }
    if lists.is_empty() {
        return Err(Fail(format!("Must specify options (-o)\n{try_help}"), 1));
    }
    let [operand] = p.operands.as_slice() else {
        return Err(Fail("Expecting one image file name".into(), 1));
    };
    let (file, driver) = image_name(&p, operand)?;
    let opts = OpenOptions {
        // The driver is looked up as the image is opened.
        format: parse_format(p.value("f").map(str::to_owned).or(driver))
            .map_err(|Fail(m, c)| Fail(format!("Could not open '{}': {m}", file.display()), c))?,
        ..OpenOptions::default()
    };
    if lists.iter().any(|l| wants_help(l)) {
        println!("Amend options for 'qcow2' (qcsim):\n  backing_file, backing_fmt, compat, data_file, data_file_raw, lazy_refcounts, refcount_bits, size");
        return Ok(0);
    }
    if opts.format.is_none()
        && matches!(
            tools::files::probe_path(&file),
            Ok(tools::files::Probed::Format(tools::files::Format::Raw))
        )
    {
        // A write open of a probed raw image: qemu-img's warning.
        eprintln!(
            "WARNING: Image format was not specified for '{}' and probing guessed raw.\n         \
             Automatically detecting the format is dangerous for raw images, write operations on block 0 will be restricted.\n         \
             Specify the 'raw' format explicitly to remove the restrictions.",
            file.display()
        );
    }
    let shown = p.has("p") && !p.has("q");
    let mut bar = shown.then(|| Progress::new(crate::output::stdout(), 1.0));
    let mut started = false;
    let result = futures::executor::block_on(amend_image(&file, &opts, &lists, &mut |pct| {
        started = true;
        if let Some(b) = bar.as_mut() {
            let _ = b.set(pct);
        }
    }));
    if started {
        if let Some(b) = bar.as_mut() {
            let _ = b.set(100.0);
        }
    }
    let fail = result.err().map(|e| amend_error(&file, &e));
    if let Some(Fail(msg, _)) = &fail {
        let _ = crate::output::stdout().flush();
        eprintln!("{prog}: {msg}");
    }
    if let Some(b) = bar {
        let _ = b.end();
    }
    Ok(if fail.is_some() { 1 } else { 0 })
}

fn amend_error(file: &std::path::Path, e: &AmendImageError) -> Fail {
    let msg = match e {
        AmendImageError::Open(o) => could_not_open(file, o),
        // The engine's refusals are QEMU's sentences already.
        AmendImageError::Engine {
            error: engine::Error::Amend(a),
            ..
        } => a.to_string(),
        other => super::shared::chain(other),
    };
    Fail(msg, 1)
}
