//! QEMU's block options as qemu-io takes them, in `--image-opts` strings and
//! `open -o`: `driver=qcow2,file.filename=PATH,discard=unmap,...`. Parsed
//! into what qcsim can open (a format over the `file` protocol, or a
//! protocol driver alone, which reads the file raw) and the node options it
//! honours or accepts; anything else is refused in QEMU's words, so that a
//! script sees the error QEMU would print rather than an option silently
//! dropped.
//!
//! The protocol drivers differ only in what file they accept: `file` a
//! regular file, `host_device` and `host_cdrom` a character or block device.
//! That check is made here, after the file is opened as the driver would
//! open it (read-only or read-write), because the open's own error (a
//! directory opened for writing) comes first.

use std::os::unix::fs::FileTypeExt;

use tools::files::Format;
use tools::qemu_args::{parse_size, split_option_list};

/// A protocol driver: how the bytes of the file are reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    File,
    HostDevice,
    HostCdrom,
}

impl Protocol {
    fn parse(name: &str) -> Option<Protocol> {
        match name {
            "file" => Some(Protocol::File),
            "host_device" => Some(Protocol::HostDevice),
            "host_cdrom" => Some(Protocol::HostCdrom),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Protocol::File => "file",
            Protocol::HostDevice => "host_device",
            Protocol::HostCdrom => "host_cdrom",
        }
    }
}

/// `detect-zeroes`: whether a write of zeroes becomes a write_zeroes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DetectZeroes {
    #[default]
    Off,
    On,
    /// A write_zeroes that may unmap, if `discard=unmap` allows it.
    Unmap,
}

/// A parsed option string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockOpts {
    /// The format driver; `None` when the node is a protocol driver alone
    /// (the file read raw) or when no driver was named (probed).
    pub format: Option<Format>,
    /// The protocol under the format, or the node itself.
    pub protocol: Option<Protocol>,
    /// The file.
    pub filename: Option<String>,
    /// `read-only=on|off`.
    pub read_only: Option<bool>,
    /// `locking=off` (or `file.locking=off`): no image locks.
    pub no_locking: bool,
    /// `discard=unmap|on`: discard requests pass to the image.
    pub discard_unmap: bool,
    pub detect_zeroes: DetectZeroes,
    /// `cache.direct=on|off`.
    pub cache_direct: Option<bool>,
    /// `cache.no-flush=on|off`.
    pub cache_no_flush: Option<bool>,
    /// `force-share=on`.
    pub force_share: bool,
    /// qcow2's cache options, in bytes: `cache-size`, `l2-cache-size`,
    /// `refcount-cache-size`, `l2-cache-entry-size`.
    pub cache_size: Option<u64>,
    pub l2_cache_size: Option<u64>,
    pub refcount_cache_size: Option<u64>,
    pub l2_cache_entry_size: Option<u64>,
    /// `backing.driver`: the backing file's format over what the image's
    /// header names.
    pub backing_format: Option<Format>,
    /// The node names given (`node-name`, `file.node-name`,
    /// `backing.node-name`, with their values): a reopen may repeat them.
    pub node_names: Vec<(String, String)>,
    /// A rule-less blkdebug node's `opt-write-zero`: it refuses to zero a
    /// piece shorter than that, and the block layer writes such a piece
    /// (the head and tail of a request cut at its multiples) as zeroes.
    pub zero_alignment: Option<u64>,
}

/// A switch's value, worded as QEMU's block layer words it (not as its
/// creation options do).
fn switch(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("Parameter '{key}' expects 'on' or 'off'")),
    }
}

