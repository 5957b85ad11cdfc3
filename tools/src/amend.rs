//! `qemu-img amend` for qcow2: the `-o` options an existing image can
//! change, checked as QEMU's driver checks them and carried out in its
//! order (upgrade first, then lazy refcounts, the size, and a downgrade
//! last), each change by the engine (`Image::upgrade_to_v3`,
//! `set_refcount_bits`, `set_lazy_refcounts`, `downgrade_to_v2`; the size
//! by `resize`). The
//! error messages are qemu-img's words; what qcsim cannot do yet
//! (renaming a data file) is refused in its own. A `refcount_bits`
//! change (`Image::set_refcount_bits`) reports no percentages between 0
//! and 100, where QEMU's walks report many.

use std::path::{Path, PathBuf};

use crate::files::{open_image, Disk, OpenError, OpenOptions};
use crate::qemu_args::{parse_size, split_option_list};
use crate::resize::{resize_image, ResizeError, SizeChange};

/// The options amend can take, in the order QEMU's driver looks at them.
const AMEND_KEYS: &[&str] = &[
    "encrypt.state",
    "encrypt.keyslot",
    "encrypt.old-secret",
    "encrypt.new-secret",
    "encrypt.iter-time",
    "size",
    "compat",
    "backing_file",
    "backing_fmt",
    "data_file",
    "data_file_raw",
    "lazy_refcounts",
    "refcount_bits",
];

/// Options qcow2 takes only when an image is created.
const CREATE_ONLY_KEYS: &[&str] = &[
    "encryption",
    "encrypt.format",
    "encrypt.key-secret",
    "encrypt.cipher-alg",
    "encrypt.cipher-mode",
    "encrypt.ivgen-alg",
    "encrypt.ivgen-hash-alg",
    "encrypt.hash-alg",
    "cluster_size",
    "extended_l2",
    "preallocation",
    "compression_type",
];

/// qemu's explanation after a size it cannot parse.
const SIZE_HELP: &str =
    "Optional suffix k, M, G, T, P or E means kilo-, mega-, giga-, tera-, peta-\n\
and exabytes, respectively.";

/// Why an amendment failed, in qemu-img's words (its `qemu-img: ` prefix
/// the caller's).
#[derive(Debug, thiserror::Error)]
pub enum AmendImageError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("Format driver '{0}' does not support option amendment")]
    NotSupported(&'static str),
    /// A bad `-o` list: the message (with any hint line).
    #[error("{0}")]
    Options(String),
    /// The driver's refusal of a value or a change.
    #[error("{0}")]
    Driver(String),
    #[error("{path}: {error}")]
    Engine {
        path: PathBuf,
        #[source]
        error: engine::Error,
    },
    #[error(transparent)]
    Resize(#[from] ResizeError),
}

/// The parsed `-o` options, each `None` unless given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AmendOptions {
    pub size: Option<u64>,
    pub compat: Option<String>,
    pub backing_file: Option<String>,
    pub backing_fmt: Option<String>,
    pub data_file: Option<String>,
    pub data_file_raw: Option<bool>,
    pub lazy_refcounts: Option<bool>,
    pub refcount_bits: Option<u64>,
    /// Whether some `encrypt.*` option was given.
    pub encryption: bool,
}

/// The `-o` lists as qemu's option parser reads them for amend: each
/// key must be an amend option (a creation-only one says so), each value
/// of its type; later values override earlier ones.
pub fn parse_amend_options(lists: &[String]) -> Result<AmendOptions, AmendImageError> {
    let mut o = AmendOptions::default();
    let bad = |m: String| Err(AmendImageError::Options(m));
    for list in lists {
        for (key, value) in split_option_list(list) {
            if !AMEND_KEYS.contains(&key.as_str()) {
                let hint = if CREATE_ONLY_KEYS.contains(&key.as_str()) {
                    "\nThis option is only supported for image creation"
                } else {
                    ""
                };
                return bad(format!("Invalid parameter '{key}'{hint}"));
            }
            let value = value.unwrap_or_else(|| "on".to_owned());
            let switch = |v: &str| match v {
                "on" => Ok(true),
                "off" => Ok(false),
                _ => Err(AmendImageError::Options(format!(
                    "Parameter '{key}' expects 'on' or 'off'"
                ))),
            };
            match key.as_str() {
                "size" => match parse_size(&value) {
                    Ok(v) => o.size = Some(v),
                    Err(_) => {
                        return bad(format!(
                            "Parameter 'size' expects a non-negative number below 2^64\n{SIZE_HELP}"
                        ))
                    }
                },
                "compat" => o.compat = Some(value),
                "backing_file" => o.backing_file = Some(value),
                "backing_fmt" => o.backing_fmt = Some(value),
                "data_file" => o.data_file = Some(value),
                "data_file_raw" => o.data_file_raw = Some(switch(&value)?),
                "lazy_refcounts" => o.lazy_refcounts = Some(switch(&value)?),
                "refcount_bits" => match value.parse::<u64>() {
                    Ok(v) => o.refcount_bits = Some(v),
                    Err(_) => return bad(format!("Parameter '{key}' expects a number")),
                },
                "encrypt.keyslot" | "encrypt.iter-time" if value.parse::<u64>().is_err() => {
                    return bad(format!("Parameter '{key}' expects a number"))
                }
                _ => o.encryption = true,
            }
        }
    }
    Ok(o)
}

