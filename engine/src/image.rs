//! The opened image: its state, create, open and close. The guest paths
//! live in their own modules (`read`, `write`, `discard`), each adding an
//! `impl` block to [`Image`].

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use crate::cache::TableCache;
use crate::counters::Counters;
use crate::dev::{BlockDev, WriteFlags};
use crate::error::{Error, Result};
use crate::format::header::{self, compat, incompat, CompressionType, Header};
use crate::format::{refcount, L1Entry};
use crate::geometry::Geometry;
use crate::inflight::InFlight;
use crate::options::EngineOptions;
use crate::sync::{CoMutex, WaitQueue};

/// qcow2 version: 2 (compat 0.10) or 3 (compat 1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Compat {
    #[serde(rename = "0.10")]
    V2,
    #[serde(rename = "1.1")]
    V3,
}

/// What `create` formats a device with; names follow qemu-img's `-o` options.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CreateOptions {
    /// Virtual disk size in bytes.
    pub size: u64,
    /// Power of two from 512 to 2 MiB.
    pub cluster_size: u64,
    /// Power of two from 1 to 64 (version 2 images: 16 only).
    pub refcount_bits: u32,
    pub compat: Compat,
    pub lazy_refcounts: bool,
    pub extended_l2: bool,
    /// Backing file name as stored in the header.
    pub backing_file: Option<String>,
    /// Backing format ("qcow2" or "raw") stored in the header extension.
    pub backing_format: Option<String>,
    /// How compressed clusters are encoded (zstd needs compat 1.1).
    /// Options at their default are left out of the JSON, so that saved
    /// cases read and write as they did before these options existed.
    #[serde(skip_serializing_if = "is_default")]
    pub compression_type: CompressionType,
    /// External data file name as stored in the header; guest data then
    /// goes to the data device given to `create_with_data` (compat 1.1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_file: Option<String>,
    /// The data file is kept a valid raw image of the guest disk: every
    /// cluster is mapped at create, and zeroing reaches the data file.
    #[serde(skip_serializing_if = "is_default")]
    pub data_file_raw: bool,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            size: 0,
            cluster_size: 65536,
            refcount_bits: 16,
            compat: Compat::V3,
            lazy_refcounts: false,
            extended_l2: false,
            backing_file: None,
            backing_format: None,
            compression_type: CompressionType::Zlib,
            data_file: None,
            data_file_raw: false,
        }
    }
}

/// The backing file of an image: raw, or a qcow2 image with its own chain.
pub enum Backing<D: BlockDev> {
    Raw(D),
    Qcow2(Box<Image<D>>),
}

/// A cluster whose refcount is to drop once the metadata change that
/// stopped referencing it is durable.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingFree {
    pub cluster: u64,
    /// Data I/O with a sequence number below this may still touch the
    /// cluster; it must finish before the cluster can be reused.
    pub io_seq: u64,
    /// The L2/L1 change is durable (a writeback has completed since).
    pub durable: bool,
}

/// Metadata state, protected by `Image::meta_lock` for any sequence that
/// spans an await. Never borrowed across an await.
pub(crate) struct Meta {
    pub header: Header,
    pub l1: Vec<u64>,
    pub l1_dirty: BTreeSet<usize>,
    pub reftable: Vec<u64>,
    pub reftable_dirty: bool,
    /// Host offsets of the refcount blocks and the L2 tables the active L1
    /// table has pointed at, for the overlap check: guest data must never
    /// be written over them.
    pub meta_clusters: BTreeSet<u64>,
    pub header_dirty: bool,
    pub l2: TableCache,
    pub rc: TableCache,
    /// Where the search for free clusters starts.
    pub free_hint: u64,
    /// One past the highest cluster in use or allocated.
    pub end_cluster: u64,
    pub pending_frees: Vec<PendingFree>,
    /// The dirty bit is set in the header on disk.
    pub dirty_on_disk: bool,
    /// Lazy refcounts: refcount blocks are written only at close or
    /// eviction, under the dirty bit.
    pub lazy: bool,
    /// A metadata write failed: memory and disk may disagree.
    pub poisoned: bool,
    /// The file's length before the engine first grew it ahead of
    /// allocation (see `grow`); what closing may trim back to.
    pub grown_from: Option<u64>,
    /// Growing failed once (the device cannot zero efficiently, or an
    /// error): not tried again while the image is open.
    pub grow_disabled: bool,
    /// Host bytes `[start, end)` that growing has zeroed, contiguous, in
    /// this session: a cluster there past every cluster used before it is
    /// handed out still reads as zeroes (see `grow::is_fresh`).
    pub grown_zero: (u64, u64),
}

