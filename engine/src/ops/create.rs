//! Formatting a device as a new, empty qcow2 image, as four named steps:
//! check the options ([`check_options`]), plan where every structure goes
//! ([`Layout::plan`]), build the header ([`Layout::header`]), and write
//! the tables and then the header ([`Image::create_with_data`]).
//!
//! Layout: header, refcount table, refcount blocks, L1 table (and, with
//! `data_file_raw` or a preallocated image with a data file, one L2 table
//! per L1 entry mapping every cluster to its own offset), each starting
//! on a cluster. A preallocated image without a data file is laid out as
//! QEMU lays it out instead (`prealloc`). The header is written last,
//! after a flush: until it is durable the device is not an image.

use crate::dev::{BlockDev, WriteFlags};
use crate::error::{Error, Result};
use crate::format::be64_bytes;
use crate::format::header::{self, compat, incompat, CompressionType, Header};
use crate::format::{refcount, L1Entry};
use crate::image::{
    Compat, CreateOptions, Image, MAX_L1_BYTES, MAX_REFTABLE_BYTES, MIN_EXTENDED_L2_CLUSTER_SIZE,
};
use crate::ops::prealloc::{fill_zeroes, Plan, Preallocation};

fn bad(name: &str, reason: String) -> Error {
    Error::InvalidOption {
        name: name.into(),
        reason,
    }
}

/// Refuse option combinations QEMU refuses; returns the qcow2 version.
fn check_options(o: &CreateOptions, has_data: bool) -> Result<u32> {
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
    crate::ops::data_file::check_create(o, has_data)?;
    if o.preallocation != Preallocation::Off && o.backing_file.is_some() && !o.extended_l2 {
        // Preallocated clusters would read as zeroes and hide the backing
        // file; only extended L2 entries can leave them unallocated.
        return Err(bad(
            "preallocation",
            "Backing file and preallocation can only be used at the same time if extended_l2 is on"
                .into(),
        ));
    }
    if let Some(name) = &o.backing_file {
        if name.len() > header::MAX_BACKING_FILE_NAME as usize {
            return Err(bad("backing_file", "name longer than 1023 bytes".into()));
        }
    }
    Ok(version)
}

/// Whether every L2 table is written at create, each cluster mapped at its
/// own guest offset in the data file: raw external data, or a data file
/// with preallocation (QEMU preallocates only metadata in the image then).
fn identity_tables(o: &CreateOptions) -> bool {
    o.data_file.is_some() && (o.data_file_raw || o.preallocation != Preallocation::Off)
}

/// Where a new image's structures go, in clusters and bytes.
struct Layout {
    version: u32,
    cs: u64,
    l1_entries: u64,
    l1_clusters: u64,
    /// Preallocated L2 tables (data_file_raw), one per L1 entry.
    l2_tables: u64,
    /// Refcount entries per refcount block.
    rc_entries: u64,
    /// Refcount table clusters (`t`) and refcount blocks (`b`).
    reftable_clusters: u64,
    refblocks: u64,
    reftable_off: u64,
    refblocks_off: u64,
    l1_off: u64,
    l2_off: u64,
}

impl Layout {
    fn plan(o: &CreateOptions, version: u32) -> Result<Layout> {
        let cs = o.cluster_size;
        let l1_entries = o.l1_entries();
        if l1_entries * 8 > MAX_L1_BYTES {
            return Err(bad(
                "size",
                format!("{} bytes needs an L1 table above 32 MiB", o.size),
            ));
        }
        let l1_clusters = (l1_entries * 8).div_ceil(cs);
        let l2_tables = if identity_tables(o) { l1_entries } else { 0 };
        let rc_entries = cs * 8 / o.refcount_bits as u64;
        // Header, reftable (t) and refblocks (b) must count themselves:
        // iterate to the fixed point.
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
        Ok(Layout {
            version,
            cs,
            l1_entries,
            l1_clusters,
            l2_tables,
            rc_entries,
            reftable_clusters: t,
            refblocks: b,
            reftable_off,
            refblocks_off,
            l1_off,
            l2_off,
        })
    }

    /// Clusters in use once the image is written.
    fn clusters(&self) -> u64 {
        1 + self.reftable_clusters + self.refblocks + self.l1_clusters + self.l2_tables
    }

