//! `qemu-img measure [--output=human|json] [-O FMT] [-o OPTIONS] (--size
//! SIZE | [-f FMT] [-l SNAPSHOT] FILENAME)` on qcsim's engine: the syntax,
//! the order qemu-img checks it in, its wording and exit codes. The
//! arithmetic and the source's block status are `tools::measure`'s;
//! `-l` names an internal snapshot by id or name, or by `snapshot.id=` and
//! `snapshot.name=`.

use std::path::Path;

use tools::files::OpenOptions;
use tools::measure::{measure as measure_image, MeasureError, SnapshotRef, Source, Target};

use super::getopt::{getopt, long, Parsed};
use super::img_common::{could_not_open, image_name, parse_format, parse_image_size, Fail};

/// Formats QEMU knows whose drivers cannot measure.
const UNMEASURED: &[&str] = &[
    "vmdk",
    "vdi",
    "vhdx",
    "vpc",
    "qcow",
    "qed",
    "parallels",
    "bochs",
    "cloop",
    "dmg",
    "vvfat",
];

pub(super) fn measure(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let try_help = format!("Try '{prog} measure --help' for more info");
    let longs = [
        long("help", false, Some('h')),
        long("image-opts", false, None),
        long("object", true, None),
        long("output", true, None),
        long("size", true, None),
        long("force-share", false, Some('U')),
    ];
    let p = match getopt(args, "hf:O:o:l:U", &longs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{prog} measure: {e}\n{try_help}");
            return Ok(1);
        }
    };
    let flags = Flags::read(&p, &try_help)?;
    let source = source(&p, flags.size, flags.snapshot)?;
    let target = match p.value("O").unwrap_or("raw") {
        "raw" => Target::Raw,
        "qcow2" => Target::Qcow2,
        f if UNMEASURED.contains(&f) => {
            return Err(Fail(
                format!("Block driver '{f}' does not support size measurement"),
                1,
            ))
        }
        f => return Err(Fail(format!("Unknown file format '{f}'"), 1)),
    };
    // The ids of the secrets --object defines (qcsim keeps no objects).
    let secrets: Vec<String> = p
        .values("object")
        .into_iter()
        .filter(|o| o.starts_with("secret,"))
        .flat_map(|o| o.split(','))
        .filter_map(|kv| kv.strip_prefix("id=").map(str::to_owned))
        .collect();
    let m = futures::executor::block_on(measure_image(&source, target, &flags.options, &secrets))
        .map_err(|e| {
        let msg = match (&e, &source) {
            (MeasureError::Open(o), Source::Image { path, .. }) => could_not_open(path, o),
            (MeasureError::Open(o), Source::Size(_)) => could_not_open(Path::new(""), o),
            (other, _) => other.to_string(),
        };
        Fail(msg, 1)
    })?;
    if flags.json {
        print!("{}", m.json());
    } else {
        print!("{}", m.human());
    }
    Ok(0)
}

/// The options qemu-img checks as it reads each, in order.
struct Flags {
    size: Option<u64>,
    json: bool,
    options: Vec<String>,
    snapshot: Option<SnapshotRef>,
}

impl Flags {
    fn read(p: &Parsed, try_help: &str) -> Result<Flags, Fail> {
        let mut f = Flags {
            size: None,
            json: false,
            options: Vec::new(),
            snapshot: None,
        };
        for o in &p.opts {
            let v = o.value.clone().unwrap_or_default();
            match o.name.as_str() {
                "size" => f.size = Some(parse_image_size(&v)?),
                "output" => match v.as_str() {
                    "human" => f.json = false,
                    "json" => f.json = true,
                    _ => {
                        return Err(Fail(
                            format!("--output expects 'human' or 'json' not '{v}'\n{try_help}"),
                            1,
                        ))
                    }
                },
                "l" => f.snapshot = Some(parse_snapshot(&v)?),
                "o" => {
                    if v.is_empty() || (v.ends_with(',') && !v.ends_with(",,")) {
                        return Err(Fail(format!("Invalid option list: {v}"), 1));
                    }
                    f.options.push(v);
                }
                _ => {}
            }
        }
        Ok(f)
    }
}

/// What is measured: `--size` or the one filename (opened first, as
/// qemu-img opens it before it looks at `-O`).
fn source(p: &Parsed, size: Option<u64>, snapshot: Option<SnapshotRef>) -> Result<Source, Fail> {
    if p.operands.len() > 1 {
        return Err(Fail("At most one filename argument is allowed.".into(), 1));
    }
    let operand = p.operands.first();
    if operand.is_none() && (p.has("image-opts") || p.has("f") || p.has("l")) {
        return Err(Fail(
            "--image-opts, -f, and -l require a filename argument.".into(),
            1,
        ));
    }
    match (operand, size) {
        (Some(_), Some(_)) => Err(Fail(
            "--size N cannot be used together with a filename.".into(),
            1,
        )),
        (None, None) => Err(Fail(
            "Either --size N or one filename must be specified.".into(),
            1,
        )),
        (None, Some(s)) => Ok(Source::Size(s)),
        (Some(operand), None) => {
            let (path, driver) = image_name(p, operand)?;
            let opts = OpenOptions {
                format: parse_format(p.value("f").map(str::to_owned).or(driver))?,
                force_share: p.has("U"),
                read_only: true,
                ..OpenOptions::default()
            };
            futures::executor::block_on(tools::files::open_image(&path, &opts))
                .map_err(|e| Fail(could_not_open(&path, &e), 1))?;
            Ok(Source::Image {
                path,
                opts,
                snapshot,
            })
        }
    }
}

/// `-l`: `snapshot.id=ID,snapshot.name=NAME` (either or both), or a plain
/// id or name.
fn parse_snapshot(v: &str) -> Result<SnapshotRef, Fail> {
    if !v.starts_with("snapshot.") {
        return Ok(SnapshotRef::IdOrName(v.to_owned()));
    }
    let (mut id, mut name) = (None, None);
    for (k, val) in tools::qemu_args::split_option_list(v) {
        if val.is_none() {
            // qemu's option parser still reads a bare key as a switch.
            eprintln!(
                "qemu-img: warning: short-form boolean option '{k}' deprecated\nPlease use {k}=on instead"
            );
        }
        match k.as_str() {
            "snapshot.id" => id = val,
            "snapshot.name" => name = val,
            _ => {
                return Err(Fail(
                    format!(
                        "Invalid parameter '{k}'\nqemu-img: Failed in parsing snapshot param '{v}'"
                    ),
                    1,
                ))
            }
        }
    }
    Ok(SnapshotRef::Given { id, name })
}
