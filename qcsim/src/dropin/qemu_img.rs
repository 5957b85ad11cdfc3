//! qemu-img's command line on qcsim's engine: `qcsim img ARGS` and qcsim
//! invoked as `qemu-img`. The dispatcher, and the subcommands small enough
//! to live here (`create`, `check`, `info`, `map`, `compare`, `convert`);
//! `resize`, `rebase` and `commit` are in `qemu_img_edit`, `snapshot` in
//! `qemu_img_snapshot`, `dd` in `qemu_img_dd`, `measure` in
//! `qemu_img_measure` and `amend` in `qemu_img_amend`. Each takes
//! qemu-img's options into the options of its one implementation in
//! `tools` and prints what qemu-img prints, with its `qemu-img: ` prefix
//! and exit codes (1 for usage errors and failures, check's 0/1/2/3, and 63
//! for a check of a format that has none); other subcommands are refused
//! with a message saying so.

use std::io::Write;
use std::path::{Path, PathBuf};

use tools::check::{check_file, CheckOptions, RepairMode};
use tools::convert::{
    convert_reporting, ConvertError, ConvertOptions, CopyStep, Destination, MAX_PARALLEL,
};
use tools::create::{prepare_image, CreateImageError, CreateImageOptions};
use tools::files::{open_image, probe_path, Format, OpenOptions, Probed};
use tools::info::{info, info_chain, ChainInfoError, InfoOptions, InfoReport};
use tools::map::{map_image, MapError};
use tools::progress::Progress;
use tools::qemu_args::{option_help, wants_help, ArgError};

use super::getopt::{long, Parsed};
use super::img_common::{
    could_not_open, error_at_byte, fail, image_name, parse_format, parse_image_size, scan, Fail,
};

/// qemu-img's exit code for `check` on a format without consistency
/// checks.
const CHECK_NOT_SUPPORTED: i32 = 63;