impl BlockOpts {
    /// Parse `list` (QEMU's `key=value,...`, `,,` an escaped comma), with
    /// `positional`, the file named beside `open -o`, if any. The error is
    /// QEMU's message, without the `can't open: ` it is printed after.
    pub fn parse(list: &str, positional: Option<&str>) -> Result<BlockOpts, String> {
        let via_blkdebug = positional.is_some_and(|p| p.starts_with("blkdebug:"));
        let positional = positional.map(blkdebug_file).transpose()?;
        let mut o = BlockOpts {
            filename: positional.clone(),
            ..BlockOpts::default()
        };
        let positional = positional.as_deref();
        let (items, limits) = without_blkdebug(split_option_list(list), via_blkdebug)?;
        o.zero_alignment = limits
            .iter()
            .find(|(k, _)| k == "opt-write-zero")
            .map(|&(_, n)| n)
            .filter(|&n| n > 0);
        // Neither a driver nor a file: QEMU says so before looking at any
        // other option.
        let names_file = |k: &str| k == "driver" || k == "file" || k.starts_with("file.");
        if positional.is_none() && !items.iter().any(|(k, _)| names_file(k)) {
            return Err("Must specify either driver or file".into());
        }
        // The node's driver first: which keys the node takes depends on it.
        let mut top_protocol = None;
        for (k, v) in &items {
            if k == "driver" {
                let d = v.as_deref().unwrap_or("on");
                match Protocol::parse(d) {
                    Some(p) => {
                        top_protocol = Some(p);
                        o.protocol = Some(p);
                        o.format = None;
                    }
                    None => {
                        o.format = Some(d.parse::<Format>().map_err(|e| e.to_string())?);
                        top_protocol = None;
                    }
                }
            }
        }
        for (k, v) in &items {
            o.apply(k, v.as_deref().unwrap_or("on"), top_protocol)?;
        }
        match (o.format, top_protocol, &o.filename) {
            (None, None, None) => Err("Must specify either driver or file".into()),
            (Some(_), _, None) => Err("A block device must be specified for \"file\"".into()),
            (None, Some(p), None) => Err(format!(
                "The '{}' block driver requires a file name",
                p.name()
            )),
            _ => Ok(o),
        }
    }

    /// Apply the option `k=value` of a node whose driver is the protocol
    /// `top_protocol` (or a format, `None`), as QEMU's block layer takes
    /// it, in its words.
    fn apply(
        &mut self,
        k: &str,
        value: &str,
        top_protocol: Option<Protocol>,
    ) -> Result<(), String> {
        match k {
            "driver" => {}
            "filename" if top_protocol.is_some() => self.filename = Some(value.to_owned()),
            "locking" if top_protocol.is_some() => self.no_locking = !locking(value)?,
            "file" if top_protocol.is_none() => self.filename = Some(value.to_owned()),
            "read-only" => self.read_only = Some(switch(k, value)?),
            "auto-read-only" => {
                switch(k, value)?;
            }
            "force-share" => self.force_share = switch(k, value)?,
            "cache.direct" => self.cache_direct = Some(switch(k, value)?),
            "cache.no-flush" => self.cache_no_flush = Some(switch(k, value)?),
            "node-name" => self.node_names.push((k.to_owned(), value.to_owned())),
            "backing.node-name" if top_protocol.is_none() => {
                self.node_names.push((k.to_owned(), value.to_owned()))
            }
            "backing.driver" if top_protocol.is_none() => {
                self.backing_format = Some(value.parse::<Format>().map_err(|_| {
                    format!(
                        "Could not open backing file: {}",
                        super::shared::format_error_text(value)
                    )
                })?)
            }
            "cache-size" | "l2-cache-size" | "refcount-cache-size" | "l2-cache-entry-size"
                if self.format != Some(Format::Raw) && top_protocol.is_none() =>
            {
                let n = parse_size(value).map_err(|_| {
                    format!(
                        "Parameter '{k}' expects a non-negative number below 2^64\n\
                     Optional suffix k, M, G, T, P or E means kilo-, mega-, giga-, tera-, peta-\n\
                     and exabytes, respectively."
                    )
                })?;
                *match k {
                    "cache-size" => &mut self.cache_size,
                    "l2-cache-size" => &mut self.l2_cache_size,
                    "refcount-cache-size" => &mut self.refcount_cache_size,
                    _ => &mut self.l2_cache_entry_size,
                } = Some(n);
            }
            "discard" => {
                self.discard_unmap = match value {
                    "ignore" | "off" => false,
                    "unmap" | "on" => true,
                    _ => return Err("Invalid discard option".into()),
                }
            }
            "detect-zeroes" => {
                self.detect_zeroes = match value {
                    "off" => DetectZeroes::Off,
                    "on" => DetectZeroes::On,
                    "unmap" => DetectZeroes::Unmap,
                    _ => return Err(format!("invalid parameter value: {value}")),
                }
            }
            _ if top_protocol.is_none() && k.starts_with("file.") => {
                self.file_option(&k["file.".len()..], value)?
            }
            _ => {
                return Err(match (self.format, top_protocol) {
                    (Some(f), _) => {
                        format!(
                            "Block format '{}' does not support the option '{k}'",
                            f.name()
                        )
                    }
                    (None, Some(p)) => format!(
                        "Block protocol '{}' doesn't support the option '{k}'",
                        p.name()
                    ),
                    (None, None) => format!("Invalid parameter '{k}'"),
                })
            }
        }
        Ok(())
    }

