//! Opening an image, as named steps: read and parse the header, refuse
//! features this engine cannot honour, check that the L1 and refcount
//! tables fit the file and the metadata memory limit, read and validate
//! both tables, find the clusters metadata occupies, then assemble the
//! [`Image`] and recover it (a dirty image's refcounts are rebuilt) or
//! record the autoclear bits it cleared.
//!
//! Every check happens before anything is written: an image the engine
//! refuses is left as it was.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};

use crate::alloc::allocator::Allocator;
use crate::alloc::growth::Growth;
use crate::alloc::inflight::InFlight;
use crate::cluster::l1l2::L1L2;
use crate::cluster::meta_clusters::MetaClusters;
use crate::counters::Counters;
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::format::geometry::Geometry;
use crate::format::header::{self, incompat, Header};
use crate::format::read_be64_table;
use crate::format::L1Entry;
use crate::image::{
    overlaps, Image, Meta, MAX_L1_BYTES, MAX_REFTABLE_BYTES, MIN_EXTENDED_L2_CLUSTER_SIZE,
};
use crate::options::EngineOptions;
use crate::refcount::reftable::RefTable;
use crate::rules::{Dev, Layout, RuleLedger};
use crate::sync::{CoMutex, WaitMap, WaitQueue};

/// The byte sizes of the two tables an open reads whole.
struct TableSizes {
    l1_bytes: u64,
    rt_bytes: u64,
}