/// Run qemu-img's command line `args` (without the program name); `prog`
/// is the name messages carry. Returns the exit code.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{prog}: Not enough arguments\nTry '{prog} --help' for more information");
        return 1;
    };
    let result = match cmd.as_str() {
        "create" => create(prog, rest),
        "check" => check(prog, rest),
        "info" => info_cmd(prog, rest),
        "map" => map_cmd(prog, rest),
        "compare" => compare(prog, rest),
        "convert" => convert_cmd(prog, rest),
        "resize" => super::qemu_img_edit::resize(prog, rest),
        "rebase" => super::qemu_img_edit::rebase(prog, rest),
        "commit" => super::qemu_img_edit::commit(prog, rest),
        "snapshot" => super::qemu_img_snapshot::snapshot(prog, rest),
        "dd" => super::qemu_img_dd::dd(prog, rest),
        "measure" => super::qemu_img_measure::measure(prog, rest),
        "amend" => super::qemu_img_amend::amend(prog, rest),
        "-h" | "--help" => {
            println!(
                "{prog}: qcsim's stand-in for qemu-img: create, check, info, map, compare, convert, resize, rebase, commit, snapshot, measure, amend"
            );
            Ok(0)
        }
        "-V" | "--version" => {
            println!("{prog} version {} (qcsim)", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        other => Err(Fail(format!("Command not found: {other}"), 1)),
    };
    match result {
        Ok(code) => code,
        Err(Fail(msg, code)) => {
            let _ = crate::output::stdout().flush();
            eprintln!("{prog}: {msg}");
            code
        }
    }
}

fn create(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [long("help", false, Some('h')), long("object", true, None)];
    let p = scan(prog, args, "F:b:f:ho:qu", &longs)?;
    let options: Vec<String> = p.values("o").into_iter().map(str::to_owned).collect();
    if options.iter().any(|o| wants_help(o)) {
        print!("{}", option_help());
        return Ok(0);
    }
    let format = p.value("f").unwrap_or("raw");
    let format: Format = format
        .parse()
        .map_err(|_| Fail(format!("Unknown file format '{format}'"), 1))?;
    let (file, size) = match p.operands.as_slice() {
        [f] => (f.clone(), None),
        [f, s] => (f.clone(), Some(s.clone())),
        [] => return fail("Expecting image file name"),
        _ => return fail(format!("Invalid parameter '{}'", p.operands[2])),
    };
    if let Some(s) = &size {
        parse_image_size(s)?;
    }
    let opts = CreateImageOptions {
        format,
        options,
        size,
        backing: p.value("b").map(str::to_owned),
        backing_format: p.value("F").map(str::to_owned),
        unsafe_backing: p.has("u"),
    };
    let path = super::shared::plain_file_name(&file);
    futures::executor::block_on(async {
        // The file named as it was given, prefix and all.
        let formatting = |line: &str| {
            if p.has("q") {
                return;
            }
            let as_opened = format!("Formatting '{}'", path.display());
            match line.strip_prefix(&as_opened) {
                Some(rest) => println!("Formatting '{file}'{rest}"),
                None => println!("{line}"),
            }
        };
        let prepared = match prepare_image(&path, &opts).await {
            Ok(prepared) => prepared,
            Err(e) => {
                // The errors qemu-img's drivers report after the line.
                if let CreateImageError::Driver {
                    formatting_line, ..
                }
                | CreateImageError::RawPreallocation {
                    formatting_line, ..
                } = &e
                {
                    formatting(formatting_line);
                }
                return Err(Fail(create_error(&file, &e), 1));
            }
        };
        formatting(prepared.formatting_line());
        prepared
            .write()
            .await
            .map_err(|e| Fail(create_error(&file, &e), 1))
    })?;
    Ok(0)
}

/// A create failure as qemu-img words it: "FILE: what is wrong".
fn create_error(file: &str, e: &CreateImageError) -> String {
    match e {
        // QEMU's messages for bad values are sentences of their own.
        CreateImageError::Options {
            error: ArgError::BadValue { reason, .. },
            ..
        }
        | CreateImageError::Driver {
            error: ArgError::BadValue { reason, .. },
            ..
        } => {
            let mut r = reason.clone();
            if let Some(first) = r.get(..1) {
                r.replace_range(..1, &first.to_uppercase());
            }
            format!("{file}: {r}")
        }
        CreateImageError::Options { error, .. } | CreateImageError::Driver { error, .. } => {
            format!("{file}: {error}")
        }
        CreateImageError::BackingOpen { error, .. } => format!(
            "{file}: {}\nCould not open backing image.",
            super::shared::open_error_text(Path::new(file), error)
        ),
        // qemu-img looks for the backing file before it asks for its
        // format: a missing one is the error.
        CreateImageError::MissingBackingFormat {
            backing,
            probed: None,
            ..
        } if std::fs::metadata(backing).is_err() => {
            let why = std::fs::metadata(backing)
                .err()
                .map(|e| super::shared::strerror(&e))
                .unwrap_or_default();
            format!(
                "{file}: Could not open '{}': {why}\nCould not open backing image.",
                backing.display()
            )
        }
        CreateImageError::MissingBackingFormat { probed, .. } => {
            let detected = match probed {
                Some(Probed::Format(f)) => format!("\nDetected format of {}.", f.name()),
                Some(Probed::Foreign(name)) => format!("\nDetected format of {name}."),
                None => String::new(),
            };
            format!("{file}: Backing file specified without backing format{detected}")
        }
        // The engine's and tools' messages name the file themselves.
        other => super::shared::chain(other),
    }
}

fn check(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("format", true, Some('f')),
        long("repair", true, Some('r')),
        long("output", true, None),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
    ];
    let p = scan(prog, args, "hf:r:T:qU", &longs)?;
    let [operand] = p.operands.as_slice() else {
        return fail("Expecting one image file name");
    };
    let (file, driver) = image_name(&p, operand)?;
    let repair = match p.value("r") {
        None => None,
        Some("leaks") => Some(RepairMode::Leaks),
        Some("all") => Some(RepairMode::All),
        Some(other) => return fail(format!("Invalid option for -r: '{other}'")),
    };
    let output = p.value("output").unwrap_or("human");
    if output != "human" && output != "json" {
        return fail("--output must be used with human or json as argument.");
    }
    let format = match p.value("f").map(str::to_owned).or(driver) {
        Some(f) => f,
        None => match probe_path(&file) {
            Ok(Probed::Format(f)) => f.name().to_owned(),
            Ok(Probed::Foreign(name)) => name.to_owned(),
            Err(e) => return fail(could_not_open(&file, &e)),
        },
    };
    if format != "qcow2" {
        return Err(Fail(
            "This image format does not support checks".to_owned(),
            CHECK_NOT_SUPPORTED,
        ));
    }
    let opts = CheckOptions {
        repair,
        force_share: p.has("U"),
    };
    let outcome = check_file(&file, &opts).map_err(|e| match e {
        tools::check::CheckError::Open { path, error } => Fail(could_not_open(&path, &error), 1),
        tools::check::CheckError::Repair {
            path,
            error: oracle::check::RepairError::Open(reason),
        } => Fail(format!("Could not open '{}': {reason}", path.display()), 1),
        other => Fail(other.to_string(), 1),
    })?;
    for message in outcome.finding_messages() {
        eprintln!("{message}");
    }
    if let Some(reason) = outcome.report.open_failure() {
        // qemu-img's open failed: said as any open failure is.
        eprintln!("{prog}: Could not open '{}': {reason}", file.display());
        return Ok(1);
    }
    if let Some(msg) = outcome.failure() {
        eprintln!("{prog}: {msg}");
        eprintln!("{prog}: Check failed");
        return Ok(outcome.exit_code());
    }
    if output == "json" {
        println!("{}", outcome.json());
    } else if !p.has("q") {
        print!("{}", outcome.human());
    }
    if outcome.check_failed() {
        eprintln!("{prog}: Check failed");
    }
    Ok(outcome.exit_code())
}

