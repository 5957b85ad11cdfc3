//! One check pass over an opened image, in QEMU's order and with its
//! counting rules: rebuild the reference counts from every structure that
//! references clusters (`calculate`), compare them with the stored ones
//! (`compare`), check the COPIED flags (`check_copied`); with a repair mode
//! the same steps also fix what they find.

use super::bitmap;
use super::image::OpenImage;
use super::refcounts::{
    Imrt, RefcountReadError, MAX_CLUSTERS, REFT_OFFSET_MASK, REFT_RESERVED_MASK,
};
use super::report::{Finding, FindingKind};
use super::snapshot::SnapshotTable;
use super::source::read_u64s;

pub(crate) const L1E_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
pub(crate) const L1E_RESERVED_MASK: u64 = 0x7f00_0000_0000_01ff;
pub(crate) const L2E_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
pub(crate) const L2E_STD_RESERVED_MASK: u64 = 0x3f00_0000_0000_01fe;
pub(crate) const OFLAG_COPIED: u64 = 1 << 63;
pub(crate) const OFLAG_COMPRESSED: u64 = 1 << 62;
pub(crate) const OFLAG_ZERO: u64 = 1;
/// Metadata kinds a write may be allowed to overlap (QEMU's overlap
/// bits), what `overlap`'s check of each write is told to ignore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ol {
    None,
    ActiveL1,
    ActiveL2,
    RefcountBlock,
}

/// The most findings one pass keeps.
pub(crate) const MAX_FINDINGS: usize = 10_000;
const L2_BITMAP_ALL_ALLOC: u64 = 0xffff_ffff;
const L2_BITMAP_ALL_ZEROES: u64 = 0xffff_ffff << 32;

/// What a repair may fix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Fix {
    pub leaks: bool,
    pub errors: bool,
}

impl Fix {
    pub fn any(self) -> bool {
        self.leaks || self.errors
    }
}

/// Running counters; signed because a repair counts a corruption and then
/// takes it back when it fixes it, as QEMU does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub check_errors: i64,
    pub corruptions: i64,
    /// Of the corruptions: clusters of refcount 1 whose entry lacks
    /// COPIED, left unrepaired (see `CheckReport::copied_missing`).
    pub copied_missing: u64,
    pub leaks: i64,
    pub corruptions_fixed: i64,
    pub leaks_fixed: i64,
    pub allocated: u64,
    pub fragmented: u64,
    pub compressed: u64,
}

/// A pass that cannot go on (QEMU's negative return): the check fails.
#[derive(Debug)]
pub(crate) struct Abort(pub String);

/// The kinds of L2 entries (QEMU's cluster types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClusterType {
    Unallocated,
    ZeroPlain,
    ZeroAlloc,
    Normal,
    Compressed,
}

/// `data_file`: with an external data file, offset 0 with COPIED is guest
/// data at offset 0 of that file, not an unallocated cluster.
fn cluster_type(entry: u64, extended_l2: bool, data_file: bool) -> ClusterType {
    if entry & OFLAG_COMPRESSED != 0 {
        ClusterType::Compressed
    } else if entry & OFLAG_ZERO != 0 && !extended_l2 {
        if entry & L2E_OFFSET_MASK != 0 {
            ClusterType::ZeroAlloc
        } else {
            ClusterType::ZeroPlain
        }
    } else if entry & L2E_OFFSET_MASK == 0 && !(data_file && entry & OFLAG_COPIED != 0) {
        ClusterType::Unallocated
    } else {
        ClusterType::Normal
    }
}

/// The state of one check or repair run.
pub(crate) struct Pass<'a, 'b> {
    pub img: &'b mut OpenImage<'a>,
    pub snapshots: &'b SnapshotTable,
    pub fix: Fix,
    pub res: Counts,
    pub findings: Vec<Finding>,
    /// Set once an unaligned refcount block was met (QEMU reports that
    /// corruption once and then suppresses further events).
    signalled: bool,
}

impl<'a, 'b> Pass<'a, 'b> {
    pub fn new(img: &'b mut OpenImage<'a>, snapshots: &'b SnapshotTable, fix: Fix) -> Self {
        Pass {
            img,
            snapshots,
            fix,
            res: Counts::default(),
            findings: Vec::new(),
            signalled: false,
        }
    }