impl<D: BlockDev> Image<D> {
    /// [`Image::read_header`]: the implementation.
    pub(crate) async fn read_header_impl(dev: &D) -> Result<Header> {
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

    /// [`Image::open_with_data`]: the implementation.
    pub(crate) async fn open_with_data_impl(
        dev: D,
        data: Option<D>,
        opts: EngineOptions,
        probe: crate::steps::StepProbe,
    ) -> Result<Self> {
        if opts.l2_cache_tables < 2 || opts.refcount_cache_tables < 2 {
            return Err(Error::InvalidOption {
                name: "cache size".into(),
                reason: "caches need room for at least two tables".into(),
            });
        }
        let file_len = dev.len();
        let h = Self::read_header(&dev).await?;
        Self::check_features(&h, opts.read_only)?;
        crate::ops::data_file::check_open(&h, data.is_some(), opts.read_only)?;
        let geo = Geometry::new(&h);
        let sizes = Self::check_tables(&h, &geo, opts.metadata_memory_limit, file_len)?;
        let l1 = Self::read_l1(&dev, &h, &sizes, file_len).await?;
        let reftable = Self::read_reftable(&dev, &h, &sizes, file_len).await?;
        let meta_clusters = Self::metadata_clusters(&l1, &reftable)?;
        let mut img = Self::assemble(
            dev,
            data,
            opts,
            geo,
            h,
            l1,
            reftable,
            meta_clusters,
            file_len,
        );
        // Before the repair: whoever crashes the open sees its steps.
        img.steps = probe;
        img.recover().await?;
        Ok(img)
    }

    /// The L1 and refcount tables are as large as the disk needs and no
    /// larger than the format and the memory limit allow, lie inside the
    /// file, apart from the header and each other; the snapshot table
    /// fields are sane.
    fn check_tables(h: &Header, geo: &Geometry, limit: u64, file_len: u64) -> Result<TableSizes> {
        let cs = geo.cluster_size;
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
            if !h.snapshots_offset.is_multiple_of(cs)
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
        Ok(TableSizes { l1_bytes, rt_bytes })
    }

    /// Read the L1 table; every entry is valid and names an L2 table
    /// inside the file, clear of the header and the other tables.
    async fn read_l1(dev: &D, h: &Header, sizes: &TableSizes, file_len: u64) -> Result<Vec<u64>> {
        let TableSizes { l1_bytes, rt_bytes } = *sizes;
        let cs = h.cluster_size();
        let mut l1_raw = vec![0u8; l1_bytes as usize];
        dev.read(h.l1_table_offset, &mut l1_raw).await?;
        let l1 = read_be64_table(&l1_raw);
        for (i, &e) in l1.iter().enumerate() {
            let e = L1Entry(e);
            e.validate(i, cs)?;
            let off = e.l2_offset();
            if off != 0 {
                // Named only on error: a table has thousands of entries.
                let field = || format!("L1 entry {i}");
                if off + cs > file_len {
                    return Err(Error::format(
                        field(),
                        format!("L2 table {off:#x} is beyond the end of the file"),
                    ));
                }
                if off < cs
                    || overlaps(off, cs, h.l1_table_offset, l1_bytes)
                    || overlaps(off, cs, h.refcount_table_offset, rt_bytes)
                {
                    return Err(Error::format(
                        field(),
                        format!("L2 table {off:#x} overlaps the header or another table"),
                    ));
                }
            }
        }
        Ok(l1)
    }

    /// Read the refcount table; every entry is a cluster-aligned refcount
    /// block inside the file, clear of the header and the other tables.
    async fn read_reftable(
        dev: &D,
        h: &Header,
        sizes: &TableSizes,
        file_len: u64,
    ) -> Result<Vec<u64>> {
        let TableSizes { l1_bytes, rt_bytes } = *sizes;
        let cs = h.cluster_size();
        let mut rt_raw = vec![0u8; rt_bytes as usize];
        dev.read(h.refcount_table_offset, &mut rt_raw).await?;
        let reftable = read_be64_table(&rt_raw);
        for (i, &off) in reftable.iter().enumerate() {
            // Named only on error: a table has thousands of entries.
            let field = || format!("refcount table entry {i}");
            if off & (cs - 1) != 0 {
                return Err(Error::format(
                    field(),
                    format!("refcount block {off:#x} is not cluster aligned"),
                ));
            }
            if off != 0 {
                if off + cs > file_len {
                    return Err(Error::format(
                        field(),
                        format!("refcount block {off:#x} is beyond the end of the file"),
                    ));
                }
                if off < cs
                    || overlaps(off, cs, h.l1_table_offset, l1_bytes)
                    || overlaps(off, cs, h.refcount_table_offset, rt_bytes)
                {
                    return Err(Error::format(
                        field(),
                        format!("refcount block {off:#x} overlaps the header or another table"),
                    ));
                }
            }
        }

        Ok(reftable)
    }

    /// The clusters that hold L2 tables or refcount blocks. An L2 table
    /// and a refcount block must never share a cluster, and an L2 table
    /// that may be written in place belongs to one L1 entry.
    fn metadata_clusters(l1: &[u64], reftable: &[u64]) -> Result<BTreeSet<u64>> {
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

        Ok(meta_clusters)
    }

    /// The image's in-memory state from what the open read. A read-write
    /// open clears the autoclear bits of features this engine does not keep
    /// up to date (telling other readers not to trust them); the header
    /// is marked dirty for [`Image::recover`] to write.
    #[allow(clippy::too_many_arguments)]
    fn assemble(
        dev: D,
        data: Option<D>,
        opts: EngineOptions,
        geo: Geometry,
        mut h: Header,
        l1: Vec<u64>,
        reftable: Vec<u64>,
        meta_clusters: BTreeSet<u64>,
        file_len: u64,
    ) -> Self {
        let cs = geo.cluster_size;
        let end_cluster = file_len.div_ceil(cs);
        let dirty = h.is_dirty();
        let mut header_dirty = false;
        if !opts.read_only {
            // Autoclear bits name features this engine does not keep up to
            // date; clearing them tells other readers not to trust them.
            let keep = h.autoclear_features & crate::ops::data_file::maintained_autoclear(&h);
            if h.autoclear_features != keep {
                h.autoclear_features = keep;
                header_dirty = true;
            }
        }
        let lazy = !opts.read_only && h.lazy_refcounts();
        let rules = RuleLedger::new(
            cfg!(debug_assertions) && opts.rule_checks && !opts.read_only,
            Layout {
                cluster_size: cs,
                data_file: data.is_some(),
                l1: (h.l1_table_offset, u64::from(h.l1_size) * 8),
                reftable: (
                    h.refcount_table_offset,
                    u64::from(h.refcount_table_clusters) * cs,
                ),
                dirty,
            },
        );
        let meta = Meta {
            header: h,
            header_dirty,
            dirty_on_disk: dirty,
            tables: L1L2::new(l1, opts.l2_cache_tables, geo.extended_l2),
            refs: RefTable::new(
                reftable,
                opts.refcount_cache_tables,
                geo.refcount_bits,
                lazy,
            ),
            meta_clusters: MetaClusters::new(meta_clusters),
            alloc: Allocator::new(end_cluster),
            growth: Growth::default(),
        };
        Image {
            dev,
            data,
            backing: None,
            opts,
            geo,
            meta: CoMutex::new(meta),
            inflight: RefCell::new(InFlight::default()),
            writes_wq: WaitQueue::default(),
            alloc_waits: WaitMap::default(),
            poisoned: Cell::new(false),
            frees: RefCell::default(),
            counters: RefCell::new(Counters::default()),
            meta_epochs: Cell::default(),
            rules: RefCell::new(rules),
            steps: Default::default(),
        }
    }

    /// After assembling a read-write image: rebuild the refcounts of an
    /// image left dirty (lazy refcounts), or write the header whose
    /// autoclear bits the open cleared.
    async fn recover(&self) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        let mg = self.meta.lock().await;
        let (dirty, header_dirty) = {
            let m = mg.borrow();
            (m.dirty_on_disk, m.header_dirty)
        };
        if dirty {
            drop(mg);
            self.count(|c| c.dirty_rebuilds += 1);
            self.rebuild_refcounts().await?;
        } else if header_dirty {
            self.write_header(&mg).await?;
            self.flush_dev(Dev::Image).await?;
        }
        Ok(())
    }

    fn check_features(h: &Header, read_only: bool) -> Result<()> {
        let unknown = h.incompatible_features & !incompat::KNOWN;
        if unknown != 0 {
            let (names, unnamed) = h.incompatible_feature_names(unknown);
            return Err(Error::UnsupportedFeatures { names, unnamed });
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
}