    /// qcow2's rules for its cache options, as QEMU checks them when it
    /// opens the image of cluster size `cluster_size`.
    pub fn check_caches(&self, cluster_size: u64) -> Result<(), String> {
        let (c, l2, rc) = (
            self.cache_size,
            self.l2_cache_size,
            self.refcount_cache_size,
        );
        if c.is_some() && l2.is_some() && rc.is_some() {
            return Err(
                "cache-size, l2-cache-size and refcount-cache-size may not be set at the same time"
                    .into(),
            );
        }
        if let Some(c) = c {
            if l2.is_some_and(|l| l > c) {
                return Err("l2-cache-size may not exceed cache-size".into());
            }
            if rc.is_some_and(|r| r > c) {
                return Err("refcount-cache-size may not exceed cache-size".into());
            }
        }
        if let Some(e) = self.l2_cache_entry_size {
            if !e.is_power_of_two() || e < 512 || e > cluster_size {
                return Err(format!(
                    "L2 cache entry size must be a power of two between 512 and the cluster size ({cluster_size})"
                ));
            }
        }
        Ok(())
    }

    /// L2 tables the cache holds, from `l2-cache-size` (or the L2 share of
    /// `cache-size`), at least two; `None` leaves the engine's default.
    pub fn l2_cache_tables(&self, cluster_size: u64) -> Option<usize> {
        let bytes = self.l2_cache_size.or_else(|| {
            // QEMU gives the refcount cache a quarter of the L2 cache's
            // share when only the total is set.
            let c = self.cache_size?;
            Some(c.saturating_sub(self.refcount_cache_size.unwrap_or(c / 5)))
        })?;
        Some(((bytes / cluster_size.max(1)) as usize).max(2))
    }

    /// A `file.KEY=VALUE` option: the protocol node under a format.
    fn file_option(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "driver" => match Protocol::parse(value) {
                Some(p) => self.protocol = Some(p),
                None if value.parse::<Format>().is_ok() => {
                    return Err(format!(
                        "a '{value}' node under the image's format is not supported by qcsim \
                         (nested image formats)"
                    ))
                }
                None => return Err(format!("Unknown driver '{value}'")),
            },
            "filename" => self.filename = Some(value.to_owned()),
            "locking" => self.no_locking = !locking(value)?,
            "node-name" => self
                .node_names
                .push(("file.node-name".into(), value.to_owned())),
            _ => {
                let p = self.protocol.unwrap_or(Protocol::File).name();
                return Err(format!(
                    "Block protocol '{p}' doesn't support the option '{key}'"
                ));
            }
        }
        Ok(())
    }

    /// The protocol's check of the file it is given, made as QEMU's drivers
    /// make it: the open first (for writing too unless `read_only`), whose
    /// failure is reported as such, then the kind of file. Returns whether
    /// the file is a character device a driver took (QEMU opens one,
    /// `/dev/null` as an empty disk).
    pub fn check_file(&self, read_only: bool) -> Result<bool, String> {
        let (Some(p), Some(name)) = (self.protocol, &self.filename) else {
            return Ok(false);
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(name)
            .map_err(|e| format!("Could not open '{name}': {}", super::shared::strerror(&e)))?;
        let ft = file
            .metadata()
            .map_err(|e| format!("Could not open '{name}': {}", super::shared::strerror(&e)))?
            .file_type();
        match p {
            Protocol::File if !ft.is_file() => Err(format!(
                "'file' driver requires '{name}' to be a regular file"
            )),
            Protocol::HostDevice | Protocol::HostCdrom
                if !ft.is_char_device() && !ft.is_block_device() =>
            {
                Err(format!(
                    "'{}' driver requires '{name}' to be either a character or block device",
                    p.name()
                ))
            }
            _ => Ok(ft.is_char_device()),
        }
    }
}

/// `locking=on|off|auto`: whether the image is locked.
fn locking(value: &str) -> Result<bool, String> {
    match value {
        "on" | "auto" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!(
            "Parameter 'locking' does not accept value '{value}'"
        )),
    }
}

