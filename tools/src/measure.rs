//! `qemu-img measure`: how large a new image would be, for a size or for
//! the contents of an existing image, as QEMU's raw and qcow2 drivers
//! work it out. [`qcow2_sizes`] is the arithmetic alone (the metadata of a
//! fully allocated image plus the data that is needed); [`measure`] parses
//! the target's `-o` options as qemu-img checks them, and for a source
//! image adds up what block status says holds data (zero clusters and
//! holes not counted, a data run rounded out to the target's clusters),
//! or for one of its internal snapshots (`-l`) what that snapshot's L2
//! tables map to data.
//! The error messages are qemu-img's words.

use std::path::{Path, PathBuf};

use crate::files::{open_image, Disk, OpenError, OpenOptions};
use crate::map::{map_image, MapError};
use crate::qemu_args::{parse_size, split_option_list};

/// qcow2's default cluster size.
const DEFAULT_CLUSTER_SIZE: u64 = 64 << 10;
/// QEMU's largest L1 table, in bytes.
const MAX_L1_BYTES: u64 = 32 << 20;
/// Extended L2 entries need clusters of at least this many bytes.
const MIN_EXTENDED_L2_CLUSTER: u64 = 16 << 10;

/// What qemu-img prints: the size a new image needs now, fully allocated,
/// and (for a qcow2 v3 target measured from a source that can hold
/// persistent bitmaps) the bitmaps' share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    pub required: u64,
    pub fully_allocated: u64,
    pub bitmaps: Option<u64>,
}

impl Measurement {
    /// qemu-img's human layout.
    pub fn human(&self) -> String {
        let mut s = format!(
            "required size: {}\nfully allocated size: {}\n",
            self.required, self.fully_allocated
        );
        if let Some(b) = self.bitmaps {
            s.push_str(&format!("bitmaps size: {b}\n"));
        }
        s
    }

    /// qemu-img's JSON layout (its members in QEMU's order), with the
    /// closing newline.
    pub fn json(&self) -> String {
        let mut s = String::from("{\n");
        if let Some(b) = self.bitmaps {
            s.push_str(&format!("    \"bitmaps\": {b},\n"));
        }
        s.push_str(&format!(
            "    \"required\": {},\n    \"fully-allocated\": {}\n}}\n",
            self.required, self.fully_allocated
        ));
        s
    }
}

/// The target format: the two qcsim writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Raw,
    Qcow2,
}

/// What is measured: a size, or the image at a path (or one of its
/// internal snapshots).
#[derive(Debug, Clone)]
pub enum Source {
    Size(u64),
    Image {
        path: PathBuf,
        opts: OpenOptions,
        snapshot: Option<SnapshotRef>,
    },
}

/// An internal snapshot as `-l` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotRef {
    /// A plain `-l NAME`: an id first, else a name.
    IdOrName(String),
    /// `snapshot.id=` and/or `snapshot.name=`: each given must match.
    Given {
        id: Option<String>,
        name: Option<String>,
    },
}

impl SnapshotRef {
    fn find<'a>(&self, list: &'a [engine::Snapshot]) -> Option<&'a engine::Snapshot> {
        match self {
            SnapshotRef::IdOrName(s) => list
                .iter()
                .find(|sn| sn.id == *s)
                .or_else(|| list.iter().find(|sn| sn.name == *s)),
            SnapshotRef::Given { id, name } => list.iter().find(|sn| {
                id.as_ref().is_none_or(|i| *i == sn.id)
                    && name.as_ref().is_none_or(|n| *n == sn.name)
            }),
        }
    }
}

/// Why a measurement failed, in qemu-img's words (the caller adds its
/// `qemu-img: ` prefix to each line).
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// An option the target format does not have, or a value its type
    /// refuses: qemu-img's complaint, then its second line.
    #[error("{reason}\nqemu-img: Invalid options for file format '{format}'")]
    Options {
        reason: String,
        format: &'static str,
    },
    /// The qcow2 driver's refusal of the combination.
    #[error("{0}")]
    Driver(String),
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{path}: Unable to get block status: {error}")]
    Status { path: PathBuf, error: String },
    /// The snapshot `-l` names is not there (or the source is raw).
    #[error("Failed to load snapshot: {0}")]
    Snapshot(String),
    /// The source has persistent bitmaps, which qcsim does not read.
    #[error("{0}: qcsim cannot measure persistent dirty bitmaps")]
    Bitmaps(PathBuf),
}

