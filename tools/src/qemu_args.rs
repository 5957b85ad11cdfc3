//! The argument syntax the file commands share with qemu-img and qemu-io:
//! sizes with binary suffixes (`512`, `64k`, `1.5M`, `0x200`), `on`/`off`
//! switches, and `-o key=value,...` image option lists, with their checks
//! and messages.

use engine::format::header::CompressionType;
use engine::{Compat, CreateOptions, Preallocation};

/// Why a size, switch or option list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("invalid size '{0}': expected a number with an optional suffix k, M, G, T, P or E")]
    Size(String),
    #[error("size '{0}' is too large")]
    SizeTooLarge(String),
    /// QEMU's words: the value given is not repeated.
    #[error("Parameter '{key}' expects 'on' or 'off'")]
    Switch { key: String, value: String },
    #[error("invalid parameter '{0}'")]
    UnknownOption(String),
    #[error("parameter '{0}' needs a value (key=value)")]
    MissingValue(String),
    #[error("parameter '{key}': {reason}")]
    BadValue { key: String, reason: String },
    #[error("Parameter '{0}' expects a number")]
    NotANumber(String),
    #[error("{0}")]
    Conflict(String),
    #[error("invalid image size {0}: it must be between 0 and {MAX_IMAGE_SIZE} bytes (the largest file offset)")]
    ImageSize(u64),
}

/// Largest virtual disk (and raw file): the largest offset a file can
/// have, as qemu-img bounds image sizes.
pub const MAX_IMAGE_SIZE: u64 = i64::MAX as u64;

/// `size` if an image may be that large.
pub fn check_image_size(size: u64) -> Result<u64, ArgError> {
    if size > MAX_IMAGE_SIZE {
        return Err(ArgError::ImageSize(size));
    }
    Ok(size)
}

/// Parse a size as qemu's `qemu_strtosz` does: a decimal number (a
/// fraction only with a unit suffix) or a `0x` hex number, then an optional
/// binary suffix `B`, `k`, `M`, `G`, `T`, `P` or `E`, in either case.
pub fn parse_size(s: &str) -> Result<u64, ArgError> {
    let bad = || ArgError::Size(s.to_owned());
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        return u64::from_str_radix(hex, 16).map_err(|_| ArgError::SizeTooLarge(s.to_owned()));
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (int_part, rest) = s.split_at(digits_end);
    if int_part.is_empty() {
        return Err(bad());
    }
    let (frac_part, suffix) = match rest.strip_prefix('.') {
        Some(r) => {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            if end == 0 {
                return Err(bad());
            }
            r.split_at(end)
        }
        None => ("", rest),
    };
    let shift = match suffix {
        "" | "b" | "B" => 0,
        "k" | "K" => 10,
        "m" | "M" => 20,
        "g" | "G" => 30,
        "t" | "T" => 40,
        "p" | "P" => 50,
        "e" | "E" => 60,
        _ => return Err(bad()),
    };
    if !frac_part.is_empty() && shift == 0 {
        // A fraction of a byte means nothing.
        return Err(bad());
    }
    let too_large = || ArgError::SizeTooLarge(s.to_owned());
    let int: u128 = int_part.parse().map_err(|_| too_large())?;
    let mut total = int.checked_shl(shift).ok_or_else(too_large)?;
    if !frac_part.is_empty() {
        // Keep 18 fraction digits at most: beyond that a digit is worth less
        // than a byte even with the largest unit.
        let frac = &frac_part[..frac_part.len().min(18)];
        let num: u128 = frac.parse().map_err(|_| bad())?;
        let den = 10u128.pow(frac.len() as u32);
        total += (num << shift) / den;
    }
    u64::try_from(total).map_err(|_| too_large())
}

/// Parse an on/off switch value as qemu's option parser does.
pub fn parse_switch(key: &str, value: &str) -> Result<bool, ArgError> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(ArgError::Switch {
            key: key.to_owned(),
            value: value.to_owned(),
        }),
    }
}

/// Split a `key=value,key=value` list; `,,` is a literal comma in a value.
/// A key without `=` is returned with no value.
pub fn split_option_list(list: &str) -> Vec<(String, Option<String>)> {
    let mut items = Vec::new();
    let mut current = String::new();
    let mut chars = list.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                current.push(',');
                continue;
            }
            items.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    items.push(current);
    items
        .into_iter()
        .filter(|item| !item.is_empty())
        .map(|item| match item.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (item, None),
        })
        .collect()
}

/// The qcow2 creation options named by qemu-img's `-o`, each unset until
/// given. Later settings override earlier ones, as with repeated `-o`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageOpts {
    pub size: Option<u64>,
    pub cluster_size: Option<u64>,
    /// As given: `check_create_options` checks the width.
    pub refcount_bits: Option<i64>,
    pub compat: Option<Compat>,
    /// `compat` as it was spelled (`v2`, `0.10`, ...), which qemu-img echoes.
    pub compat_name: Option<String>,
    pub lazy_refcounts: Option<bool>,
    pub extended_l2: Option<bool>,
    pub backing_file: Option<String>,
    pub backing_fmt: Option<String>,
    pub compression_type: Option<CompressionType>,
    /// External data file name, stored as given.
    pub data_file: Option<String>,
    pub data_file_raw: Option<bool>,
    pub preallocation: Option<Preallocation>,
    /// The file protocol's `nocow` and `extent_size_hint`: attributes of
    /// the host file that QEMU sets where the file system has them. Taken,
    /// checked and echoed as qemu-img does; qcsim sets no file attributes,
    /// so they change nothing else.
    pub nocow: Option<bool>,
    pub extent_size_hint: Option<u64>,
}