/// Options of QEMU's `blkdebug` driver that shape requests (sizes in
/// bytes): alignment, transfer and zeroing/discard limits.
const BLKDEBUG_LIMITS: [&str; 6] = [
    "align",
    "max-transfer",
    "opt-write-zero",
    "max-write-zero",
    "opt-discard",
    "max-discard",
];

/// The file a `blkdebug:CONFIG:FILE` name (or any other) stands for.
/// blkdebug with no configuration passes every request through, so it is
/// the file; a configuration (rules that inject errors or suspend
/// requests) is refused, qcsim having no such rules.
pub fn blkdebug_file(name: &str) -> Result<String, String> {
    let Some(rest) = name.strip_prefix("blkdebug:") else {
        return Ok(name.to_owned());
    };
    match rest.split_once(':') {
        Some(("", file)) => Ok(file.to_owned()),
        Some(_) => Err(BLKDEBUG_RULES.into()),
        None => Err(format!("Could not parse blkdebug filename '{name}'")),
    }
}

const BLKDEBUG_RULES: &str =
    "blkdebug rules (config, inject-error, set-state) are not supported by qcsim";

/// The options of an `--image-opts` string, a rule-less blkdebug node
/// taken out (`without_blkdebug`).
pub fn image_opts_items(list: &str) -> Result<Vec<(String, Option<String>)>, String> {
    Ok(without_blkdebug(split_option_list(list), false)?.0)
}

/// `items` without a rule-less blkdebug node: on top (`driver=blkdebug`,
/// its child's options under `image.`), or under the format
/// (`file.driver=blkdebug`, or a positional `blkdebug::FILE`, with the
/// file's options under `file.image.`). Its request limits are checked and
/// returned beside the items: qcsim's engine splits requests by none of
/// them, and only `opt-write-zero` changes what a request leaves behind
/// (`BlockOpts::zero_alignment`).
#[allow(clippy::type_complexity)]
fn without_blkdebug(
    items: Vec<(String, Option<String>)>,
    positional_blkdebug: bool,
) -> Result<(Vec<(String, Option<String>)>, Vec<(String, u64)>), String> {
    let is = |items: &[(String, Option<String>)], key: &str| {
        items
            .iter()
            .any(|(k, v)| k == key && v.as_deref() == Some("blkdebug"))
    };
    let (prefix, child) = if is(&items, "driver") {
        ("", "image.")
    } else if is(&items, "file.driver") || positional_blkdebug {
        ("file.", "file.image.")
    } else {
        return Ok((items, Vec::new()));
    };
    let mut limits = Vec::new();
    let mut out = Vec::new();
    for (k, v) in items {
        if let Some(rest) = k.strip_prefix(child) {
            out.push((format!("{prefix}{rest}"), v));
            continue;
        }
        let Some(own) = k.strip_prefix(prefix) else {
            out.push((k, v));
            continue;
        };
        match own {
            "driver" => {}
            "node-name" | "take-child-perms" | "unshare-child-perms" => {}
            "config" | "image" | "x-image" => return Err(BLKDEBUG_RULES.into()),
            _ if own.starts_with("inject-error") || own.starts_with("set-state") => {
                return Err(BLKDEBUG_RULES.into())
            }
            _ if BLKDEBUG_LIMITS.contains(&own) => {
                let value = v.unwrap_or_default();
                let n = parse_size(&value).map_err(|_| {
                    format!("Parameter '{own}' expects a non-negative number below 2^64")
                })?;
                limits.push((own.to_owned(), n));
            }
            // Not blkdebug's: the node's generic options stay.
            _ => out.push((k, v)),
        }
    }
    check_blkdebug_limits(&limits)?;
    Ok((out, limits))
}

