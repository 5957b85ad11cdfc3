//! `qemu-img snapshot [-f FMT] [-U] [-q] [-l | -a NAME | -c NAME | -d NAME]
//! FILE` on qcsim's engine: the syntax, wording and exit codes qemu-img
//! has; the work is `tools::snapshot`'s. With no action it lists, as
//! qemu-img does; a list of an image without snapshots prints nothing.

use std::path::Path;

use tools::files::OpenOptions;
use tools::snapshot::{
    apply_snapshot, create_snapshot, delete_snapshot, list_snapshots, snapshot_table, SnapshotError,
};

use super::getopt::{getopt, long};
use super::img_common::{could_not_open, image_name, parse_format, Fail};

/// Longest name qemu-img keeps: its snapshot name buffer holds 255 bytes.
const MAX_NAME: usize = 255;

enum Action {
    List,
    Apply(String),
    Create(String),
    Delete(String),
}

pub(super) fn snapshot(prog: &str, args: &[String]) -> Result<i32, Fail> {
    let usage = |msg: &str| {
        Fail(
            format!("{msg}\nTry '{prog} snapshot --help' for more info"),
            1,
        )
    };
    let longs = [
        long("help", false, Some('h')),
        long("object", true, None),
        long("image-opts", false, None),
        long("force-share", false, Some('U')),
    ];
    let p = match getopt(args, "la:c:d:f:hqU", &longs) {
        Ok(p) => p,
        Err(e) => {
            // getopt's own complaint carries the subcommand, not "qemu-img:".
            eprintln!("{prog} snapshot: {e}\nTry '{prog} snapshot --help' for more info");
            return Ok(1);
        }
    };
    let mut action = None;
    for o in &p.opts {
        let value = || o.value.clone().unwrap_or_default();
        let a = match o.name.as_str() {
            "l" => Action::List,
            "a" => Action::Apply(value()),
            "c" => Action::Create(value()),
            "d" => Action::Delete(value()),
            _ => continue,
        };
        if action.is_some() {
            return Err(usage("Cannot mix '-l', '-a', '-c', '-d'"));
        }
        action = Some(a);
    }
    let [operand] = p.operands.as_slice() else {
        return Err(usage("Expecting one image file name"));
    };
    let (file, driver) = image_name(&p, operand)?;
    let opts = OpenOptions {
        format: parse_format(p.value("f").map(str::to_owned).or(driver))?,
        force_share: p.has("U"),
        ..OpenOptions::default()
    };
    let action = action.unwrap_or(Action::List);
    if opts.force_share && !matches!(action, Action::List) {
        return Err(Fail(
            format!(
                "Could not open '{}': force-share=on can only be used with read-only images",
                file.display()
            ),
            1,
        ));
    }
    run(&file, &opts, action)?;
    Ok(0)
}

/// Carry out `action` on the image `file`, as `opts` opens it.
fn run(file: &Path, opts: &OpenOptions, action: Action) -> Result<(), Fail> {
    match action {
        Action::List => {
            let list = futures::executor::block_on(list_snapshots(file, opts))
                .map_err(|e| open_fail(file, &e))?;
            if !list.is_empty() {
                print!("{}", snapshot_table(&list));
            }
        }
        Action::Create(name) => {
            let name = cut(&name);
            futures::executor::block_on(create_snapshot(file, opts, name, tools::snapshot::now()))
                .map_err(|e| {
                    open_fail_or(file, &e, || {
                        format!("Could not create snapshot '{name}': {}", reason(&e))
                    })
                })?;
        }
        Action::Apply(name) => {
            futures::executor::block_on(apply_snapshot(file, opts, &name)).map_err(|e| {
                open_fail_or(file, &e, || match e {
                    // The block layer answers before any driver is asked.
                    SnapshotError::NotSupported => format!(
                        "Could not apply snapshot '{name}': Block driver does not support snapshots"
                    ),
                    _ => format!(
                        "Could not apply snapshot '{name}': Failed to load snapshot: {}",
                        reason(&e)
                    ),
                })
            })?;
        }
        Action::Delete(name) => {
            futures::executor::block_on(delete_snapshot(file, opts, &name)).map_err(|e| {
                open_fail_or(file, &e, || {
                    format!("Could not delete snapshot '{name}': {}", reason(&e))
                })
            })?;
        }
    }
    Ok(())
}

/// `name` cut to what qemu-img keeps (at a character boundary).
fn cut(name: &str) -> &str {
    if name.len() <= MAX_NAME {
        return name;
    }
    let mut end = MAX_NAME;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

/// An open failure worded as qemu-img words it, else `other()`.
fn open_fail_or(file: &Path, e: &SnapshotError, other: impl FnOnce() -> String) -> Fail {
    match e {
        SnapshotError::Open(_) => open_fail(file, e),
        _ => Fail(other(), 1),
    }
}

fn open_fail(file: &Path, e: &SnapshotError) -> Fail {
    match e {
        SnapshotError::Open(o) => Fail(could_not_open(file, o), 1),
        other => Fail(super::shared::chain(other), 1),
    }
}

/// Why an operation failed, in the C library's words where QEMU's driver
/// returns an errno.
fn reason(e: &SnapshotError) -> String {
    use engine::{Error, SnapshotError as E};
    match e {
        SnapshotError::NotSupported | SnapshotError::Engine(Error::Snapshot(E::DataFile)) => {
            "Operation not supported".into()
        }
        SnapshotError::Engine(Error::Snapshot(E::NotFound(_))) => {
            "No such file or directory".into()
        }
        SnapshotError::Engine(Error::Snapshot(E::TooMany { .. })) => "File too large".into(),
        other => super::shared::chain(other),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_names_are_cut_as_qemu_img_cuts_them() {
        let long = "n".repeat(300);
        assert_eq!(super::cut(&long).len(), 255);
        let wide = "é".repeat(200);
        assert_eq!(super::cut(&wide).len(), 254);
        assert_eq!(super::cut("short"), "short");
    }
}