/// The qcow2 target's options that bear on its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qcow2Layout {
    pub cluster_size: u64,
    pub refcount_bits: u64,
    pub extended_l2: bool,
    /// `preallocation=falloc` or `full`: every data cluster is required.
    pub full_prealloc: bool,
    /// The LUKS header's clusters, before the image (0 unencrypted).
    pub luks_payload: u64,
    pub version: u32,
    pub has_backing_file: bool,
}

/// Refcount table and block clusters for `clusters` clusters and the
/// refcount structures themselves (QEMU's `qcow2_refcount_metadata_size`
/// without its generous increase), in bytes.
fn refcount_metadata(clusters: u64, cluster_size: u64, refcount_bits: u64) -> u64 {
    let per_block = cluster_size * 8 / refcount_bits;
    let per_table_cluster = cluster_size / 8;
    let (mut table, mut blocks, mut n) = (0u64, 0u64, 0u64);
    loop {
        let last = n;
        blocks = (clusters + table + blocks).div_ceil(per_block);
        table = blocks.div_ceil(per_table_cluster);
        n = clusters + blocks + table;
        if n == last {
            return (blocks + table) * cluster_size;
        }
    }
}

/// A fully allocated qcow2 image of `virtual_size` bytes: a header
/// cluster, the L2 tables, the L1 table, the refcount structures and the
/// data.
pub fn qcow2_fully_allocated(virtual_size: u64, l: &Qcow2Layout) -> u64 {
    let cs = l.cluster_size;
    let aligned = virtual_size.next_multiple_of(cs);
    let l2e = if l.extended_l2 { 16 } else { 8 };
    let mut meta = cs;
    let nl2e = (aligned / cs).next_multiple_of(cs / l2e);
    meta += nl2e * l2e;
    let nl1e = (nl2e * l2e / cs).next_multiple_of(cs / 8);
    meta += nl1e * 8;
    meta += refcount_metadata((meta + aligned) / cs, cs, l.refcount_bits);
    meta + aligned
}

/// The sizes for a qcow2 target of `virtual_size` bytes (rounded up to
/// whole clusters) of which `data` bytes must be allocated: the metadata
/// of the fully allocated image is always counted, so `required`
/// overestimates as QEMU's does.
pub fn qcow2_sizes(virtual_size: u64, data: u64, l: &Qcow2Layout) -> (u64, u64) {
    let aligned = virtual_size.next_multiple_of(l.cluster_size);
    let data = if l.full_prealloc { aligned } else { data };
    let full = l.luks_payload + qcow2_fully_allocated(aligned, l);
    (full - aligned + data, full)
}

/// The names qemu-img's qcow2 create options list has (and the file
/// protocol's, which qemu-img appends), with how each value is parsed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Size,
    Bool,
    Number,
    Text,
}

const QCOW2_KEYS: &[(&str, Kind)] = &[
    ("size", Kind::Size),
    ("compat", Kind::Text),
    ("backing_file", Kind::Text),
    ("backing_fmt", Kind::Text),
    ("data_file", Kind::Text),
    ("data_file_raw", Kind::Bool),
    ("encryption", Kind::Bool),
    ("encrypt.format", Kind::Text),
    ("encrypt.key-secret", Kind::Text),
    ("encrypt.cipher-alg", Kind::Text),
    ("encrypt.cipher-mode", Kind::Text),
    ("encrypt.ivgen-alg", Kind::Text),
    ("encrypt.ivgen-hash-alg", Kind::Text),
    ("encrypt.hash-alg", Kind::Text),
    ("encrypt.iter-time", Kind::Number),
    ("cluster_size", Kind::Size),
    ("preallocation", Kind::Text),
    ("lazy_refcounts", Kind::Bool),
    ("refcount_bits", Kind::Number),
    ("compression_type", Kind::Text),
    ("extended_l2", Kind::Bool),
    ("nocow", Kind::Bool),
    ("extent_size_hint", Kind::Size),
];