fn info_cmd(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("format", true, Some('f')),
        long("output", true, None),
        long("backing-chain", false, None),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
        long("limits", false, None),
    ];
    let p = scan(prog, args, "f:htU", &longs)?;
    let [operand] = p.operands.as_slice() else {
        return fail("Expecting one image file name");
    };
    let (file, driver) = image_name(&p, operand)?;
    let output = p.value("output").unwrap_or("human");
    if output != "human" && output != "json" {
        return fail("--output must be used with human or json as argument.");
    }
    let format = p
        .value("f")
        .map(str::to_owned)
        .or(driver)
        .map(|f| {
            f.parse::<Format>()
                .map_err(|_| Fail(format!("Unknown driver '{f}'"), 1))
        })
        .transpose()?;
    let opts = InfoOptions {
        format,
        force_share: p.has("U"),
    };
    if p.has("backing-chain") {
        // Each image of the chain, top first: in human form a blank line
        // between them, in JSON one array of their objects.
        let reports = info_chain(&file, &opts).map_err(|e| match e {
            ChainInfoError::Image { path, error } => Fail(info_error(&path, &error), 1),
            loop_error => Fail(loop_error.to_string(), 1),
        })?;
        if output == "json" {
            println!("{}", tools::info::chain_json(&reports));
        } else {
            let human: Vec<String> = reports.iter().map(InfoReport::human).collect();
            print!("{}", human.join("\n"));
        }
        return Ok(0);
    }
    let report = info(&file, &opts).map_err(|e| Fail(info_error(&file, &e), 1))?;
    if output == "json" {
        println!("{}", report.json());
    } else {
        print!("{}", report.human());
    }
    Ok(0)
}

fn info_error(file: &Path, e: &tools::info::InfoError) -> String {
    match e {
        tools::info::InfoError::Open(o) => could_not_open(file, o),
        other => other.to_string(),
    }
}

fn map_cmd(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("format", true, Some('f')),
        long("output", true, None),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
    ];
    let p = scan(prog, args, "f:hU", &longs)?;
    let [operand] = p.operands.as_slice() else {
        return fail("Expecting one image file name");
    };
    let (file, driver) = image_name(&p, operand)?;
    let output = p.value("output").unwrap_or("human");
    if output != "human" && output != "json" {
        return fail("--output must be used with human or json as argument.");
    }
    let opts = OpenOptions {
        format: parse_format(p.value("f").map(str::to_owned).or(driver))?,
        force_share: p.has("U"),
        read_only: true,
        ..OpenOptions::default()
    };
    let entries = futures::executor::block_on(map_image(&file, &opts))
        .map_err(|e| Fail(map_error(&file, &e), 1))?;
    if output == "json" {
        print!("{}", tools::map::json(&entries));
    } else {
        print!("{}", tools::map::human(&entries));
    }
    Ok(0)
}

