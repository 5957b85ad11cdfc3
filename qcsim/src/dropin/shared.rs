//! What the drop-in `qemu-img` and `qemu-io` share: QEMU's words for an
//! error and its sources, an OS error and an open failure, the block
//! drivers QEMU knows by name, the file a command-line name stands for,
//! qemu-io's `-s` snapshot copy, and QEMU's cache modes. Below every
//! module of the drop-in layer.

use std::path::{Path, PathBuf};

use tools::files::OpenError;

/// The block drivers QEMU's tools know by name (`qemu-img --help` lists
/// them under "Supported formats"): a name among them that qcsim does not
/// open is still a valid name to store, as in `rebase -u -F host_device`.
const QEMU_DRIVERS: &[&str] = &[
    "blkdebug",
    "blklogwrites",
    "blkverify",
    "bochs",
    "cloop",
    "compress",
    "copy-before-write",
    "copy-on-read",
    "dmg",
    "file",
    "ftp",
    "ftps",
    "gluster",
    "host_cdrom",
    "host_device",
    "http",
    "https",
    "iscsi",
    "iser",
    "luks",
    "nbd",
    "nfs",
    "null-aio",
    "null-co",
    "nvme",
    "parallels",
    "preallocate",
    "qcow",
    "qcow2",
    "qed",
    "quorum",
    "raw",
    "rbd",
    "replication",
    "snapshot-access",
    "ssh",
    "throttle",
    "vdi",
    "vhdx",
    "vmdk",
    "vpc",
    "vvfat",
];

/// Whether QEMU's tools know `name` as a block driver.
pub fn is_qemu_driver(name: &str) -> bool {
    QEMU_DRIVERS.contains(&name)
}

/// Why `name` does not open as a format: QEMU's words for a name no QEMU
/// driver has; for one QEMU has but qcsim does not open, qcsim's, which
/// say what it opens.
pub fn format_error_text(name: &str) -> String {
    if is_qemu_driver(name) {
        tools::files::UnknownFormat(name.to_owned()).to_string()
    } else {
        format!("Unknown driver '{name}'")
    }
}

/// QEMU's cache modes (`-t`), as what they mean here: O_DIRECT, and a
/// flush after every write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheMode {
    pub direct: bool,
    pub writethrough: bool,
}

impl CacheMode {
    /// `none`/`off`, `directsync`, `writeback`, `writethrough`, `unsafe`.
    pub fn parse(s: &str) -> Option<CacheMode> {
        let (direct, writethrough) = match s {
            "none" | "off" => (true, false),
            "directsync" => (true, true),
            "writeback" | "unsafe" => (false, false),
            "writethrough" => (false, true),
            _ => return None,
        };
        Some(CacheMode {
            direct,
            writethrough,
        })
    }
}

/// The file a filename on the command line names: a `blkdebug::` node
/// with no configuration (it passes requests through) and a `file:`
/// protocol prefix are dropped, as QEMU's file driver drops the latter.
/// What is left may itself look like a protocol prefix (a colon in its
/// first component); QEMU then names it with a leading `./`, and so does
/// this.
pub fn plain_file_name(name: &str) -> PathBuf {
    // blkdebug with no configuration passes requests through: its file.
    let name = name.strip_prefix("blkdebug::").unwrap_or(name);
    let Some(rest) = name.strip_prefix("file:") else {
        return PathBuf::from(name);
    };
    let first = rest.split('/').next().unwrap_or("");
    if !rest.starts_with('/') && first.contains(':') {
        return PathBuf::from(format!("./{rest}"));
    }
    PathBuf::from(rest)
}

/// An error and its sources, joined by ": ".
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// The C library's text for an OS error (Rust's display adds the number).
pub fn strerror(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(at) => s[..at].to_owned(),
        None => s,
    }
}

/// An open failure as QEMU words it after its "can't open ...: " (or
/// "Could not open 'F': ..."): `file` is the name the user gave.
pub fn open_error_text(file: &Path, e: &OpenError) -> String {
    use engine::dev::FileOpenError;
    match e {
        // The name as opened: the one given, or a backing file's as
        // resolved against its image, as QEMU names it.
        OpenError::File(FileOpenError::Open { path, error }) => {
            let _ = file;
            format!("Could not open '{}': {}", path.display(), strerror(error))
        }
        OpenError::Lock(l) => l.to_string(),
        OpenError::File(FileOpenError::Lock(l)) => l.to_string(),
        OpenError::Format { error, .. } => format_error_text(&error.0),
        // Not a qcow2 image where one was asked for: the driver's words.
        OpenError::Engine {
            error: engine::Error::Format { field, .. },
            ..
        } if field == "magic" => "Image is not in qcow2 format".to_owned(),
        OpenError::Engine { error, .. } => error.to_string(),
        OpenError::Backing { name, error, .. } => {
            format!(
                "Could not open backing file: {}",
                open_error_text(Path::new(name), error)
            )
        }
        other => other.to_string(),
    }
}

/// A private copy of `file` next to it, for qemu-io's `-s`: writes go to
/// the copy, which is deleted on close, and the image is left as it was.
/// Next to it, so that a relative backing file name resolves the same.
pub fn copy_for_snapshot(file: &Path) -> std::io::Result<PathBuf> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let copy = file.with_file_name(format!(".{name}.snapshot-{}", std::process::id()));
    std::fs::copy(file, &copy)?;
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_prefix_is_dropped() {
        assert_eq!(
            plain_file_name("file:/tmp/a:b.qcow2"),
            PathBuf::from("/tmp/a:b.qcow2")
        );
        assert_eq!(
            plain_file_name("file:image:top.qcow2"),
            PathBuf::from("./image:top.qcow2")
        );
        assert_eq!(plain_file_name("file:t.qcow2"), PathBuf::from("t.qcow2"));
        assert_eq!(plain_file_name("t.qcow2"), PathBuf::from("t.qcow2"));
    }

    #[test]
    fn cache_modes_mean_what_qemu_means() {
        assert_eq!(
            CacheMode::parse("none"),
            Some(CacheMode {
                direct: true,
                writethrough: false
            })
        );
        assert_eq!(
            CacheMode::parse("writethrough").map(|c| c.writethrough),
            Some(true)
        );
        assert_eq!(CacheMode::parse("writeback"), Some(CacheMode::default()));
        assert_eq!(CacheMode::parse("bogus"), None);
    }
}