    /// The serialized header for this layout and these options.
    fn header(&self, o: &CreateOptions) -> Result<Vec<u8>> {
        let version = self.version;
        let mut h = Header {
            version,
            backing_file_offset: 0,
            backing_file_size: 0,
            cluster_bits: self.cs.trailing_zeros(),
            size: o.size,
            crypt_method: 0,
            l1_size: self.l1_entries as u32,
            l1_table_offset: self.l1_off,
            refcount_table_offset: self.reftable_off,
            refcount_table_clusters: self.reftable_clusters as u32,
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
        match h.serialize() {
            Ok(b) => Ok(b),
            Err(_) if version == 3 => {
                h.extensions
                    .retain(|e| e.kind != header::ext::FEATURE_TABLE);
                h.serialize()
            }
            Err(e) => Err(e),
        }
    }

    /// The refcount table and blocks: every cluster of the layout counted
    /// once.
    fn refcounts(&self, refcount_bits: u32) -> (Vec<u64>, Vec<u8>) {
        let cs = self.cs;
        let mut reftable = vec![0u64; (self.reftable_clusters * cs / 8) as usize];
        for i in 0..self.refblocks {
            reftable[i as usize] = self.refblocks_off + i * cs;
        }
        let mut blocks = vec![0u8; (self.refblocks * cs) as usize];
        for c in 0..self.clusters() {
            let blk = (c / self.rc_entries) as usize;
            let idx = (c % self.rc_entries) as usize;
            let start = blk * cs as usize;
            refcount::set(
                &mut blocks[start..start + cs as usize],
                refcount_bits,
                idx,
                1,
            );
        }
        (reftable, blocks)
    }
}

impl<D: BlockDev> Image<D> {
    /// [`Image::create_with_data`]: the implementation.
    pub(crate) async fn create_with_data_impl(
        dev: &D,
        data: Option<&D>,
        o: &CreateOptions,
    ) -> Result<()> {
        let version = check_options(o, data.is_some())?;
        let mut layout = Layout::plan(o, version)?;
        if o.preallocation != Preallocation::Off && data.is_none() {
            let plan = Plan::new(o, layout.l1_entries)?;
            layout.l1_off = plan.l1_offset();
            layout.reftable_off = plan.reftable_offset();
            layout.reftable_clusters = plan.reftable_clusters();
            let hdr = layout.header(o)?;
            dev.truncate(0).await?;
            plan.write(dev, o, o.extended_l2).await?;
            return write_header(dev, &hdr).await;
        }
        let hdr = layout.header(o)?;
        let (reftable, blocks) = layout.refcounts(o.refcount_bits);
        let Layout {
            cs,
            l1_entries,
            l1_clusters,
            l2_tables,
            reftable_off,
            refblocks_off,
            l1_off,
            l2_off,
            ..
        } = layout;

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
                // QEMU's preallocation leaves extended entries' bitmaps 0;
                // raw external data keeps every subcluster allocated.
                let table = crate::ops::data_file::identity_l2_table(
                    cs,
                    o.size,
                    i,
                    o.extended_l2,
                    o.data_file_raw,
                );
                dev.write(l2_off + i * cs, &table, WriteFlags::default())
                    .await?;
            }
        } else if l1_clusters > 0 {
            // The table's own bytes, not its whole clusters: QEMU's file
            // ends there (a 64 MiB image with 64 KiB clusters is 196,616
            // bytes long, not 262,144), and a file's length shows in
            // `du -b` and in what a script prints of it.
            dev.write_zeroes(l1_off, l1_entries * 8, Default::default())
                .await?;
        }
        if let Some(data) = data {
            data.truncate(0).await?;
            match o.preallocation {
                Preallocation::Falloc => fill_zeroes(data, 0, o.size, false).await?,
                Preallocation::Full => fill_zeroes(data, 0, o.size, true).await?,
                Preallocation::Off | Preallocation::Metadata => {}
            }
            data.truncate(o.size).await?;
            data.flush().await?;
        }
        write_header(dev, &hdr).await
    }
}

/// Flush what is written, then the header, then flush again: until the
/// header is durable the device is not an image.
async fn write_header<D: BlockDev>(dev: &D, hdr: &[u8]) -> Result<()> {
    dev.flush().await?;
    dev.write(0, hdr, WriteFlags::default()).await?;
    dev.flush().await?;
    Ok(())
}