fn map_error(file: &Path, e: &MapError) -> String {
    match e {
        MapError::Open(o) => could_not_open(file, o),
        other => super::shared::chain(other),
    }
}

/// Bytes compared or copied at a time.
const CHUNK: u64 = 1 << 20;

/// `compare [-f FMT] [-F FMT] [-s] [-q] A B`: 0 identical, 1 different, 2
/// an error, as qemu-img's exit codes.
fn compare(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
    ];
    let p = scan(prog, args, "hf:F:T:pqsU", &longs).map_err(|Fail(m, _)| Fail(m, 2))?;
    let [a, b] = p.operands.as_slice() else {
        return Err(Fail("Expecting two image file names".into(), 2));
    };
    let fa = parse_format(p.value("f").map(str::to_owned)).map_err(|Fail(m, _)| Fail(m, 2))?;
    let fb = parse_format(
        p.value("F")
            .map(str::to_owned)
            .or(p.value("f").map(str::to_owned)),
    )
    .map_err(|Fail(m, _)| Fail(m, 2))?;
    let strict = p.has("s");
    let quiet = p.has("q");
    let open = |file: &str, format| {
        let opts = OpenOptions {
            format,
            read_only: true,
            force_share: p.has("U"),
            ..OpenOptions::default()
        };
        let file = super::shared::plain_file_name(file);
        async move {
            open_image(&file, &opts)
                .await
                .map_err(|e| Fail(could_not_open(&file, &e), 2))
        }
    };
    futures::executor::block_on(async {
        let da = open(a, fa).await?;
        let db = open(b, fb).await?;
        let (sa, sb) = (da.virtual_size(), db.virtual_size());
        let common = sa.min(sb);
        let read_err = |e: engine::Error| Fail(format!("error while reading: {e}"), 2);
        let mut ba = vec![0u8; CHUNK as usize];
        let mut bb = vec![0u8; CHUNK as usize];
        let mut pos = 0;
        while pos < common {
            let n = (common - pos).min(CHUNK) as usize;
            da.read(pos, &mut ba[..n]).await.map_err(read_err)?;
            db.read(pos, &mut bb[..n]).await.map_err(read_err)?;
            if let Some(i) = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y) {
                // qemu-img names the sector the first difference is in.
                let at = (pos + i as u64) & !511;
                if !quiet {
                    println!("Content mismatch at offset {at}!");
                }
                return Ok(1);
            }
            pos += n as u64;
        }
        if sa != sb {
            if strict {
                if !quiet {
                    println!("Strict mode: Image size mismatch!");
                }
                return Ok(1);
            }
            if !quiet {
                println!("Warning: Image size mismatch!");
            }
            let longer = if sa > sb { &da } else { &db };
            let mut pos = common;
            let end = sa.max(sb);
            while pos < end {
                let n = (end - pos).min(CHUNK) as usize;
                longer.read(pos, &mut ba[..n]).await.map_err(read_err)?;
                if let Some(i) = ba[..n].iter().position(|&x| x != 0) {
                    let at = (pos + i as u64) & !511;
                    if !quiet {
                        println!("Content mismatch at offset {at}!");
                    }
                    return Ok(1);
                }
                pos += n as u64;
            }
        }
        if !quiet {
            println!("Images are identical.");
        }
        Ok(0)
    })
}

