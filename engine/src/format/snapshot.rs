//! The internal snapshot table (docs/interop/qcow2.txt, "Snapshots"):
//! decoding one entry at a time from bytes read off the image, and
//! encoding a whole table. Pure; no I/O.
//!
//! An entry, 8-byte aligned: l1_table_offset u64, l1_size u32,
//! id_str_size u16, name_size u16, date_sec u32, date_nsec u32,
//! vm_clock_nsec u64, vm_state_size u32, extra_data_size u32 (40 bytes),
//! then the extra data (vm_state_size_large u64, disk_size u64, icount
//! u64, each present only if the extra data is that long), the id and the
//! name, neither NUL-terminated.
//!
//! Everything read comes from a file that may be hostile: sizes are
//! bounded by QEMU's limits before anything is allocated for them, and a
//! malformed entry is an [`Error::Format`] naming it.

use crate::error::{Error, Result};

/// Most snapshots an image may have (QEMU's limit).
pub const MAX_SNAPSHOTS: u32 = 65536;
/// Most extra data one entry may carry (QEMU's limit).
pub const MAX_EXTRA_DATA: u32 = 1024;
/// Largest snapshot table QEMU reads: 1 KiB per snapshot.
pub const MAX_TABLE_BYTES: u64 = 1024 * MAX_SNAPSHOTS as u64;
/// The fixed part of an entry.
pub const ENTRY_HEADER_LEN: usize = 40;
/// The extra data this engine writes: vm_state_size_large, disk_size and
/// icount.
pub const EXTRA_DATA_LEN: usize = 24;
/// Longest id or name the table's 16-bit length fields can hold.
pub const MAX_STRING_LEN: usize = u16::MAX as usize;

/// One internal snapshot, as the table describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Unique id ("1", "2", ...).
    pub id: String,
    /// Name given by the user; not necessarily unique.
    pub name: String,
    pub l1_table_offset: u64,
    pub l1_size: u32,
    pub date_sec: u32,
    pub date_nsec: u32,
    pub vm_clock_nsec: u64,
    /// VM state size (the large field when the extra data has it).
    pub vm_state_size: u64,
    /// Virtual disk size when the snapshot was taken; `None` when the
    /// entry predates the field (the image's current size applies).
    pub disk_size: Option<u64>,
    /// Instruction count; `None` when absent (QEMU reads that as -1).
    pub icount: Option<u64>,
    /// Extra data past the fields this engine knows, kept on rewrite.
    pub unknown_extra: Vec<u8>,
}

/// What [`decode_entry`] made of the bytes it was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// An entry and how many bytes it took (before alignment).
    Entry(Snapshot, usize),
    /// The entry is longer than the bytes given: at least this many are
    /// needed.
    NeedMore(usize),
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A string of the table: QEMU reads it as a C string, so it ends at the
/// first NUL; bytes that are not UTF-8 are replaced.
fn table_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The length of entry `index` (before alignment) from its fixed part,
/// `fixed` (at least [`ENTRY_HEADER_LEN`] bytes), its extra data bounded
/// by QEMU's limit before anything relies on it.
fn entry_len(fixed: &[u8], index: u32) -> Result<usize> {
    let extra_len = be32(fixed, 36);
    if extra_len > MAX_EXTRA_DATA {
        return Err(Error::format(
            format!("snapshot table entry {index}"),
            format!("{extra_len} bytes of extra data exceed the {MAX_EXTRA_DATA}-byte limit"),
        ));
    }
    Ok(ENTRY_HEADER_LEN + extra_len as usize + be16(fixed, 12) as usize + be16(fixed, 14) as usize)
}

/// Decode entry `index` from `bytes`, which start at the entry (8-byte
/// aligned in the table).
pub fn decode_entry(bytes: &[u8], index: u32) -> Result<Decoded> {
    if bytes.len() < ENTRY_HEADER_LEN {
        return Ok(Decoded::NeedMore(ENTRY_HEADER_LEN));
    }
    let total = entry_len(bytes, index)?;
    let id_len = be16(bytes, 12) as usize;
    let extra_len = be32(bytes, 36) as usize;
    if bytes.len() < total {
        return Ok(Decoded::NeedMore(total));
    }
    let extra = &bytes[ENTRY_HEADER_LEN..ENTRY_HEADER_LEN + extra_len];
    let id_at = ENTRY_HEADER_LEN + extra_len;
    let name_at = id_at + id_len;
    let opt64 = |at: usize| (extra.len() >= at + 8).then(|| be64(extra, at));
    let sn = Snapshot {
        id: table_string(&bytes[id_at..name_at]),
        name: table_string(&bytes[name_at..total]),
        l1_table_offset: be64(bytes, 0),
        l1_size: be32(bytes, 8),
        date_sec: be32(bytes, 16),
        date_nsec: be32(bytes, 20),
        vm_clock_nsec: be64(bytes, 24),
        vm_state_size: opt64(0).unwrap_or(u64::from(be32(bytes, 32))),
        disk_size: opt64(8),
        icount: opt64(16),
        unknown_extra: extra.get(EXTRA_DATA_LEN..).unwrap_or_default().to_vec(),
    };
    Ok(Decoded::Entry(sn, total))
}