    fn cs(&self) -> u64 {
        self.img.h.cluster_size()
    }

    fn note(&mut self, kind: FindingKind, offset: Option<u64>, message: String) {
        // A garbage table can yield a finding per entry; the counters keep
        // counting, but the list stays bounded.
        if self.findings.len() >= MAX_FINDINGS {
            return;
        }
        self.findings.push(Finding {
            kind,
            offset,
            message,
        });
    }

    fn corruption(&mut self, offset: Option<u64>, message: String) {
        self.res.corruptions += 1;
        self.note(FindingKind::Corruption, offset, message);
    }

    /// Counts one reference to every cluster of `[offset, offset + size)`
    /// (QEMU's `qcow2_inc_refcounts_imrt`).
    pub fn inc(&mut self, imrt: &mut Imrt, offset: u64, size: u64) {
        if size == 0 {
            return;
        }
        let file_len = self.img.io.len();
        // The last cluster may be partly past the end of the file, but a
        // reference a whole cluster or more past it is a corruption.
        if i128::from(offset) + i128::from(size) - i128::from(file_len) >= i128::from(self.cs()) {
            self.corruption(
                Some(offset),
                format!(
                    "ERROR: counting reference for region exceeding the end of the file by one cluster or more: offset {offset:#x} size {size:#x}"
                ),
            );
            return;
        }
        let first = offset >> self.img.h.cluster_bits;
        let last = (offset + size - 1) >> self.img.h.cluster_bits;
        for k in first..=last {
            if k >= MAX_CLUSTERS {
                break;
            }
            if !imrt.inc(k) {
                let at = k << self.img.h.cluster_bits;
                // With qemu-img's advice on its next line, as it prints it.
                self.corruption(
                    Some(at),
                    format!(
                        "ERROR: overflow cluster offset={at:#x}\n\
                         Use qemu-img amend to increase the refcount entry width or \
                         qemu-img convert to create a clean copy if the image cannot be \
                         opened for writing"
                    ),
                );
            }
        }
    }