/// The `-o` names accepted for qcow2, with a line of help each.
pub const QCOW2_OPTION_HELP: [(&str, &str); 14] = [
    ("backing_file", "file name of a base image"),
    (
        "backing_fmt",
        "image format of the base image (raw or qcow2)",
    ),
    (
        "cluster_size",
        "qcow2 cluster size (512 to 2M, a power of two)",
    ),
    ("compat", "compatibility level (v2, 0.10, v3, 1.1)"),
    ("compression_type", "compression type (zlib or zstd)"),
    ("data_file", "file name of an external data file"),
    (
        "data_file_raw",
        "the external data file is a valid raw image (on/off)",
    ),
    ("extended_l2", "extended L2 tables (on/off)"),
    ("lazy_refcounts", "postpone refcount updates (on/off)"),
    (
        "preallocation",
        "preallocation mode (off, metadata, falloc, full)",
    ),
    ("refcount_bits", "width of a reference count entry in bits"),
    ("size", "virtual disk size"),
    (
        "nocow",
        "host file attribute: no copy-on-write (on/off; ignored here)",
    ),
    (
        "extent_size_hint",
        "host file attribute: extent size hint (ignored here)",
    ),
];

/// Whether a `-o` list asks for help (`help` or `?`) instead of options.
pub fn wants_help(list: &str) -> bool {
    split_option_list(list)
        .iter()
        .any(|(k, v)| v.is_none() && (k == "help" || k == "?"))
}

impl ImageOpts {
    /// Apply one `-o` list for a qcow2 image.
    pub fn apply_list(&mut self, list: &str) -> Result<(), ArgError> {
        for (key, value) in split_option_list(list) {
            self.apply(&key, value.as_deref())?;
        }
        Ok(())
    }