/// Amend the image at `path` (opened with `opts`) as `amend` asks.
/// `progress` is told the percentages qemu-img's `-p` reports, the first
/// (0) once the image is open and the options are read.
pub async fn amend_image(
    path: &Path,
    opts: &OpenOptions,
    lists: &[String],
    progress: &mut dyn FnMut(f32),
) -> Result<(), AmendImageError> {
    let opts = OpenOptions {
        read_only: false,
        ..opts.clone()
    };
    let mut disk = open_image(path, &opts).await?;
    let img = match &mut disk {
        Disk::Raw(_) => return Err(AmendImageError::NotSupported("raw")),
        Disk::Qcow2(img) => img,
    };
    let a = parse_amend_options(lists)?;
    // Where qemu-img reports its first percentage.
    progress(0.0);
    let h = img.header();
    let driver = |m: &str| Err(AmendImageError::Driver(m.to_owned()));
    if a.encryption {
        return driver("Can't amend encryption options - encryption not present");
    }
    let old_version = h.version;
    let new_version = match a.compat.as_deref() {
        None => old_version,
        Some("0.10" | "v2") => 2,
        Some("1.1" | "v3") => 3,
        Some(other) => return driver(&format!("Unknown compatibility level {other}")),
    };
    let refcount_bits = a.refcount_bits.unwrap_or(h.refcount_bits() as u64);
    if refcount_bits == 0 || refcount_bits > 64 || !refcount_bits.is_power_of_two() {
        return driver("Refcount width must be a power of two and may not exceed 64 bits");
    }
    if a.data_file.is_some() && !h.has_data_file() {
        return driver("data-file can only be set for images that use an external data file");
    }
    if a.data_file_raw == Some(true) && !h.data_file_raw() {
        return driver("data-file-raw cannot be set on existing images");
    }
    let engine_err = |error| AmendImageError::Engine {
        path: path.to_owned(),
        error,
    };
    if new_version > old_version {
        progress(0.0);
        img.upgrade_to_v3().await.map_err(engine_err)?;
        progress(50.0);
        progress(100.0);
    }
    if refcount_bits != h.refcount_bits() as u64 {
        if new_version < 3 && refcount_bits != 16 {
            return driver(
                "Refcount widths other than 16 bits require compatibility level 1.1 or above (use compat=1.1 or greater)",
            );
        }
        img.set_refcount_bits(refcount_bits as u32)
            .await
            .map_err(engine_err)?;
    }
    if let Some(name) = &a.data_file {
        if Some(name.as_str()) != h.data_file().as_deref() {
            return driver("qcsim cannot change the data file name of an image yet");
        }
    }
    if a.data_file_raw == Some(false) && h.data_file_raw() {
        return driver("qcsim cannot clear data_file_raw yet");
    }
    if a.backing_file.is_some() || a.backing_fmt.is_some() {
        let current_fmt = h.backing_format();
        if a.backing_file != h.backing_file || a.backing_fmt != current_fmt {
            return driver("Cannot amend the backing file\nYou can use 'qemu-img rebase' instead.");
        }
    }
    if let Some(on) = a.lazy_refcounts {
        if on != h.lazy_refcounts() {
            if on && new_version < 3 {
                return Err(engine_err(engine::AmendError::LazyNeedsV3.into()));
            }
            img.set_lazy_refcounts(on).await.map_err(engine_err)?;
        }
    }
    disk.close().await.map_err(engine_err)?;
    if let Some(size) = a.size.filter(|&s| s != 0) {
        resize_image(path, &opts, SizeChange::To(size), true).await?;
    }
    if new_version < old_version {
        let mut disk = open_image(path, &opts).await?;
        let Disk::Qcow2(img) = &mut disk else {
            unreachable!("a qcow2 image stays qcow2")
        };
        let mut report = |done: u64, total: u64| {
            progress(100.0 * done as f32 / total as f32);
        };
        img.downgrade_to_v2(&mut report).await.map_err(engine_err)?;
        disk.close().await.map_err(engine_err)?;
    }
    Ok(())
}