/// blkdebug's own checks of its limits: a power-of-two alignment below
/// 2 GiB, and every other limit below 2 GiB and a multiple of the
/// alignment when one is set (any size when not).
fn check_blkdebug_limits(limits: &[(String, u64)]) -> Result<(), String> {
    let get = |key: &str| limits.iter().find(|(k, _)| k == key).map(|&(_, n)| n);
    let align = get("align").unwrap_or(0);
    if align != 0 && (align >= i32::MAX as u64 || !align.is_power_of_two()) {
        return Err(format!("Cannot meet constraints with align {align}"));
    }
    let unit = align.max(1);
    for key in &BLKDEBUG_LIMITS[1..] {
        if let Some(n) = get(key) {
            if n >= i32::MAX as u64 || n % unit != 0 {
                return Err(format!("Cannot meet constraints with {key} {n}"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_over_a_file_with_node_options() {
        let o = BlockOpts::parse(
            "driver=qcow2,file.filename=a,,b,discard=unmap,detect-zeroes=unmap,file.locking=off",
            None,
        )
        .unwrap();
        assert_eq!(o.format, Some(Format::Qcow2));
        assert_eq!(o.filename.as_deref(), Some("a,b"));
        assert!(o.discard_unmap && o.no_locking);
        assert_eq!(o.detect_zeroes, DetectZeroes::Unmap);
    }

    #[test]
    fn a_protocol_alone_takes_filename_and_locking() {
        let o =
            BlockOpts::parse("driver=host_device,filename=/dev/null,locking=off", None).unwrap();
        assert_eq!((o.format, o.protocol), (None, Some(Protocol::HostDevice)));
        assert!(o.no_locking);
    }

    #[test]
    fn errors_are_qemus() {
        let e = |s: &str| BlockOpts::parse(s, None).unwrap_err();
        assert_eq!(
            e("driver=qcow2,file.filename=x,bogus=1"),
            "Block format 'qcow2' does not support the option 'bogus'"
        );
        assert_eq!(
            e("driver=qcow2,file.filename=x,file.bogus=1"),
            "Block protocol 'file' doesn't support the option 'bogus'"
        );
        assert_eq!(
            e("driver=qcow2,file.filename=x,read-only=foo"),
            "Parameter 'read-only' expects 'on' or 'off'"
        );
        assert_eq!(
            e("driver=qcow2,file.filename=x,discard=foo"),
            "Invalid discard option"
        );
        assert_eq!(
            e("driver=qcow2,file.filename=x,detect-zeroes=foo"),
            "invalid parameter value: foo"
        );
        assert_eq!(
            e("driver=qcow2"),
            "A block device must be specified for \"file\""
        );
        assert_eq!(
            e("driver=file"),
            "The 'file' block driver requires a file name"
        );
        assert_eq!(e("filename=x"), "Must specify either driver or file");
    }

    #[test]
    fn qcow2_cache_options_follow_qemus_rules() {
        let o = |s: &str| BlockOpts::parse(s, Some("x")).unwrap();
        let e = |s: &str| o(s).check_caches(65536).unwrap_err();
        assert!(
            e("cache-size=1.25M,l2-cache-size=1M,refcount-cache-size=0.25M")
                .contains("may not be set at the same time")
        );
        assert_eq!(
            e("cache-size=1M,l2-cache-size=2M"),
            "l2-cache-size may not exceed cache-size"
        );
        assert!(e("l2-cache-entry-size=4242").contains("power of two"));
        assert!(e("l2-cache-entry-size=128k").contains("(65536)"));
        assert!(o("cache-size=2M,l2-cache-size=1M")
            .check_caches(65536)
            .is_ok());
        assert_eq!(o("l2-cache-size=1M").l2_cache_tables(65536), Some(16));
        assert_eq!(o("cache-size=0").l2_cache_tables(65536), Some(2));
        assert_eq!(o("discard=unmap").l2_cache_tables(65536), None);
    }

    #[test]
    fn the_file_protocol_refuses_what_is_not_a_regular_file() {
        let dir = std::env::temp_dir();
        let d = dir.to_str().unwrap();
        let o = BlockOpts::parse(&format!("driver=file,filename={d}"), None).unwrap();
        assert_eq!(
            o.check_file(true).unwrap_err(),
            format!("'file' driver requires '{d}' to be a regular file")
        );
        assert_eq!(
            o.check_file(false).unwrap_err(),
            format!("Could not open '{d}': Is a directory")
        );
        let o = BlockOpts::parse(&format!("driver=host_device,filename={d}"), None).unwrap();
        assert_eq!(
            o.check_file(true).unwrap_err(),
            format!("'host_device' driver requires '{d}' to be either a character or block device")
        );
        let o = BlockOpts::parse("driver=host_cdrom,filename=/dev/null", None).unwrap();
        assert_eq!(o.check_file(true), Ok(true));
    }
}
