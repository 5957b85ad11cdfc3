//! Tables of big-endian 64-bit entries (the L1 table, L2 tables, the
//! refcount table) to and from their bytes.

/// Decode a table; a trailing partial entry is ignored.
pub(crate) fn read_be64_table(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// Encode a table.
pub(crate) fn be64_bytes(table: &[u64]) -> Vec<u8> {
    table.iter().flat_map(|v| v.to_be_bytes()).collect()
}
