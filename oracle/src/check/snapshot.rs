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
    /// The entry's header bytes (kept so a repair can rewrite the entry).
    pub header: [u8; SNAPSHOT_HEADER_SIZE as usize],
    pub extra: Vec<u8>,
    pub id_bytes: Vec<u8>,
    pub name_bytes: Vec<u8>,
}

impl Snapshot {
    /// The entry as QEMU rewrites it: at least the 16 bytes of extra data
    /// version 3 requires (large VM state size and disk size, taken from
    /// the entry or filled in), unknown extra data kept, id and name cut at
    /// their first NUL as QEMU's C strings are.
    pub fn encode(&self, virtual_size: u64) -> Vec<u8> {
        let cut = |b: &[u8]| b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())].to_vec();
        let (id, name) = (cut(&self.id_bytes), cut(&self.name_bytes));
        let mut extra = self.extra.clone();
        let vm_state = u64::from(u32::from_be_bytes(
            self.header[32..36].try_into().expect("4"),
        ));
        if extra.len() < 8 {
            extra = vm_state.to_be_bytes().to_vec();
        }
        if extra.len() < 16 {
            extra.truncate(8);
            extra.extend_from_slice(&virtual_size.to_be_bytes());
        }
        let mut out = self.header.to_vec();
        out[12..14].copy_from_slice(&(id.len() as u16).to_be_bytes());
        out[14..16].copy_from_slice(&(name.len() as u16).to_be_bytes());
        out[36..40].copy_from_slice(&(extra.len() as u32).to_be_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(&id);
        out.extend_from_slice(&name);
        out
    }
}

/// Encodes a whole table, each entry 8-byte aligned.
pub(crate) fn encode_table(snapshots: &[Snapshot], virtual_size: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for sn in snapshots {
        out.resize(out.len().div_ceil(8) * 8, 0);
        out.extend_from_slice(&sn.encode(virtual_size));
    }
    out
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
        let mut extra = vec![0u8; extra_data_size as usize];
        super::source::read_checked(src, offset, &mut extra).map_err(io)?;
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
            header: b,
            extra,
            id_bytes: id,
            name_bytes: name,
        });
    }
    t.size = offset - start;
    Ok(t)
}