/// An opened qcow2 image.
pub struct Image<D: BlockDev> {
    pub(crate) dev: D,
    /// The external data file, present exactly when the header sets
    /// incompatible bit 2; guest data I/O goes through `data_dev()`.
    pub(crate) data: Option<D>,
    pub(crate) backing: Option<Backing<D>>,
    pub(crate) opts: EngineOptions,
    pub(crate) geo: Geometry,
    pub(crate) meta_lock: CoMutex,
    pub(crate) meta: RefCell<Meta>,
    pub(crate) inflight: RefCell<InFlight>,
    /// Woken whenever in-flight writes, allocations or I/O change state.
    pub(crate) wq: WaitQueue,
    pub(crate) counters: RefCell<Counters>,
}

/// Largest L1 table QEMU accepts (32 MiB).
const MAX_L1_BYTES: u64 = 32 << 20;
/// Smallest cluster size QEMU accepts with extended L2 entries: below it a
/// subcluster would be smaller than a 512-byte sector.
const MIN_EXTENDED_L2_CLUSTER_SIZE: u64 = 16 << 10;
/// Largest refcount table QEMU accepts (8 MiB).
const MAX_REFTABLE_BYTES: u64 = 8 << 20;

fn read_be64_table(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

pub(crate) fn be64_bytes(table: &[u64]) -> Vec<u8> {
    table.iter().flat_map(|v| v.to_be_bytes()).collect()
}

impl<D: BlockDev> Image<D> {
    /// Format `dev` as an empty qcow2 image. Layout: header, refcount
    /// table, refcount blocks, L1 table, each starting on a cluster.
    pub async fn create(dev: &D, o: &CreateOptions) -> Result<()> {
        Self::create_with_data(dev, None, o).await
    }

    /// [`Image::create`], with `data` the external data file when
    /// `o.data_file` names one (it is emptied and sized to the disk).
    /// With `data_file_raw` every L2 table is preallocated after the L1
    /// table, each cluster mapped to its own guest offset.
    pub async fn create_with_data(dev: &D, data: Option<&D>, o: &CreateOptions) -> Result<()> {
        let bad = |name: &str, reason: String| Error::InvalidOption {
            name: name.into(),
            reason,
        };
        if !o.cluster_size.is_power_of_two() || !(512..=2 << 20).contains(&o.cluster_size) {
            return Err(bad(
                "cluster_size",
                format!("{} is not a power of two from 512 to 2M", o.cluster_size),
            ));
        }
        if !o.refcount_bits.is_power_of_two() || o.refcount_bits > 64 {
            return Err(bad(
                "refcount_bits",
                format!("{} is not a power of two from 1 to 64", o.refcount_bits),
            ));
        }
        let version = match o.compat {
            Compat::V2 => 2,
            Compat::V3 => 3,
        };
        if version == 2 && o.refcount_bits != 16 {
            return Err(bad(
                "refcount_bits",
                "compat=0.10 requires refcount_bits=16".into(),
            ));
        }
        if version == 2 && o.lazy_refcounts {
            return Err(bad(
                "lazy_refcounts",
                "compat=0.10 has no lazy refcounts".into(),
            ));
        }
        if version == 2 && o.compression_type != CompressionType::Zlib {
            return Err(bad(
                "compression_type",
                "compat=0.10 supports only zlib compression".into(),
            ));
        }
        if o.extended_l2 && version == 2 {
            return Err(bad(
                "extended_l2",
                "extended L2 entries are only supported with compat=1.1".into(),
            ));
        }
        if o.extended_l2 && o.cluster_size < MIN_EXTENDED_L2_CLUSTER_SIZE {
            return Err(bad(
                "extended_l2",
                format!(
                    "extended L2 entries are only supported with cluster sizes of at least \
                     {MIN_EXTENDED_L2_CLUSTER_SIZE} bytes (cluster_size is {})",
                    o.cluster_size
                ),
            ));
        }
        if o.backing_format.is_some() && o.backing_file.is_none() {
            return Err(bad("backing_fmt", "given without a backing file".into()));
        }
        crate::data_file::check_create(o, data.is_some())?;
        if let Some(name) = &o.backing_file {
            if name.len() > header::MAX_BACKING_FILE_NAME as usize {
                return Err(bad("backing_file", "name longer than 1023 bytes".into()));
            }
        }
        let cs = o.cluster_size;
        let cluster_bits = cs.trailing_zeros();
        let l2_entry_size = if o.extended_l2 { 16 } else { 8 };
        let l2_span = cs * (cs / l2_entry_size);
        let l1_entries = o.size.div_ceil(l2_span);
        if l1_entries * 8 > MAX_L1_BYTES {
            return Err(bad(
                "size",
                format!("{} bytes needs an L1 table above 32 MiB", o.size),
            ));
        }
        let l1_clusters = (l1_entries * 8).div_ceil(cs);
        // Preallocated L2 tables (data_file_raw), one per L1 entry.
        let l2_tables = if o.data_file_raw { l1_entries } else { 0 };
        let rc_entries = cs * 8 / o.refcount_bits as u64;
        // Header, reftable (t) and refblocks (b) must count themselves.
        let (mut t, mut b) = (1u64, 1u64);
        loop {
            let total = 1 + t + b + l1_clusters + l2_tables;
            let nb = total.div_ceil(rc_entries);
            let nt = (nb * 8).div_ceil(cs);
            if nb == b && nt == t {
                break;
            }
            b = nb.max(1);
            t = nt.max(1);
        }
        if t * cs > MAX_REFTABLE_BYTES {
            return Err(bad("size", "refcount table would exceed 8 MiB".into()));
        }
        let reftable_off = cs;
        let refblocks_off = reftable_off + t * cs;
        let l1_off = refblocks_off + b * cs;
        let l2_off = l1_off + l1_clusters * cs;
        let total = 1 + t + b + l1_clusters + l2_tables;

        let mut h = Header {
            version,
            backing_file_offset: 0,
            backing_file_size: 0,
            cluster_bits,
            size: o.size,
            crypt_method: 0,
            l1_size: l1_entries as u32,
            l1_table_offset: l1_off,
            refcount_table_offset: reftable_off,
            refcount_table_clusters: t as u32,
            nb_snapshots: 0,
            snapshots_offset: 0,
            incompatible_features: (if o.compression_type == CompressionType::Zlib {
                0
            } else {
                incompat::COMPRESSION_TYPE
            }) | if o.extended_l2 {
                incompat::EXTENDED_L2
            } else {
                0
            },
            compatible_features: if o.lazy_refcounts {
                compat::LAZY_REFCOUNTS
            } else {
                0
            },
            autoclear_features: 0,
            refcount_order: o.refcount_bits.trailing_zeros(),
            header_length: if version == 3 {
                header::V3_HEADER_LEN as u32
            } else {
                header::V2_HEADER_LEN as u32
            },
            compression_type: o.compression_type.code(),
            extensions: Vec::new(),
            backing_file: o.backing_file.clone(),
        };
        if let Some(fmt) = &o.backing_format {
            h.extensions.push(header::Extension {
                kind: header::ext::BACKING_FORMAT,
                data: fmt.as_bytes().to_vec(),
            });
        }
        if let Some(name) = &o.data_file {
            h.incompatible_features |= incompat::EXTERNAL_DATA;
            if o.data_file_raw {
                h.autoclear_features |= header::autoclear::RAW_EXTERNAL;
            }
            h.extensions.push(header::Extension {
                kind: header::ext::EXTERNAL_DATA_FILE,
                data: name.as_bytes().to_vec(),
            });
        }
        if version == 3 {
            h.extensions.push(Header::feature_table());
        }
        // The feature name table is optional: small clusters may not have
        // room for it next to a long backing file name.
        let hdr = match h.serialize() {
            Ok(b) => b,
            Err(_) if version == 3 => {
                h.extensions
                    .retain(|e| e.kind != header::ext::FEATURE_TABLE);
                h.serialize()?
            }
            Err(e) => return Err(e),
        };

        let mut reftable = vec![0u64; (t * cs / 8) as usize];
        for i in 0..b {
            reftable[i as usize] = refblocks_off + i * cs;
        }
        let mut blocks = vec![0u8; (b * cs) as usize];
        for c in 0..total {
            let blk = (c / rc_entries) as usize;
            let idx = (c % rc_entries) as usize;
            let start = blk * cs as usize;
            refcount::set(
                &mut blocks[start..start + cs as usize],
                o.refcount_bits,
                idx,
                1,
            );
        }
        dev.truncate(0).await?;
        dev.write(reftable_off, &be64_bytes(&reftable), WriteFlags::default())
            .await?;
        dev.write(refblocks_off, &blocks, WriteFlags::default())
            .await?;
        if l2_tables > 0 {
            let l1: Vec<u64> = (0..l1_entries)
                .map(|i| L1Entry::new(l2_off + i * cs, true).0)
                .collect();
            dev.write(l1_off, &be64_bytes(&l1), WriteFlags::default())
                .await?;
            for i in 0..l2_tables {
                let table = crate::data_file::identity_l2_table(cs, o.size, i, o.extended_l2);
                dev.write(l2_off + i * cs, &table, WriteFlags::default())
                    .await?;
            }
        } else if l1_clusters > 0 {
            dev.write_zeroes(l1_off, l1_clusters * cs, Default::default())
                .await?;
        }
        if let Some(data) = data {
            data.truncate(0).await?;
            data.truncate(o.size).await?;
            data.flush().await?;
        }
        dev.flush().await?;
        // The header last: until it is durable the device is not an image.
        dev.write(0, &hdr, WriteFlags::default()).await?;
        dev.flush().await?;
        Ok(())
    }

    /// Open the image on `dev`. The backing file, if the header names one,
    /// is attached afterwards with [`Image::attach_backing`]. An image with
    /// an external data file needs [`Image::open_with_data`].
    pub async fn open(dev: D, opts: EngineOptions) -> Result<Self> {
        Self::open_with_data(dev, None, opts).await
    }

    /// Read and parse the header of the image on `dev`, without opening
    /// it: enough to learn which data file or backing file it names.
    pub async fn read_header(dev: &D) -> Result<Header> {
        let file_len = dev.len();
        let mut first = vec![0u8; header::V3_MIN_HEADER_LEN.min(file_len as usize).max(8)];
        dev.read(0, &mut first).await?;
        if first.len() < header::V2_HEADER_LEN {
            if first.len() >= 4 && first[..4] != header::MAGIC.to_be_bytes() {
                return Err(Error::format("magic", "not a qcow2 image (bad magic)"));
            }
            return Err(Error::format("header", "file too short for a qcow2 header"));
        }
        let cluster_bits = u32::from_be_bytes(first[20..24].try_into().expect("4 bytes"));
        let cs = if (9..=21).contains(&cluster_bits) {
            1u64 << cluster_bits
        } else {
            512
        };
        let mut cluster = vec![0u8; cs.min(file_len) as usize];
        dev.read(0, &mut cluster).await?;
        Header::parse(&cluster)
    }

    /// Open the image on `dev` with `data` as its external data file. The
    /// data file must be given exactly when the header has incompatible
    /// bit 2 set; without it the open fails with
    /// [`Error::DataFileRequired`], naming the file the header names,
    /// unless it is read-only: that open describes the image, and guest
    /// reads fail with the same error.
    pub async fn open_with_data(dev: D, data: Option<D>, opts: EngineOptions) -> Result<Self> {
        if opts.l2_cache_tables < 2 || opts.refcount_cache_tables < 2 {
            return Err(Error::InvalidOption {
                name: "cache size".into(),
                reason: "caches need room for at least two tables".into(),
            });
        }
        let file_len = dev.len();
        let mut h = Self::read_header(&dev).await?;
        Self::check_features(&h, opts.read_only)?;
        crate::data_file::check_open(&h, data.is_some(), opts.read_only)?;
        let geo = Geometry::new(&h);
        let cs = geo.cluster_size;
        let limit = opts.metadata_memory_limit;

        // L1 table.
        let need_l1 = geo.l1_entries_for(h.size);
        if (h.l1_size as u64) < need_l1 {
            return Err(Error::format(
                "l1_size",
                format!(
                    "{} entries cannot map the {}-byte disk (needs {need_l1})",
                    h.l1_size, h.size
                ),
            ));
        }
        let l1_bytes = h.l1_size as u64 * 8;
        if l1_bytes > MAX_L1_BYTES {
            return Err(Error::format(
                "l1_size",
                format!("{} entries exceed the 32 MiB limit", h.l1_size),
            ));
        }
        if l1_bytes > limit {
            return Err(Error::MetadataLimit {
                what: "L1 table".into(),
                needed: l1_bytes,
                limit,
            });
        }
        let rt_bytes = h.refcount_table_clusters as u64 * cs;
        if h.refcount_table_clusters == 0 {
            return Err(Error::format("refcount_table_clusters", "is zero"));
        }
        if rt_bytes > MAX_REFTABLE_BYTES {
            return Err(Error::format(
                "refcount_table_clusters",
                format!(
                    "{} clusters exceed the 8 MiB limit",
                    h.refcount_table_clusters
                ),
            ));
        }
        if rt_bytes + l1_bytes > limit {
            return Err(Error::MetadataLimit {
                what: "refcount table".into(),
                needed: rt_bytes,
                limit,
            });
        }
        Self::check_region("l1_table_offset", h.l1_table_offset, l1_bytes, cs, file_len)?;
        Self::check_region(
            "refcount_table_offset",
            h.refcount_table_offset,
            rt_bytes,
            cs,
            file_len,
        )?;
        if l1_bytes > 0
            && overlaps(
                h.l1_table_offset,
                l1_bytes,
                h.refcount_table_offset,
                rt_bytes,
            )
        {
            return Err(Error::format(
                "l1_table_offset",
                "L1 table overlaps the refcount table",
            ));
        }
        if h.nb_snapshots > 0 {
            if h.snapshots_offset % cs != 0
                || h.snapshots_offset == 0
                || h.snapshots_offset >= file_len
            {
                return Err(Error::format(
                    "snapshots_offset",
                    format!("{:#x} is invalid", h.snapshots_offset),
                ));
            }
            if h.nb_snapshots > 65536 {
                return Err(Error::format(
                    "nb_snapshots",
                    format!("{} is above 65536", h.nb_snapshots),
                ));
            }
        }
        let mut l1_raw = vec![0u8; l1_bytes as usize];
        dev.read(h.l1_table_offset, &mut l1_raw).await?;
        let l1 = read_be64_table(&l1_raw);
        for (i, &e) in l1.iter().enumerate() {
            let e = L1Entry(e);
            e.validate(i, cs)?;
            let off = e.l2_offset();
            if off != 0 {
                let field = format!("L1 entry {i}");
                if off + cs > file_len {
                    return Err(Error::format(
                        field,
                        format!("L2 table {off:#x} is beyond the end of the file"),
                    ));
                }
                if off < cs
                    || overlaps(off, cs, h.l1_table_offset, l1_bytes)
                    || overlaps(off, cs, h.refcount_table_offset, rt_bytes)
                {
                    return Err(Error::format(
                        field,
                        format!("L2 table {off:#x} overlaps the header or another table"),
                    ));
                }
            }
        }
        let mut rt_raw = vec![0u8; rt_bytes as usize];
        dev.read(h.refcount_table_offset, &mut rt_raw).await?;
        let reftable = read_be64_table(&rt_raw);
        for (i, &off) in reftable.iter().enumerate() {
            let field = format!("refcount table entry {i}");
            if off & (cs - 1) != 0 {
                return Err(Error::format(
                    field,
                    format!("refcount block {off:#x} is not cluster aligned"),
                ));
            }
            if off != 0 {
                if off + cs > file_len {
                    return Err(Error::format(
                        field,
                        format!("refcount block {off:#x} is beyond the end of the file"),
                    ));
                }
                if off < cs
                    || overlaps(off, cs, h.l1_table_offset, l1_bytes)
                    || overlaps(off, cs, h.refcount_table_offset, rt_bytes)
                {
                    return Err(Error::format(
                        field,
                        format!("refcount block {off:#x} overlaps the header or another table"),
                    ));
                }
            }
        }

        // An L2 table and a refcount block must never share a cluster, and
        // an L2 table that may be written in place belongs to one L1 entry.
        let refblocks: BTreeSet<u64> = reftable.iter().copied().filter(|&o| o != 0).collect();
        let mut meta_clusters = refblocks.clone();
        let mut l2_owner: BTreeMap<u64, usize> = BTreeMap::new();
        for (i, &e) in l1.iter().enumerate() {
            let off = L1Entry(e).l2_offset();
            if off == 0 {
                continue;
            }
            if refblocks.contains(&off) {
                return Err(Error::format(
                    format!("L1 entry {i}"),
                    format!("L2 table {off:#x} is also a refcount block"),
                ));
            }
            if let Some(&first) = l2_owner.get(&off) {
                if L1Entry(e).copied() || L1Entry(l1[first]).copied() {
                    return Err(Error::format(
                        format!("L1 entry {i}"),
                        format!("L2 table {off:#x} is also the table of L1 entry {first}, and marked as not shared"),
                    ));
                }
            }
            l2_owner.entry(off).or_insert(i);
            meta_clusters.insert(off);
        }

        let end_cluster = file_len.div_ceil(cs);
        let dirty = h.is_dirty();
        let mut header_dirty = false;
        if !opts.read_only {
            // Autoclear bits name features this engine does not keep up to
            // date; clearing them tells other readers not to trust them.
            let keep = h.autoclear_features & crate::data_file::maintained_autoclear(&h);
            if h.autoclear_features != keep {
                h.autoclear_features = keep;
                header_dirty = true;
            }
        }
        let lazy = !opts.read_only && h.lazy_refcounts();
        let meta = Meta {
            header: h,
            l1,
            l1_dirty: BTreeSet::new(),
            reftable,
            reftable_dirty: false,
            meta_clusters,
            header_dirty,
            l2: TableCache::new(opts.l2_cache_tables),
            rc: TableCache::new(opts.refcount_cache_tables),
            free_hint: 0,
            end_cluster,
            pending_frees: Vec::new(),
            dirty_on_disk: dirty,
            lazy,
            poisoned: false,
            grown_from: None,
            grow_disabled: false,
            grown_zero: (0, 0),
        };
        let img = Image {
            dev,
            data,
            backing: None,
            opts,
            geo,
            meta_lock: CoMutex::default(),
            meta: RefCell::new(meta),
            inflight: RefCell::new(InFlight::default()),
            wq: WaitQueue::default(),
            counters: RefCell::new(Counters::default()),
        };
        if !img.opts.read_only {
            if dirty {
                img.rebuild_refcounts().await?;
            } else if header_dirty {
                img.write_header().await?;
                img.dev.flush().await?;
            }
        }
        Ok(img)
    }

    fn check_features(h: &Header, read_only: bool) -> Result<()> {
        let unknown = h.incompatible_features & !incompat::KNOWN;
        if unknown != 0 {
            let bit = unknown.trailing_zeros();
            let name = h.feature_name(0, bit).unwrap_or_else(|| "unknown".into());
            return Err(Error::Unsupported(format!(
                "incompatible feature bit {bit} ({name}) is set"
            )));
        }
        if h.is_corrupt() && !read_only {
            return Err(Error::Unsupported(
                "incompatible feature bit 1 (corrupt) is set: the image is marked corrupt; open it read-only or repair it".into(),
            ));
        }
        h.check_compression()?;
        if h.extended_l2() && h.cluster_size() < MIN_EXTENDED_L2_CLUSTER_SIZE {
            return Err(Error::format(
                "cluster_bits",
                format!(
                    "extended L2 entries need clusters of at least {MIN_EXTENDED_L2_CLUSTER_SIZE} bytes, not {}",
                    h.cluster_size()
                ),
            ));
        }
        if h.crypt_method != 0 {
            return Err(Error::Unsupported(format!(
                "crypt_method {} (encryption)",
                h.crypt_method
            )));
        }
        if h.version == 2 && h.refcount_order != 4 {
            return Err(Error::format(
                "refcount_order",
                "version 2 images have 16-bit refcounts",
            ));
        }
        Ok(())
    }

    fn check_region(field: &str, off: u64, len: u64, cs: u64, file_len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        if !off.is_multiple_of(cs) {
            return Err(Error::format(
                field,
                format!("{off:#x} is not cluster aligned"),
            ));
        }
        if off < cs {
            return Err(Error::format(
                field,
                format!("{off:#x} overlaps the header"),
            ));
        }
        match off.checked_add(len) {
            Some(end) if end <= file_len.next_multiple_of(cs) => Ok(()),
            _ => Err(Error::format(
                field,
                format!("table at {off:#x} (+{len}) is beyond the end of the file"),
            )),
        }
    }

    /// The backing file name and format the header names.
    pub fn backing_spec(&self) -> Option<(String, Option<String>)> {
        let m = self.meta.borrow();
        m.header
            .backing_file
            .clone()
            .map(|n| (n, m.header.backing_format()))
    }

    pub fn attach_backing(&mut self, backing: Backing<D>) {
        self.backing = Some(backing);
    }

    pub fn virtual_size(&self) -> u64 {
        self.geo.virtual_size
    }

    pub fn cluster_size(&self) -> u64 {
        self.geo.cluster_size
    }

    /// A copy of the header as currently held in memory.
    pub fn header(&self) -> Header {
        self.meta.borrow().header.clone()
    }

    /// Clean close: write everything back, clear the dirty bit, flush, and
    /// give the device back.
    pub async fn close(self) -> Result<D> {
        Ok(self.close_with_data().await?.0)
    }

    /// [`Image::close`], giving back the data file's device too.
    pub async fn close_with_data(self) -> Result<(D, Option<D>)> {
        if !self.opts.read_only {
            self.flush_internal(true).await?;
        }
        Ok((self.dev, self.data))
    }

    /// Drop the image without writing anything, giving back the image
    /// device and the data file's device.
    pub fn into_devices(self) -> (D, Option<D>) {
        (self.dev, self.data)
    }

    /// Drop the image without writing anything (what a crash leaves).
    pub fn into_device(self) -> D {
        self.dev
    }

    pub fn device(&self) -> &D {
        &self.dev
    }

    pub fn counters(&self) -> Counters {
        *self.counters.borrow()
    }

    pub(crate) fn count(&self, f: impl FnOnce(&mut Counters)) {
        f(&mut self.counters.borrow_mut());
    }

    /// Write the in-memory header to cluster 0 (no flush). A failure
    /// poisons the image, as any metadata write's: the header in memory
    /// (a new refcount table, a cleared dirty bit) is not the one on disk.
    pub(crate) async fn write_header(&self) -> Result<()> {
        let bytes = self.meta.borrow().header.serialize()?;
        self.write_meta(0, &bytes).await?;
        self.meta.borrow_mut().header_dirty = false;
        Ok(())
    }
}

pub(crate) fn overlaps(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen > 0 && blen > 0 && a < b.saturating_add(blen) && b < a.saturating_add(alen)
}
