//! Refcount block entries: `refcount_bits` (1 to 64, a power of two) wide.
//! Entries narrower than a byte are packed from the least significant bit
//! of each byte; entries of 8 bits and more are big-endian.

/// Read entry `index` of a refcount block of width `bits`.
pub fn get(block: &[u8], bits: u32, index: usize) -> u64 {
    match bits {
        1 | 2 | 4 => {
            let per_byte = 8 / bits as usize;
            let byte = block[index / per_byte];
            let shift = (index % per_byte) * bits as usize;
            ((byte >> shift) as u64) & ((1u64 << bits) - 1)
        }
        8 => block[index] as u64,
        16 => u16::from_be_bytes([block[2 * index], block[2 * index + 1]]) as u64,
        32 => u32::from_be_bytes(block[4 * index..4 * index + 4].try_into().expect("4")) as u64,
        64 => u64::from_be_bytes(block[8 * index..8 * index + 8].try_into().expect("8")),
        _ => unreachable!("refcount width {bits} was validated at open"),
    }
}

/// Set entry `index` of a refcount block of width `bits`. `value` must fit.
pub fn set(block: &mut [u8], bits: u32, index: usize, value: u64) {
    debug_assert!(value <= max(bits));
    match bits {
        1 | 2 | 4 => {
            let per_byte = 8 / bits as usize;
            let shift = (index % per_byte) * bits as usize;
            let mask = (((1u16 << bits) - 1) as u8) << shift;
            let b = &mut block[index / per_byte];
            *b = (*b & !mask) | ((value as u8) << shift);
        }
        8 => block[index] = value as u8,
        16 => block[2 * index..2 * index + 2].copy_from_slice(&(value as u16).to_be_bytes()),
        32 => block[4 * index..4 * index + 4].copy_from_slice(&(value as u32).to_be_bytes()),
        64 => block[8 * index..8 * index + 8].copy_from_slice(&value.to_be_bytes()),
        _ => unreachable!("refcount width {bits} was validated at open"),
    }
}

/// The largest refcount a width can hold.
pub fn max(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}
