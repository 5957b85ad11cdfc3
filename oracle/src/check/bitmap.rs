//! The persistent dirty bitmaps: the bitmap directory and each bitmap's
//! table, whose clusters the refcounts must cover.
//!
//! Directory entry layout: bitmap_table_offset u64 @0, bitmap_table_size
//! u32 @8, flags u32 @12, type u8 @16, granularity_bits u8 @17, name_size
//! u16 @18, extra_data_size u32 @20, then extra data and name, padded to 8.

use super::header::{BitmapsExt, Header};
use super::source::{read_u64s, ImageSource};

const ENTRY_FIXED: u64 = 24;
const TABLE_RESERVED_MASK: u64 = 0xff00_0000_0000_01fe;
pub(crate) const TABLE_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const TABLE_ALL_ONES: u64 = 1;
const MAX_TABLE_ENTRIES: u64 = 0x0800_0000;
const MAX_NAME: u64 = 1023;
/// The most bitmap data one bitmap may hold; bounds its table too.
const MAX_PHYS_SIZE: u64 = 0x2000_0000;
const FLAGS_KNOWN: u32 = 0x3;
const FLAG_IN_USE: u32 = 0x1;

/// One bitmap's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BitmapTable {
    pub offset: u64,
    pub entries: u32,
    /// Marked in use: left inconsistent by a crash, so QEMU does not load it.
    pub in_use: bool,
}

/// Parses the directory; `Err` is what makes QEMU refuse the image.
pub(crate) fn read_directory(
    src: &dyn ImageSource,
    h: &Header,
    ext: &BitmapsExt,
) -> Result<Vec<BitmapTable>, String> {
    let size = ext.directory_size;
    let mut dir = vec![0u8; size as usize];
    super::source::read_checked(src, ext.directory_offset, &mut dir)
        .map_err(|e| format!("Failed to read bitmap directory: {e}"))?;
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        if size - pos < ENTRY_FIXED {
            return Err("Broken bitmap directory".into());
        }
        let e = &dir[pos as usize..];
        let offset = u64::from_be_bytes(e[0..8].try_into().expect("8"));
        let entries = u32::from_be_bytes(e[8..12].try_into().expect("4"));
        let flags = u32::from_be_bytes(e[12..16].try_into().expect("4"));
        let ty = e[16];
        let granularity_bits = e[17];
        let name_size = u64::from(u16::from_be_bytes(e[18..20].try_into().expect("2")));
        let extra = u64::from(u32::from_be_bytes(e[20..24].try_into().expect("4")));
        let len = (ENTRY_FIXED + extra + name_size).div_ceil(8) * 8;
        if len > size - pos {
            return Err("Broken bitmap directory".into());
        }
        if extra != 0 {
            return Err("Bitmap extra data is not supported".into());
        }
        if ty != 1
            || !(9..=31).contains(&granularity_bits)
            || name_size == 0
            || name_size > MAX_NAME
            || flags & !FLAGS_KNOWN != 0
            || u64::from(entries) > MAX_TABLE_ENTRIES
            || u64::from(entries) * h.cluster_size() > MAX_PHYS_SIZE
            || h.offset_into_cluster(offset) != 0
            || offset == 0
        {
            return Err("Bitmap directory entry is invalid".into());
        }
        out.push(BitmapTable {
            offset,
            entries,
            in_use: flags & FLAG_IN_USE != 0,
        });
        pos += len;
    }
    if out.len() as u64 != u64::from(ext.nb_bitmaps) {
        return Err("Less bitmaps than specified in the header extension".into());
    }
    Ok(out)
}

/// Reads one bitmap table.
pub(crate) fn read_table(src: &dyn ImageSource, t: &BitmapTable) -> std::io::Result<Vec<u64>> {
    read_u64s(src, t.offset, t.entries as usize)
}

/// Whether a bitmap table entry is well formed.
pub(crate) fn entry_is_valid(entry: u64, cluster_size: u64) -> bool {
    if entry & TABLE_RESERVED_MASK != 0 {
        return false;
    }
    let offset = entry & TABLE_OFFSET_MASK;
    if offset != 0 && (entry & TABLE_ALL_ONES != 0 || !offset.is_multiple_of(cluster_size)) {
        return false;
    }
    true
}

/// What QEMU's open does with the bitmaps: it loads every bitmap not in
/// use, and refuses the image when a loaded bitmap's table is malformed.
pub(crate) fn validate_for_open(src: &dyn ImageSource, h: &Header) -> Result<(), String> {
    let Some(ext) = h.bitmaps else {
        return Ok(());
    };
    for t in read_directory(src, h, &ext)? {
        if t.in_use {
            continue;
        }
        let entries =
            read_table(src, &t).map_err(|e| format!("Could not read bitmap table: {e}"))?;
        if entries
            .iter()
            .any(|&e| !entry_is_valid(e, h.cluster_size()))
        {
            return Err("Could not read bitmap_table table from image: Invalid argument".into());
        }
    }
    Ok(())
}
