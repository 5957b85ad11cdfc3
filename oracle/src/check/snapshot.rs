//! The internal snapshot table: each snapshot's L1 table position and the
//! table's own extent, read as QEMU's check reads them.
//!
//! Entry layout: l1_table_offset u64 @0, l1_size u32 @8, id_str_size u16
//! @12, name_size u16 @14, date and clock fields @16..32, vm_state_size
//! u32 @32, extra_data_size u32 @36, then extra data, id and name; each
//! entry starts 8-byte aligned.

use super::header::{Header, SNAPSHOT_HEADER_SIZE};
use super::source::ImageSource;

const MAX_EXTRA_DATA: u64 = 1024;
const MAX_TABLE_SIZE: u64 = 1024 * 65536;
/// Extra data every version 3 snapshot must carry (vm_state_size_large and
/// disk_size).
const V3_EXTRA_DATA_MIN: u32 = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub id: String,
    pub name: String,
    pub l1_table_offset: u64,
    pub l1_size: u32,
    pub extra_data_size: u32,
}

/// The snapshot table as read, with the corruptions QEMU counts while
/// reading it (incomplete v3 entries).
#[derive(Debug, Clone, Default)]
pub(crate) struct SnapshotTable {
    pub snapshots: Vec<Snapshot>,
    pub size: u64,
    pub incomplete: Vec<usize>,
}

/// Reads the table; `Err` is a failed read that makes the whole check fail.
pub(crate) fn read(src: &dyn ImageSource, h: &Header) -> Result<SnapshotTable, String> {
    let mut t = SnapshotTable::default();
    let start = h.snapshots_offset;
    let mut offset = start;
    let io = |e: std::io::Error| format!("Failed to read snapshot table: {e}");
    for i in 0..h.nb_snapshots {
        offset = offset.div_ceil(8) * 8;
        let mut b = [0u8; SNAPSHOT_HEADER_SIZE as usize];
        super::source::read_checked(src, offset, &mut b).map_err(io)?;
        offset += SNAPSHOT_HEADER_SIZE;
        let l1_table_offset = u64::from_be_bytes(b[0..8].try_into().expect("8"));
        let l1_size = u32::from_be_bytes(b[8..12].try_into().expect("4"));
        let id_size = u64::from(u16::from_be_bytes(b[12..14].try_into().expect("2")));
        let name_size = u64::from(u16::from_be_bytes(b[14..16].try_into().expect("2")));
        let extra_data_size = u32::from_be_bytes(b[36..40].try_into().expect("4"));
        if u64::from(extra_data_size) > MAX_EXTRA_DATA {
            return Err(format!(
                "Too much extra metadata in snapshot table entry {i}"
            ));
        }
        offset += u64::from(extra_data_size);
        let mut id = vec![0u8; id_size as usize];
        super::source::read_checked(src, offset, &mut id).map_err(io)?;
        offset += id_size;
        let mut name = vec![0u8; name_size as usize];
        super::source::read_checked(src, offset, &mut name).map_err(io)?;
        offset += name_size;
        if offset - start > MAX_TABLE_SIZE {
            return Err("Snapshot table is too big".into());
        }
        if h.version >= 3 && extra_data_size < V3_EXTRA_DATA_MIN {
            t.incomplete.push(i as usize);
        }
        t.snapshots.push(Snapshot {
            id: String::from_utf8_lossy(&id).into_owned(),
            name: String::from_utf8_lossy(&name).into_owned(),
            l1_table_offset,
            l1_size,
            extra_data_size,
        });
    }
    t.size = offset - start;
    Ok(t)
}