    fn apply(&mut self, key: &str, value: Option<&str>) -> Result<(), ArgError> {
        let known = QCOW2_OPTION_HELP.iter().any(|(k, _)| *k == key);
        if !known {
            return Err(ArgError::UnknownOption(key.to_owned()));
        }
        let Some(value) = value else {
            // qemu's option parser reads a bare switch name as "on".
            return match key {
                "lazy_refcounts" => {
                    self.lazy_refcounts = Some(true);
                    Ok(())
                }
                "extended_l2" => {
                    self.extended_l2 = Some(true);
                    Ok(())
                }
                "data_file_raw" => {
                    self.data_file_raw = Some(true);
                    Ok(())
                }
                _ => Err(ArgError::MissingValue(key.to_owned())),
            };
        };
        let bad = |reason: &str| ArgError::BadValue {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        match key {
            "size" => self.size = Some(parse_size(value)?),
            // Its range is the driver's check (`to_create_options`),
            // which qemu-img makes after its "Formatting" line.
            "cluster_size" => self.cluster_size = Some(parse_size(value)?),
            // Any number here (negative too: qemu-img echoes it on its
            // "Formatting" line); its range is the driver's check.
            "refcount_bits" => {
                let v: i64 = value
                    .parse()
                    .map_err(|_| ArgError::NotANumber(key.to_owned()))?;
                self.refcount_bits = Some(v);
            }
            "compat" => {
                self.compat = Some(match value {
                    "0.10" | "v2" => Compat::V2,
                    "1.1" | "v3" => Compat::V3,
                    _ => return Err(bad(&format!("invalid compatibility level '{value}'"))),
                });
                self.compat_name = Some(value.to_owned());
            }
            "lazy_refcounts" => self.lazy_refcounts = Some(parse_switch(key, value)?),
            "extended_l2" => self.extended_l2 = Some(parse_switch(key, value)?),
            "backing_file" => self.backing_file = Some(value.to_owned()),
            "backing_fmt" => self.backing_fmt = Some(value.to_owned()),
            "compression_type" => {
                self.compression_type = Some(value.parse().map_err(|e: String| bad(&e))?)
            }
            "data_file" => self.data_file = Some(value.to_owned()),
            "data_file_raw" => self.data_file_raw = Some(parse_switch(key, value)?),
            "preallocation" => {
                self.preallocation = Some(value.parse().map_err(|e: String| bad(&e))?)
            }
            "nocow" => self.nocow = Some(parse_switch(key, value)?),
            "extent_size_hint" => self.extent_size_hint = Some(parse_size(value)?),
            _ => {}
        }
        Ok(())
    }

    /// The engine's create options, after the checks qemu-img makes on the
    /// combination. `size` must be known by now.
    pub fn to_create_options(&self, size: u64) -> Result<CreateOptions, ArgError> {
        let opts = self.unchecked_create_options(size);
        Self::check_create_options(&opts)?;
        Ok(opts)
    }

    /// The engine's create options as given, unset ones at their
    /// defaults, none of their checks made yet.
    pub fn unchecked_create_options(&self, size: u64) -> CreateOptions {
        let defaults = CreateOptions::default();
        CreateOptions {
            size,
            cluster_size: self.cluster_size.unwrap_or(defaults.cluster_size),
            // Out of range is 0, which the check refuses.
            refcount_bits: self
                .refcount_bits
                .map_or(defaults.refcount_bits, |v| u32::try_from(v).unwrap_or(0)),
            compat: self.compat.unwrap_or(defaults.compat),
            lazy_refcounts: self.lazy_refcounts.unwrap_or(defaults.lazy_refcounts),
            extended_l2: self.extended_l2.unwrap_or(defaults.extended_l2),
            backing_file: self.backing_file.clone(),
            backing_format: self.backing_fmt.clone(),
            compression_type: self.compression_type.unwrap_or_default(),
            data_file: self.data_file.clone(),
            data_file_raw: self.data_file_raw.unwrap_or(false),
            preallocation: self.preallocation.unwrap_or_default(),
        }
    }

    /// The checks qemu-img's qcow2 driver makes on the options, once it
    /// has printed its "Formatting" line.
    pub fn check_create_options(opts: &CreateOptions) -> Result<(), ArgError> {
        if !opts.cluster_size.is_power_of_two() || !(512..=2 << 20).contains(&opts.cluster_size) {
            return Err(ArgError::BadValue {
                key: "cluster_size".into(),
                reason: "cluster size must be a power of two between 512 and 2048k".into(),
            });
        }
        let conflict = |msg: &str| Err(ArgError::Conflict(msg.to_owned()));
        if !opts.refcount_bits.is_power_of_two() || opts.refcount_bits > 64 {
            return conflict("Refcount width must be a power of two and may not exceed 64 bits");
        }
        if opts.compat == Compat::V2 {
            if opts.refcount_bits != 16 {
                return conflict(
                    "Different refcount widths than 16 bits require compatibility level 1.1 or above (use version=v3 or greater)",
                );
            }
            if opts.lazy_refcounts {
                return conflict(
                    "Lazy refcounts only supported with compatibility level 1.1 and above (use version=v3 or greater)",
                );
            }
            if opts.compression_type != CompressionType::Zlib {
                return conflict(
                    "Non-zlib compression type is only supported with compatibility level 1.1 and above (use version=v3 or greater)",
                );
            }
            if opts.data_file.is_some() {
                return conflict(
                    "External data files are only supported with compatibility level 1.1 and above (use version=v3 or greater)",
                );
            }
            if opts.extended_l2 {
                return conflict(
                    "Extended L2 entries are only supported with compatibility level 1.1 and above (use version=v3 or greater)",
                );
            }
        }
        if opts.extended_l2 && opts.cluster_size < 16384 {
            return conflict(
                "Extended L2 entries are only supported with cluster sizes of at least 16384 bytes",
            );
        }
        if opts.backing_format.is_some() && opts.backing_file.is_none() {
            return conflict("Backing format cannot be used without backing file");
        }
        if opts.data_file_raw && opts.data_file.is_none() {
            return conflict("data-file-raw requires data-file");
        }
        if opts.data_file_raw && opts.backing_file.is_some() {
            return conflict("Backing file and data-file-raw cannot be used at the same time");
        }
        if opts.preallocation != Preallocation::Off
            && opts.backing_file.is_some()
            && !opts.extended_l2
        {
            return conflict(
                "Backing file and preallocation can only be used at the same time if extended_l2 is on",
            );
        }
        // The L1 table the size needs, against QEMU's 32 MiB limit (the
        // engine's too): too large is the driver's error, after the
        // Formatting line (iotest 054).
        if opts.l1_entries() * 8 > engine::MAX_L1_BYTES {
            return Err(ArgError::BadValue {
                key: "size".into(),
                reason: "The image size is too large for file format 'qcow2' (try using a larger cluster size)".into(),
            });
        }
        Ok(())
    }
}

impl ImageOpts {
    /// The file protocol's `nocow` as the "Formatting" line shows it,
    /// when given (with its leading space).
    pub fn nocow_option(&self) -> String {
        match self.nocow {
            Some(true) => " nocow=on".into(),
            Some(false) => " nocow=off".into(),
            None => String::new(),
        }
    }

    /// The file protocol's `extent_size_hint` likewise.
    pub fn extent_size_hint_option(&self) -> String {
        self.extent_size_hint
            .map(|h| format!(" extent_size_hint={h}"))
            .unwrap_or_default()
    }
}

/// Text listing the qcow2 `-o` options, for `-o help`.
pub fn option_help() -> String {
    let mut s = String::from("Supported qcow2 options:\n");
    for (k, h) in QCOW2_OPTION_HELP {
        s.push_str(&format!("  {k:<18} - {h}\n"));
    }
    s
}