/// Where an entry's L1 table is and how far the next entry is, from the
/// entry's fixed part alone: what a reader that wants only the L1 tables
/// (the dirty-bit rebuild) needs, without reading ids, names and extra
/// data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHead {
    pub l1_table_offset: u64,
    pub l1_size: u32,
    /// The whole entry's length, 8-byte aligned: the next entry starts
    /// this far on.
    pub stride: u64,
}

/// Decode the fixed part of entry `index` (see [`EntryHead`]), with the
/// same bound on its extra data as [`decode_entry`].
pub fn decode_entry_head(fixed: &[u8; ENTRY_HEADER_LEN], index: u32) -> Result<EntryHead> {
    Ok(EntryHead {
        l1_table_offset: be64(fixed, 0),
        l1_size: be32(fixed, 8),
        stride: entry_len(fixed, index)?.next_multiple_of(8) as u64,
    })
}

/// The table's bytes: every entry 8-byte aligned, with the extra data
/// this engine knows (an absent disk size written as `default_disk_size`,
/// an absent icount as -1) and any unknown extra data kept after it.
pub fn encode_table(snapshots: &[Snapshot], default_disk_size: u64) -> Result<Vec<u8>> {
    encode(snapshots, Some(default_disk_size))
}

/// The table's bytes as writers older than the extra data fields wrote
/// them, which version 2 allows: no extra data at all (no snapshot disk
/// size, no icount, no unknown extra data kept), the VM state size in the
/// 32-bit field alone. A VM state too large for it is refused.
pub fn encode_table_without_extra(snapshots: &[Snapshot]) -> Result<Vec<u8>> {
    encode(snapshots, None)
}

/// [`encode_table`] with the extra data (`Some(default_disk_size)`), or
/// [`encode_table_without_extra`].
fn encode(snapshots: &[Snapshot], extra: Option<u64>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (i, sn) in snapshots.iter().enumerate() {
        out.resize(out.len().next_multiple_of(8), 0);
        let field = || format!("snapshot {}", sn.id);
        if sn.id.len() > MAX_STRING_LEN || sn.name.len() > MAX_STRING_LEN {
            return Err(Error::InvalidOption {
                name: field(),
                reason: format!("id and name are limited to {MAX_STRING_LEN} bytes"),
            });
        }
        let extra_len = match extra {
            Some(_) => EXTRA_DATA_LEN + sn.unknown_extra.len(),
            None => 0,
        };
        if extra_len > MAX_EXTRA_DATA as usize {
            return Err(Error::format(field(), "too much extra data"));
        }
        let mut h = [0u8; ENTRY_HEADER_LEN];
        h[0..8].copy_from_slice(&sn.l1_table_offset.to_be_bytes());
        h[8..12].copy_from_slice(&sn.l1_size.to_be_bytes());
        h[12..14].copy_from_slice(&(sn.id.len() as u16).to_be_bytes());
        h[14..16].copy_from_slice(&(sn.name.len() as u16).to_be_bytes());
        h[16..20].copy_from_slice(&sn.date_sec.to_be_bytes());
        h[20..24].copy_from_slice(&sn.date_nsec.to_be_bytes());
        h[24..32].copy_from_slice(&sn.vm_clock_nsec.to_be_bytes());
        // A VM state too large for the 32-bit field is left 0 there, so
        // that an older reader sees a disk-only snapshot, not a cut one.
        let small = match (u32::try_from(sn.vm_state_size), extra) {
            (Ok(n), _) => n,
            (Err(_), Some(_)) => 0,
            (Err(_), None) => {
                return Err(Error::InvalidOption {
                    name: field(),
                    reason: "a VM state over 4 GiB needs the extra data".into(),
                })
            }
        };
        h[32..36].copy_from_slice(&small.to_be_bytes());
        h[36..40].copy_from_slice(&(extra_len as u32).to_be_bytes());
        out.extend_from_slice(&h);
        if let Some(default_disk_size) = extra {
            out.extend_from_slice(&sn.vm_state_size.to_be_bytes());
            out.extend_from_slice(&sn.disk_size.unwrap_or(default_disk_size).to_be_bytes());
            out.extend_from_slice(&sn.icount.unwrap_or(u64::MAX).to_be_bytes());
            out.extend_from_slice(&sn.unknown_extra);
        }
        out.extend_from_slice(sn.id.as_bytes());
        out.extend_from_slice(sn.name.as_bytes());
        if out.len() as u64 > MAX_TABLE_BYTES {
            return Err(Error::InvalidOption {
                name: format!("snapshot {i}"),
                reason: "the snapshot table would exceed QEMU's 64 MiB limit".into(),
            });
        }
    }
    Ok(out)
}

/// Decode a whole table of `count` entries from `bytes` (tests and tools
/// that have the table in memory already).
pub fn decode_table(bytes: &[u8], count: u32) -> Result<Vec<Snapshot>> {
    let mut pos = 0usize;
    let mut out = Vec::new();
    for i in 0..count {
        pos = pos.next_multiple_of(8);
        match decode_entry(bytes.get(pos..).unwrap_or_default(), i)? {
            Decoded::Entry(sn, len) => {
                out.push(sn);
                pos += len;
            }
            Decoded::NeedMore(_) => {
                return Err(Error::format(
                    format!("snapshot table entry {i}"),
                    "the table ends inside the entry",
                ))
            }
        }
    }
    Ok(out)
}
