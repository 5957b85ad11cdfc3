//! An in-memory device: a growable byte vector that is always durable.
//! Used by unit tests and as the backing store of read-only backing images.

use std::cell::RefCell;

use crate::{BlockDev, DevError, WriteFlags, ZeroFlags};

/// A device whose content lives in memory. Every completed write is durable;
/// `write_zeroes` is always efficient.
#[derive(Debug, Default)]
pub struct MemDev {
    data: RefCell<Vec<u8>>,
}

impl MemDev {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Self {
            data: RefCell::new(bytes),
        }
    }

    /// A copy of the whole content.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.data.borrow().clone()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.data.into_inner()
    }

    fn ensure_len(data: &mut Vec<u8>, end: u64) {
        let end = usize::try_from(end).expect("in-memory device larger than the address space");
        if data.len() < end {
            data.resize(end, 0);
        }
    }
}

impl BlockDev for MemDev {
    async fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DevError> {
        let data = self.data.borrow();
        buf.fill(0);
        let len = data.len() as u64;
        if offset < len {
            let start = offset as usize;
            let n = buf.len().min(data.len() - start);
            buf[..n].copy_from_slice(&data[start..start + n]);
        }
        Ok(())
    }

    async fn write(&self, offset: u64, buf: &[u8], _flags: WriteFlags) -> Result<(), DevError> {
        let mut data = self.data.borrow_mut();
        Self::ensure_len(&mut data, offset + buf.len() as u64);
        data[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    async fn write_zeroes(&self, offset: u64, len: u64, _flags: ZeroFlags) -> Result<(), DevError> {
        let mut data = self.data.borrow_mut();
        Self::ensure_len(&mut data, offset + len);
        data[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }

    async fn discard(&self, _offset: u64, _len: u64) -> Result<(), DevError> {
        Ok(())
    }

    async fn flush(&self) -> Result<(), DevError> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.data.borrow().len() as u64
    }

    async fn truncate(&self, len: u64) -> Result<(), DevError> {
        let len = usize::try_from(len).expect("in-memory device larger than the address space");
        self.data.borrow_mut().resize(len, 0);
        Ok(())
    }
}
