//! qemu-img's command line on qcsim's engine: `qcsim img ARGS` and qcsim
//! invoked as `qemu-img`. The subcommands qcsim has (`create`, `check`,
//! `info`) take qemu-img's options and print what qemu-img prints, with
//! its `qemu-img: ` prefix and exit codes (1 for usage errors and failures,
//! check's 0/1/2/3, and 63 for a check of a format that has none); the
//! others are refused with a message saying so.

use std::io::Write;
use std::path::{Path, PathBuf};

use tools::check::{check_file, CheckOptions, RepairMode};
use tools::create::{prepare_image, CreateImageError, CreateImageOptions};
use tools::files::{probe_path, Format, Probed};
use tools::info::{info, InfoOptions};
use tools::qemu_args::{option_help, wants_help, ArgError};

use super::getopt::{getopt, long, Long, Parsed};

/// qemu-img's exit code for `check` on a format without consistency
/// checks.
const CHECK_NOT_SUPPORTED: i32 = 63;

/// A failure: the message (after the `qemu-img: ` prefix) and exit code.
struct Fail(String, i32);

fn fail<T>(msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(msg.into(), 1))
}

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
        "-h" | "--help" => {
            println!("{prog}: qcsim's stand-in for qemu-img: create, check, info");
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

fn scan(prog: &str, args: &[String], short: &str, longs: &[Long]) -> Result<Parsed, Fail> {
    getopt(args, short, longs)
        .map_err(|e| Fail(format!("{e}\nTry '{prog} --help' for more information"), 1))
}

/// `--object` is accepted and ignored (qcsim has no secrets or other
/// objects); `--image-opts` names the file by `filename=`.
fn image_name(p: &Parsed, operand: &str) -> Result<(PathBuf, Option<String>), Fail> {
    if !p.has("image-opts") {
        return Ok((PathBuf::from(operand), None));
    }
    let mut file = None;
    let mut driver = None;
    for kv in operand.split(',') {
        match kv.split_once('=') {
            Some(("file.filename" | "filename", v)) => file = Some(PathBuf::from(v)),
            Some(("driver", d)) => driver = Some(d.to_owned()),
            _ => {}
        }
    }
    match file {
        Some(f) => Ok((f, driver)),
        None => fail("A block device must be specified for \"file\""),
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
        if tools::qemu_args::parse_size(s).is_err() || s.starts_with('-') {
            return fail(
                "Invalid image size specified. You may use k, M, G, T, P or E suffixes for\n\
                 qemu-img: kilobytes, megabytes, gigabytes, terabytes, petabytes and exabytes.",
            );
        }
    }
    let opts = CreateImageOptions {
        format,
        options,
        size,
        backing: p.value("b").map(str::to_owned),
        backing_format: p.value("F").map(str::to_owned),
        unsafe_backing: p.has("u"),
    };
    let path = PathBuf::from(&file);
    futures::executor::block_on(async {
        let prepared = prepare_image(&path, &opts)
            .await
            .map_err(|e| Fail(create_error(&file, &e), 1))?;
        if !p.has("q") {
            println!("{}", prepared.formatting_line());
        }
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
        } => {
            let mut r = reason.clone();
            if let Some(first) = r.get(..1) {
                r.replace_range(..1, &first.to_uppercase());
            }
            format!("{file}: {r}")
        }
        CreateImageError::Options { error, .. } => format!("{file}: {error}"),
        CreateImageError::BackingOpen { error, .. } => format!(
            "{file}: {}\nCould not open backing image.",
            super::open_error_text(Path::new(file), error)
        ),
        // The engine's and tools' messages name the file themselves.
        other => super::chain(other),
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
            Err(e) => {
                return fail(format!(
                    "Could not open '{}': {}",
                    file.display(),
                    super::open_error_text(&file, &e)
                ))
            }
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
    let outcome = check_file(&file, &opts).map_err(|e| Fail(e.to_string(), 1))?;
    for message in outcome.finding_messages() {
        eprintln!("{message}");
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
    if p.has("backing-chain") {
        return fail("info --backing-chain is not supported by qcsim");
    }
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
        tools::info::InfoError::Open(o) => format!(
            "Could not open '{}': {}",
            file.display(),
            super::open_error_text(file, o)
        ),
        other => other.to_string(),
    }
}