/// `convert [-f FMT] [-O FMT] [-o OPTS] [-n] [-q] [-p] [-m N] [-W] SRC DST`.
/// Without `-n`, `tools::convert` creates the destination; with it, the
/// guest data is copied into the existing destination, zeroes written as
/// zeroes. `-p` (unless `-q`) prints qemu-img's progress lines on standard
/// output: 0 once the options are read, the percentages of
/// `tools::progress::ConvertPlan` as the copy goes, 100 when it is done,
/// and the final newline after any error message, where qemu-img prints it.
fn convert_cmd(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("target-image-opts", false, None),
        long("force-share", false, Some('U')),
        long("target-is-zero", false, None),
    ];
    let p = scan(prog, args, "hf:O:B:F:Cco:l:S:pt:T:qnm:WUr:", &longs)?;
    let mut progress = None;
    let result = convert_steps(&p, &mut progress);
    let Some(mut progress) = progress else {
        return result;
    };
    match result {
        Ok(code) => {
            let _ = progress.set(100.0);
            let _ = progress.end();
            Ok(code)
        }
        Err(Fail(msg, code)) => {
            let _ = crate::output::stdout().flush();
            eprintln!("{prog}: {msg}");
            let _ = progress.end();
            Ok(code)
        }
    }
}

/// `convert -l`'s value: `snapshot.id=I,snapshot.name=N` (either or
/// both), or a snapshot's id or name.
fn parse_snapshot_pick(v: &str) -> Result<tools::convert::SnapshotPick, Fail> {
    use tools::convert::SnapshotPick;
    if !v.starts_with("snapshot.") {
        return Ok(SnapshotPick::IdOrName(v.to_owned()));
    }
    let (mut id, mut name) = (None, None);
    for (k, val) in tools::qemu_args::split_option_list(v) {
        let val = val.unwrap_or_default();
        match k.as_str() {
            "snapshot.id" => id = Some(val),
            "snapshot.name" => name = Some(val),
            // qemu-img's two lines: the key, then the whole value.
            _ => {
                return fail(format!(
                    "Invalid parameter '{k}'\nqemu-img: Failed in parsing snapshot param '{v}'"
                ))
            }
        }
    }
    Ok(SnapshotPick::Fields { id, name })
}

/// qemu-img's progress report on standard output.
type Report = Progress<crate::output::Stdout>;

/// `convert` once its options are scanned; starts `progress` when `-p`
/// asks for it (after the checks qemu-img makes before its own report).
fn convert_steps(p: &Parsed, progress: &mut Option<Report>) -> Result<i32, Fail> {
    let Some((src, dst, mut opts)) = convert_options(p)? else {
        return Ok(0);
    };
    if p.has("p") && !p.has("q") {
        let mut report = Progress::new(crate::output::stdout(), 1.0);
        let _ = report.set(0.0);
        *progress = Some(report);
    }
    opts.destination = convert_destination(p, &opts.options)?;
    let wanted = progress.is_some();
    let mut report = |percent: f32| {
        if let Some(r) = progress.as_mut() {
            let _ = r.set(percent);
        }
    };
    let on_progress: Option<&mut dyn FnMut(f32)> = if wanted { Some(&mut report) } else { None };
    futures::executor::block_on(convert_reporting(&src, &dst, &opts, on_progress))
        .map_err(|e| Fail(convert_failure(&src, &dst, &opts.destination, &e), 1))?;
    Ok(0)
}