const RAW_KEYS: &[(&str, Kind)] = &[
    ("size", Kind::Size),
    ("preallocation", Kind::Text),
    ("nocow", Kind::Bool),
    ("extent_size_hint", Kind::Size),
];

/// qemu's explanation after a size option it cannot parse.
const SIZE_HELP: &str =
    "Optional suffix k, M, G, T, P or E means kilo-, mega-, giga-, tera-, peta-\n\
and exabytes, respectively.";

/// The `-o` lists as one set of options, later values overriding
/// earlier ones; each value checked against its type as qemu's option
/// parser checks it. A bare key is a switch set `on`.
fn parse_options(lists: &[String], target: Target) -> Result<Vec<(String, String)>, MeasureError> {
    let (keys, format) = match target {
        Target::Raw => (RAW_KEYS, "raw"),
        Target::Qcow2 => (QCOW2_KEYS, "qcow2"),
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let fail = |reason: String| MeasureError::Options { reason, format };
    for list in lists {
        for (key, value) in split_option_list(list) {
            let Some(&(_, kind)) = keys.iter().find(|(k, _)| *k == key) else {
                return Err(fail(format!("Invalid parameter '{key}'")));
            };
            let value = value.unwrap_or_else(|| "on".to_owned());
            match kind {
                Kind::Size if parse_size(&value).is_err() => {
                    return Err(fail(format!(
                        "Parameter '{key}' expects a non-negative number below 2^64\n{SIZE_HELP}"
                    )))
                }
                Kind::Bool if value != "on" && value != "off" => {
                    return Err(fail(format!("Parameter '{key}' expects 'on' or 'off'")))
                }
                Kind::Number if parse_number(&value).is_none() => {
                    return Err(fail(format!("Parameter '{key}' expects a number")))
                }
                _ => {}
            }
            out.retain(|(k, _)| *k != key);
            out.push((key, value));
        }
    }
    Ok(out)
}

/// A number as qemu's option parser reads one (decimal, `0x` hex or
/// leading-zero octal).
fn parse_number(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if s.len() > 1 && s.starts_with('0') {
        return u64::from_str_radix(&s[1..], 8).ok();
    }
    s.parse().ok()
}

/// The qcow2 driver's reading of the options, in the order it checks
/// them.
fn qcow2_layout(
    opts: &[(String, String)],
    secrets: &[String],
) -> Result<Qcow2Layout, MeasureError> {
    let get = |k: &str| {
        opts.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let driver = |m: &str| Err(MeasureError::Driver(m.to_owned()));
    let extended_l2 = get("extended_l2") == Some("on");
    let cluster_size = match get("cluster_size") {
        Some(v) => parse_size(v).unwrap_or(0),
        None => DEFAULT_CLUSTER_SIZE,
    };
    if !cluster_size.is_power_of_two() || !(512..=2 << 20).contains(&cluster_size) {
        return driver("Cluster size must be a power of two between 512 and 2048k");
    }
    if extended_l2 && cluster_size < MIN_EXTENDED_L2_CLUSTER {
        return driver(&format!(
            "Extended L2 entries are only supported with cluster sizes of at least {MIN_EXTENDED_L2_CLUSTER} bytes"
        ));
    }
    let version = match get("compat") {
        // Only these spellings: `v2` and `v3` are create's.
        None | Some("1.1") => 3,
        Some("0.10") => 2,
        Some(other) => return driver(&format!("Invalid compatibility level: '{other}'")),
    };
    let refcount_bits = get("refcount_bits").and_then(parse_number).unwrap_or(16);
    if refcount_bits > 64 || !refcount_bits.is_power_of_two() {
        return driver("Refcount width must be a power of two and may not exceed 64 bits");
    }
    if version < 3 && refcount_bits != 16 {
        return driver(
            "Different refcount widths than 16 bits require compatibility level 1.1 or above (use compat=1.1 or greater)",
        );
    }
    let full_prealloc = match get("preallocation") {
        None | Some("off" | "metadata") => false,
        Some("falloc" | "full") => true,
        Some(other) => return driver(&format!("invalid parameter value: {other}")),
    };
    let luks_payload = if get("encrypt.format") == Some("luks") {
        let Some(secret) = get("encrypt.key-secret") else {
            return driver("Parameter 'encrypt.key-secret' is required for cipher");
        };
        if !secrets.iter().any(|s| s == secret) {
            return driver(&format!("No secret with id '{secret}'"));
        }
        let key = luks_key_bytes(
            get("encrypt.cipher-alg").unwrap_or("aes-256"),
            get("encrypt.cipher-mode").unwrap_or("xts"),
        )
        .ok_or_else(|| MeasureError::Driver("qcsim cannot measure this LUKS cipher".to_owned()))?;
        luks_header_bytes(key).next_multiple_of(cluster_size)
    } else {
        0
    };
    Ok(Qcow2Layout {
        cluster_size,
        refcount_bits,
        extended_l2,
        full_prealloc,
        version,
        has_backing_file: get("backing_file").is_some(),
        luks_payload,
    })
}

/// The master key length of a LUKS cipher (XTS takes two keys).
pub fn luks_key_bytes(alg: &str, mode: &str) -> Option<u64> {
    let bits: u64 = match alg {
        "aes-128" | "twofish-128" | "serpent-128" | "cast5-128" | "sm4" => 128,
        "aes-192" | "twofish-192" | "serpent-192" => 192,
        "aes-256" | "twofish-256" | "serpent-256" => 256,
        _ => return None,
    };
    match mode {
        "xts" => Some(bits / 4),
        "cbc" | "ecb" | "ctr" => Some(bits / 8),
        _ => None,
    }
}

/// A LUKS header's length for a `key`-byte master key: the header's 8
/// sectors, then 8 key slots, each the key split in 4000 stripes, in
/// 4096-byte aligned sectors.
pub fn luks_header_bytes(key: u64) -> u64 {
    let slot_sectors = (key * 4000).div_ceil(512).next_multiple_of(8);
    (8 + 8 * slot_sectors) * 512
}

/// Measure `source` as a new `target` image made with the `-o` lists
/// `options`; `secrets` are the ids of the secret objects given.
pub async fn measure(
    source: &Source,
    target: Target,
    options: &[String],
    secrets: &[String],
) -> Result<Measurement, MeasureError> {
    let opts = parse_options(options, target)?;
    // `--size` overrides `-o size`; an image's own size replaces both.
    let size_opt = match source {
        Source::Size(s) => *s,
        Source::Image { .. } => opts
            .iter()
            .find(|(k, _)| k == "size")
            .and_then(|(_, v)| parse_size(v).ok())
            .unwrap_or(0),
    };
    let l = match target {
        Target::Qcow2 => qcow2_layout(&opts, secrets)?,
        Target::Raw => {
            // raw: the disk's size (sectors), whatever it holds.
            let size = match source {
                Source::Size(s) => s.next_multiple_of(512),
                Source::Image {
                    path,
                    opts,
                    snapshot,
                } => {
                    let disk = open_image(path, &read_only(opts)).await?;
                    if let Some(want) = snapshot {
                        find_snapshot(&disk, path, want).await?;
                    }
                    disk.virtual_size()
                }
            };
            return Ok(Measurement {
                required: size,
                fully_allocated: size,
                bitmaps: None,
            });
        }
    };
    // The L1 table the size named needs (checked before the source is
    // looked at, as QEMU's driver checks it).
    let cs = l.cluster_size;
    let l2e = if l.extended_l2 { 16 } else { 8 };
    let l2_tables = size_opt.div_ceil(cs).div_ceil(cs / l2e);
    if l2_tables * 8 > MAX_L1_BYTES {
        return Err(MeasureError::Driver(
            "The image size is too large (try using a larger cluster size)".into(),
        ));
    }
    let (virtual_size, data, bitmaps) = match source {
        Source::Size(s) => (*s, 0, None),
        Source::Image {
            path,
            opts,
            snapshot,
        } => {
            let (size, data, bitmaps_ok) = source_data(path, opts, snapshot.as_ref(), &l).await?;
            let bitmaps = (l.version >= 3 && bitmaps_ok).then_some(0);
            (size, data, bitmaps)
        }
    };
    let (required, fully_allocated) = qcow2_sizes(virtual_size, data, &l);
    Ok(Measurement {
        required,
        fully_allocated,
        bitmaps,
    })
}

fn read_only(opts: &OpenOptions) -> OpenOptions {
    OpenOptions {
        read_only: true,
        ..opts.clone()
    }
}

/// The source's size, the bytes of it a qcow2 target with `l`'s clusters
/// must allocate, and whether the source could hold persistent bitmaps
/// (a qcow2 v3 image).
async fn source_data(
    path: &Path,
    opts: &OpenOptions,
    snapshot: Option<&SnapshotRef>,
    l: &Qcow2Layout,
) -> Result<(u64, u64, bool), MeasureError> {
    let opts = read_only(opts);
    let disk = open_image(path, &opts).await?;
    let size = disk.virtual_size();
    let cs = l.cluster_size;
    let bitmaps_ok = match &disk {
        Disk::Qcow2(img) => {
            let h = img.header();
            if h.extension(engine::format::header::ext::BITMAPS).is_some() {
                return Err(MeasureError::Bitmaps(path.to_owned()));
            }
            h.version >= 3
        }
        Disk::Raw(_) => false,
    };
    if let Some(want) = snapshot {
        // Refused for a raw image: only a qcow2 one gets past.
        let sn = find_snapshot(&disk, path, want).await?;
        let Disk::Qcow2(img) = &disk else {
            unreachable!("find_snapshot refuses raw images");
        };
        let status = |error: engine::Error| MeasureError::Status {
            path: path.to_owned(),
            error: error.to_string(),
        };
        if l.has_backing_file {
            return Ok((size, size.next_multiple_of(cs), bitmaps_ok));
        }
        let runs = img.snapshot_data_ranges(&sn).await.map_err(status)?;
        return Ok((size, data_bytes(&runs, cs), bitmaps_ok));
    }
    if l.has_backing_file {
        // Nothing is known to be shared with the new backing file.
        return Ok((size, size.next_multiple_of(cs), bitmaps_ok));
    }
    // The runs holding data, as block status gives them.
    let runs: Vec<(u64, u64)> = match &disk {
        Disk::Raw(dev) => {
            let mut runs = Vec::new();
            let mut pos = 0;
            while pos < size {
                let (data, n) = dev.extent_at(pos, size - pos).unwrap_or((true, size - pos));
                let n = n.max(1).min(size - pos);
                if data {
                    runs.push((pos, pos + n));
                }
                pos += n;
            }
            runs
        }
        Disk::Qcow2(_) => {
            drop(disk);
            map_image(path, &opts)
                .await
                .map_err(|e| match e {
                    MapError::Open(o) => MeasureError::Open(o),
                    other => MeasureError::Status {
                        path: path.to_owned(),
                        error: other.to_string(),
                    },
                })?
                .into_iter()
                .filter(|e| e.data && !e.zero)
                .map(|e| (e.start, e.start + e.length))
                .collect()
        }
    };
    Ok((size, data_bytes(&runs, cs), bitmaps_ok))
}

/// The snapshot `want` names in `disk`, refused as QEMU refuses to load
/// it (a raw image has none).
async fn find_snapshot(
    disk: &Disk,
    path: &Path,
    want: &SnapshotRef,
) -> Result<engine::Snapshot, MeasureError> {
    let Disk::Qcow2(img) = disk else {
        return Err(MeasureError::Snapshot(
            "Block format 'raw' used by device '' does not support temporarily loading internal snapshots"
                .into(),
        ));
    };
    let list = img
        .snapshots()
        .await
        .map_err(|error| MeasureError::Status {
            path: path.to_owned(),
            error: error.to_string(),
        })?;
    want.find(&list)
        .cloned()
        .ok_or_else(|| MeasureError::Snapshot("Can't find snapshot".into()))
}

/// The bytes a target with `cs`-byte clusters allocates for data `runs`
/// (sorted, disjoint): each run extended to the end of its last cluster,
/// what it covers then skipped, as QEMU's walk over block status counts.
pub fn data_bytes(runs: &[(u64, u64)], cs: u64) -> u64 {
    let mut required = 0;
    let mut pos = 0;
    for &(start, end) in runs {
        let from = start.max(pos);
        if from >= end {
            continue;
        }
        let pnum = end.next_multiple_of(cs) - from;
        required += from % cs + pnum;
        pos = from + pnum;
    }
    required
}