    /// Counts the references of one L2 table and checks its entries.
    fn check_l2(
        &mut self,
        imrt: &mut Imrt,
        l2_offset: u64,
        frag_info: bool,
        active: bool,
    ) -> Result<(), Abort> {
        let h = self.img.h.clone();
        let ext = h.extended_l2();
        let n = h.l2_entries() as usize;
        let words =
            read_u64s(self.img.io.src(), l2_offset, if ext { 2 * n } else { n }).map_err(|e| {
                self.res.check_errors += 1;
                Abort(format!("ERROR: I/O error in check_refcounts_l2: {e}"))
            })?;
        let mut next_contiguous = 0u64;
        for i in 0..n {
            let (entry, bitmap) = if ext {
                (words[2 * i], words[2 * i + 1])
            } else {
                (words[i], 0)
            };
            let ty = cluster_type(entry, ext, h.has_data_file());
            if ty != ClusterType::Compressed && entry & L2E_STD_RESERVED_MASK != 0 {
                self.corruption(
                    Some(l2_offset),
                    format!("ERROR found l2 entry with reserved bits set: {entry:x}"),
                );
            }
            match ty {
                ClusterType::Compressed => {
                    if entry & OFLAG_COPIED != 0 {
                        self.corruption(
                            Some(l2_offset),
                            "ERROR: copied flag must never be set for compressed clusters".into(),
                        );
                    }
                    if bitmap != 0 {
                        self.corruption(
                            Some(l2_offset),
                            format!("ERROR compressed cluster {i} with non-zero subcluster allocation bitmap, entry={entry:#x}"),
                        );
                        continue;
                    }
                    if h.has_data_file() {
                        self.corruption(
                            Some(l2_offset),
                            format!(
                                "ERROR compressed cluster {i} with data file, entry={entry:#x}"
                            ),
                        );
                        continue;
                    }
                    let csize_shift = 62 - (h.cluster_bits - 8);
                    let csize_mask = (1u64 << (h.cluster_bits - 8)) - 1;
                    let coffset = entry & ((1u64 << csize_shift) - 1);
                    let sectors = ((entry >> csize_shift) & csize_mask) + 1;
                    let csize = sectors * 512 - (coffset & 511);
                    self.inc(imrt, coffset, csize);
                    if frag_info {
                        self.res.allocated += 1;
                        self.res.compressed += 1;
                        // Compressed clusters are fragmented by nature.
                        self.res.fragmented += 1;
                    }
                }
                ClusterType::ZeroAlloc | ClusterType::Normal => {
                    let offset = entry & L2E_OFFSET_MASK;
                    if (bitmap >> 32) & bitmap != 0 {
                        self.corruption(
                            Some(offset),
                            format!("ERROR offset={offset:x}: Allocated cluster has corrupted subcluster allocation bitmap"),
                        );
                    }
                    if h.offset_into_cluster(offset) != 0 {
                        self.res.corruptions += 1;
                        let contains_data = if ext {
                            bitmap & L2_BITMAP_ALL_ALLOC != 0
                        } else {
                            entry & OFLAG_ZERO == 0
                        };
                        if contains_data {
                            self.note(
                                FindingKind::Corruption,
                                Some(offset),
                                format!("ERROR offset={offset:x}: Data cluster is not properly aligned; L2 entry corrupted."),
                            );
                        } else if self.fix.errors {
                            self.fix_entry_by_zero(l2_offset, i, bitmap, ext, active)?;
                            // The entry no longer references the cluster.
                            continue;
                        } else {
                            self.note(
                                FindingKind::Corruption,
                                Some(offset),
                                format!("ERROR offset={offset:x}: Preallocated cluster is not properly aligned; L2 entry corrupted."),
                            );
                        }
                    }
                    if frag_info {
                        self.res.allocated += 1;
                        if next_contiguous != 0 && offset != next_contiguous {
                            self.res.fragmented += 1;
                        }
                        next_contiguous = offset + h.cluster_size();
                    }
                    // Data file clusters are not counted in this file.
                    if !h.has_data_file() {
                        self.inc(imrt, offset, h.cluster_size());
                    }
                }
                ClusterType::ZeroPlain => {}
                ClusterType::Unallocated => {
                    if bitmap & L2_BITMAP_ALL_ALLOC != 0 {
                        self.corruption(
                            Some(l2_offset),
                            "ERROR: Unallocated cluster has non-zero subcluster allocation map"
                                .into(),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Turns a misaligned preallocated entry into a zero entry (repair).
    fn fix_entry_by_zero(
        &mut self,
        l2_offset: u64,
        index: usize,
        bitmap: u64,
        ext: bool,
        active: bool,
    ) -> Result<(), Abort> {
        let mut buf = Vec::with_capacity(16);
        if ext {
            let b = (bitmap | (bitmap << 32)) & L2_BITMAP_ALL_ZEROES;
            buf.extend_from_slice(&0u64.to_be_bytes());
            buf.extend_from_slice(&b.to_be_bytes());
        } else {
            buf.extend_from_slice(&OFLAG_ZERO.to_be_bytes());
        }
        let at = l2_offset + index as u64 * buf.len() as u64;
        // QEMU exempts only the kind of L2 table being fixed; inactive L2
        // tables are not part of its default overlap check anyway.
        let ign = if active { Ol::ActiveL2 } else { Ol::None };
        if let Err(e) = self.guarded_write(ign, at, &buf) {
            self.res.check_errors += 1;
            return Err(e);
        }
        self.res.corruptions -= 1;
        self.res.corruptions_fixed += 1;
        self.note(
            FindingKind::Repaired,
            Some(at),
            format!("Repairing offset: Preallocated cluster is not properly aligned; L2 entry at {at:#x} zeroed."),
        );
        Ok(())
    }

    /// Counts the references of one L1 table, its L2 tables and their
    /// clusters.
    fn check_l1(
        &mut self,
        imrt: &mut Imrt,
        l1_offset: u64,
        l1_size: u32,
        frag_info: bool,
        active: bool,
    ) -> Result<(), Abort> {
        if l1_size == 0 {
            return Ok(());
        }
        self.inc(imrt, l1_offset, u64::from(l1_size) * 8);
        let l1 = read_u64s(self.img.io.src(), l1_offset, l1_size as usize).map_err(|e| {
            self.res.check_errors += 1;
            Abort(format!("ERROR: I/O error in check_refcounts_l1: {e}"))
        })?;
        for (i, &e) in l1.iter().enumerate() {
            if e == 0 {
                continue;
            }
            if e & L1E_RESERVED_MASK != 0 {
                self.corruption(
                    Some(l1_offset + i as u64 * 8),
                    format!("ERROR found L1 entry with reserved bits set: {e:x}"),
                );
            }
            let l2_offset = e & L1E_OFFSET_MASK;
            self.inc(imrt, l2_offset, self.cs());
            if self.img.h.offset_into_cluster(l2_offset) != 0 {
                self.corruption(
                    Some(l2_offset),
                    format!("ERROR l2_offset={l2_offset:x}: Table is not cluster aligned; L1 entry corrupted"),
                );
            }
            self.check_l2(imrt, l2_offset, frag_info, active)?;
        }
        Ok(())
    }

    /// Checks the refcount table's entries and counts the refcount blocks;
    /// sets `rebuild` when the refcount structure itself is broken.
    fn check_refblocks(&mut self, imrt: &mut Imrt, rebuild: &mut bool) -> Result<(), Abort> {
        let table = self.img.disk.table.clone();
        for (i, &raw) in table.iter().enumerate() {
            let offset = raw & REFT_OFFSET_MASK;
            let cluster = offset >> self.img.h.cluster_bits;
            if raw & REFT_RESERVED_MASK != 0 {
                self.corruption(
                    Some(self.img.disk.table_offset + i as u64 * 8),
                    format!("ERROR refcount table entry {i} has reserved bits set"),
                );
                *rebuild = true;
                continue;
            }
            if self.img.h.offset_into_cluster(offset) != 0 {
                self.corruption(
                    Some(offset),
                    format!("ERROR refcount block {i} is not cluster aligned; refcount table entry corrupted"),
                );
                *rebuild = true;
                continue;
            }
            if cluster >= imrt.len() {
                self.res.corruptions += 1;
                if self.fix.errors {
                    let new_len = offset.checked_add(self.cs());
                    let grown = match new_len {
                        Some(len) if len >> self.img.h.cluster_bits <= MAX_CLUSTERS => {
                            self.img.io.sink().and_then(|s| s.set_len(len)).is_ok()
                        }
                        _ => false,
                    };
                    if grown {
                        let len = self.img.io.len();
                        imrt.grow(self.img.h.size_to_clusters(len));
                        self.res.corruptions -= 1;
                        self.res.corruptions_fixed += 1;
                        self.note(
                            FindingKind::Repaired,
                            Some(offset),
                            format!("Repairing refcount block {i} is outside image"),
                        );
                        self.inc(imrt, offset, self.cs());
                        continue;
                    }
                    *rebuild = true;
                    self.note(
                        FindingKind::Corruption,
                        Some(offset),
                        "ERROR could not resize image".into(),
                    );
                } else {
                    self.note(
                        FindingKind::Corruption,
                        Some(offset),
                        format!("ERROR refcount block {i} is outside image"),
                    );
                }
                continue;
            }
            if offset != 0 {
                self.inc(imrt, offset, self.cs());
                let r = imrt.get(cluster);
                if r != 1 {
                    self.corruption(
                        Some(offset),
                        format!("ERROR refcount block {i} refcount={r}"),
                    );
                    *rebuild = true;
                }
            }
        }
        Ok(())
    }

    /// Counts the bitmap directory, bitmap tables and bitmap data clusters.
    fn check_bitmaps(&mut self, imrt: &mut Imrt) -> Result<(), Abort> {
        let Some(ext) = self.img.h.bitmaps else {
            return Ok(());
        };
        self.inc(imrt, ext.directory_offset, ext.directory_size);
        let tables = match bitmap::read_directory(self.img.io.src(), &self.img.h, &ext) {
            Ok(t) => t,
            Err(e) => {
                self.res.corruptions += 1;
                return Err(Abort(e));
            }
        };
        for t in tables {
            self.inc(imrt, t.offset, u64::from(t.entries) * 8);
            let entries = match bitmap::read_table(self.img.io.src(), &t) {
                Ok(e) => e,
                Err(e) => {
                    self.res.corruptions += 1;
                    return Err(Abort(format!("Failed to read bitmap table: {e}")));
                }
            };
            for e in entries {
                if !bitmap::entry_is_valid(e, self.cs()) {
                    self.corruption(
                        Some(t.offset),
                        format!("ERROR invalid bitmap table entry {e:#x}"),
                    );
                    continue;
                }
                let off = e & bitmap::TABLE_OFFSET_MASK;
                if off != 0 {
                    self.inc(imrt, off, self.cs());
                }
            }
        }
        Ok(())
    }

    /// Rebuilds the reference counts from everything that references
    /// clusters (QEMU's `calculate_refcounts`).
    pub fn calculate(&mut self, imrt: &mut Imrt, rebuild: &mut bool) -> Result<(), Abort> {
        let cs = self.cs();
        self.inc(imrt, 0, cs);
        let (l1_off, l1_size) = (self.img.h.l1_table_offset, self.img.h.l1_size);
        self.check_l1(imrt, l1_off, l1_size, true, true)?;
        let snapshots = self.snapshots.snapshots.clone();
        for sn in &snapshots {
            if self.img.h.offset_into_cluster(sn.l1_table_offset) != 0 {
                self.corruption(
                    Some(sn.l1_table_offset),
                    format!(
                        "ERROR snapshot {} ({}) l1_offset={:#x}: L1 table is not cluster aligned; snapshot table entry corrupted",
                        sn.id, sn.name, sn.l1_table_offset
                    ),
                );
                continue;
            }
            if u64::from(sn.l1_size) > super::header::MAX_L1_BYTES / 8 {
                self.corruption(
                    Some(sn.l1_table_offset),
                    format!(
                        "ERROR snapshot {} ({}) l1_size={:#x}: L1 table is too large; snapshot table entry corrupted",
                        sn.id, sn.name, sn.l1_size
                    ),
                );
                continue;
            }
            self.check_l1(imrt, sn.l1_table_offset, sn.l1_size, false, false)?;
        }
        let (so, ss) = (self.img.h.snapshots_offset, self.snapshots.size);
        self.inc(imrt, so, ss);
        let rt_off = self.img.disk.table_offset;
        let rt_len = self.img.disk.table.len() as u64 * 8;
        self.inc(imrt, rt_off, rt_len);
        if let Some((off, len)) = self.img.h.crypto {
            self.inc(imrt, off, len);
        }
        self.check_bitmaps(imrt)?;
        self.check_refblocks(imrt, rebuild)
    }

    /// Reads a stored refcount, counting an unreadable one as a check
    /// error; `None` when it could not be read.
    fn stored_refcount(&mut self, cluster: u64) -> Option<u64> {
        match self.img.disk.get(self.img.io.src(), cluster) {
            Ok(r) => Some(r),
            Err(RefcountReadError::UnalignedBlock { block, index }) => {
                if !self.signalled {
                    self.signalled = true;
                    self.note(
                        FindingKind::CheckError,
                        Some(block),
                        format!(
                            "Refblock offset {block:#x} unaligned (reftable index: {index:#x})"
                        ),
                    );
                }
                None
            }
            Err(RefcountReadError::Io(e)) => {
                self.note(
                    FindingKind::CheckError,
                    None,
                    format!("Can't get refcount for cluster {cluster}: {e}"),
                );
                None
            }
        }
    }

    /// Compares stored and computed refcounts (QEMU's `compare_refcounts`),
    /// fixing what `fix` allows; returns the highest cluster in use.
    pub fn compare(&mut self, imrt: &Imrt, fix: Fix, rebuild: &mut bool) -> u64 {
        let mut highest = 0;
        for i in 0..imrt.len() {
            let Some(stored) = self.stored_refcount(i) else {
                self.res.check_errors += 1;
                continue;
            };
            let computed = imrt.get(i);
            if stored > 0 || computed > 0 {
                highest = i;
            }
            if stored == computed {
                continue;
            }
            let mut fixing = None;
            if stored == 0 {
                *rebuild = true;
            } else if stored > computed && fix.leaks {
                fixing = Some(false);
            } else if stored < computed && fix.errors {
                fixing = Some(true);
            }
            if let Some(is_corruption) = fixing {
                let ok = match self.img.io.sink() {
                    Ok(sink) => self.img.disk.set(sink, i, computed).is_ok(),
                    Err(_) => false,
                };
                if ok {
                    if is_corruption {
                        self.res.corruptions_fixed += 1;
                    } else {
                        self.res.leaks_fixed += 1;
                    }
                    self.note(
                        FindingKind::Repaired,
                        Some(i << self.img.h.cluster_bits),
                        format!("Repairing cluster {i} refcount={stored} reference={computed}"),
                    );
                    continue;
                }
            }
            let at = Some(i << self.img.h.cluster_bits);
            if stored < computed {
                self.res.corruptions += 1;
                self.note(
                    FindingKind::Corruption,
                    at,
                    format!("ERROR cluster {i} refcount={stored} reference={computed}"),
                );
            } else {
                self.res.leaks += 1;
                self.note(
                    FindingKind::Leak,
                    at,
                    format!("Leaked cluster {i} refcount={stored} reference={computed}"),
                );
            }
        }
        highest
    }

    /// Checks the COPIED flag of every active L1 and L2 entry against the
    /// stored refcounts (QEMU's `check_oflag_copied`).
    pub fn check_copied(&mut self) -> Result<(), Abort> {
        let repair = if self.fix.errors {
            true
        } else if self.fix.leaks {
            self.res.check_errors == 0 && self.res.corruptions == 0 && self.res.leaks == 0
        } else {
            false
        };
        let h = self.img.h.clone();
        let ext = h.extended_l2();
        let n = h.l2_entries() as usize;
        for i in 0..self.img.l1.len() {
            let l1e = self.img.l1[i];
            let l2_offset = l1e & L1E_OFFSET_MASK;
            if l2_offset == 0 {
                continue;
            }
            let Ok(refcount) = self
                .img
                .disk
                .get(self.img.io.src(), l2_offset >> h.cluster_bits)
            else {
                continue;
            };
            if (refcount == 1) != (l1e & OFLAG_COPIED != 0) {
                self.res.copied_missing += u64::from(refcount == 1 && !repair);
                self.corruption(
                    Some(h.l1_table_offset + i as u64 * 8),
                    format!(
                        "{} OFLAG_COPIED L2 cluster: l1_index={i} l1_entry={l1e:x} refcount={refcount}",
                        if repair { "Repairing" } else { "ERROR" }
                    ),
                );
                if repair {
                    let fixed = if refcount == 1 {
                        l1e | OFLAG_COPIED
                    } else {
                        l1e & !OFLAG_COPIED
                    };
                    self.img.l1[i] = fixed;
                    let at = h.l1_table_offset + i as u64 * 8;
                    if let Err(e) = self.guarded_write(Ol::ActiveL1, at, &fixed.to_be_bytes()) {
                        self.res.check_errors += 1;
                        return Err(e);
                    }
                    self.res.corruptions -= 1;
                    self.res.corruptions_fixed += 1;
                }
            }
            let mut words = read_u64s(self.img.io.src(), l2_offset, if ext { 2 * n } else { n })
                .map_err(|e| {
                    self.res.check_errors += 1;
                    Abort(format!("ERROR: Could not read L2 table: {e}"))
                })?;
            let stride = if ext { 2 } else { 1 };
            let mut dirty = 0;
            for j in 0..n {
                let e = words[j * stride];
                let ty = cluster_type(e, ext, h.has_data_file());
                if ty != ClusterType::Normal && ty != ClusterType::ZeroAlloc {
                    continue;
                }
                let data = e & L2E_OFFSET_MASK;
                // A data file cluster has exactly one reference, its entry.
                let refcount = if h.has_data_file() {
                    1
                } else {
                    let Ok(r) = self.img.disk.get(self.img.io.src(), data >> h.cluster_bits) else {
                        continue;
                    };
                    r
                };
                if (refcount == 1) != (e & OFLAG_COPIED != 0) {
                    self.res.copied_missing += u64::from(refcount == 1 && !repair);
                    self.corruption(
                        Some(l2_offset + (j * stride * 8) as u64),
                        format!(
                            "{} OFLAG_COPIED data cluster: l2_entry={e:x} refcount={refcount}",
                            if repair { "Repairing" } else { "ERROR" }
                        ),
                    );
                    if repair {
                        words[j * stride] = if refcount == 1 {
                            e | OFLAG_COPIED
                        } else {
                            e & !OFLAG_COPIED
                        };
                        dirty += 1;
                    }
                }
            }
            if dirty > 0 {
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
                if let Err(e) = self.guarded_write(Ol::ActiveL2, l2_offset, &bytes) {
                    self.res.check_errors += 1;
                    return Err(e);
                }
                self.res.corruptions -= dirty;
                self.res.corruptions_fixed += dirty;
            }
        }
        Ok(())
    }
}