/// The source, the destination and the options of `convert`, checked in
/// qemu-img's order before its progress report starts; `None` when `-o
/// help` asked only for the options' help, which is then printed.
fn convert_options(p: &Parsed) -> Result<Option<(PathBuf, PathBuf, ConvertOptions)>, Fail> {
    for (flag, what) in [
        ("C", "-C (copy offloading)"),
        ("image-opts", "--image-opts"),
        ("target-image-opts", "--target-image-opts"),
    ] {
        if p.has(flag) {
            return fail(format!("convert {what} is not supported by qcsim"));
        }
    }
    let options: Vec<String> = p.values("o").into_iter().map(str::to_owned).collect();
    if options.iter().any(|o| wants_help(o)) {
        print!("{}", option_help());
        return Ok(None);
    }
    let (src, dst) = match p.operands.as_slice() {
        [s, d] => (
            super::shared::plain_file_name(s),
            super::shared::plain_file_name(d),
        ),
        [_] | [] => return fail("Expecting image file name"),
        _ => return fail("Only one source image is supported by qcsim"),
    };
    let source_format = parse_format(p.value("f").map(str::to_owned))?;
    let out_name = p.value("O").unwrap_or("raw");
    let output_format: Format = out_name
        .parse()
        .map_err(|_| Fail(format!("Unknown file format '{out_name}'"), 1))?;
    let nocache = p
        .value("t")
        .is_some_and(|t| matches!(t, "none" | "directsync"));
    let parallel = match p.value("m") {
        None => 8,
        Some(m) => match m.parse::<usize>() {
            Ok(n) if (1..=MAX_PARALLEL).contains(&n) => n,
            _ => return fail(
                "Invalid number of coroutines. Allowed number of coroutines is between 1 and 16",
            ),
        },
    };
    if p.has("n") && !options.is_empty() {
        return fail("-o has no effect when skipping image creation");
    }
    let compress = p.has("c");
    if compress && output_format == Format::Raw {
        return fail("Compression not supported for this file format");
    }
    let snapshot = p.value("l").map(parse_snapshot_pick).transpose()?;
    if snapshot.is_some() && (p.has("n") || p.has("B")) {
        return fail("convert -l with -n or -B is not supported by qcsim");
    }
    let opts = ConvertOptions {
        source_format,
        output_format,
        options,
        parallel,
        nocache,
        force_share: p.has("U"),
        compress,
        snapshot,
        destination: Destination::New,
    };
    Ok(Some((src, dst, opts)))
}

/// Where `convert` writes: into the existing destination with `-n` (which
/// wins over `-B`), onto a backing file with `-B` or `-o backing_file=`
/// (whose format must be given), else a new image.
fn convert_destination(p: &Parsed, options: &[String]) -> Result<Destination, Fail> {
    if p.has("n") {
        return Ok(Destination::Existing);
    }
    let option_set = |key: &str| {
        options
            .iter()
            .flat_map(|o| tools::qemu_args::split_option_list(o))
            .any(|(k, v)| k == key && v.is_some())
    };
    let backing_option = option_set("backing_file");
    if !p.has("B") && !backing_option {
        return Ok(Destination::New);
    }
    if !p.has("F") && !option_set("backing_fmt") {
        return fail("Use of backing file requires explicit backing format");
    }
    Ok(Destination::OntoBacking {
        backing: p.value("B").map(str::to_owned),
        backing_format: p.value("F").map(str::to_owned),
    })
}

/// A failed convert in qemu-img's words where they are known. Into a new
/// image: a compressed write the target refuses (an external data file)
/// is "error while writing at byte N" and the errno's text, the rest the
/// error's own chain. Into an existing image or onto a backing file,
/// qemu-img's "Could not open" and "error while ..." lines.
fn convert_failure(src: &Path, dst: &Path, to: &Destination, e: &ConvertError) -> String {
    match (to, e) {
        (
            Destination::New,
            ConvertError::Copy {
                step: CopyStep::Write,
                offset,
                error: error @ engine::Error::Compressed(_),
                ..
            },
        ) => error_at_byte("writing", *offset, error),
        (Destination::New, _) => super::shared::chain(e),
        (_, ConvertError::Source(o)) => could_not_open(src, o),
        (_, ConvertError::OpenDestination { error, .. }) => could_not_open(dst, error),
        (_, ConvertError::CreateOnBacking(c)) => create_error(&dst.display().to_string(), c),
        (_, ConvertError::TargetTooSmall { .. }) => {
            "error while converting: the target image is smaller than the source".to_owned()
        }
        (_, ConvertError::Plan { error, .. }) => {
            format!("error while reading block status: {error}")
        }
        (
            _,
            ConvertError::Copy {
                step,
                offset,
                error,
                ..
            },
        ) => match step {
            CopyStep::Status => format!("error while reading: {error}"),
            CopyStep::Read => error_at_byte("reading", *offset, error),
            CopyStep::Write => error_at_byte("writing", *offset, error),
        },
        (_, ConvertError::Close { error, .. }) => format!("error while closing: {error}"),
        (_, other) => super::shared::chain(other),
    }
}
