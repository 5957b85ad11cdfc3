//! The VM state area: where QEMU's `savevm` keeps a virtual machine's RAM
//! and device state, and what `qemu-io read -b`/`write -b` address. It is
//! guest address space past the disk, from the first L1 entry the disk
//! does not use (`Image::vm_state_offset`), mapped by the same L1 and L2
//! tables as the disk and written by the same write path, with its COW,
//! ordering and crash rules. A write first grows the L1 table to cover it
//! if it is too short, by half again at a time as QEMU's driver grows it
//! (a new table, durable with its refcounts before one header write names
//! it, as a resize grows it); a read past the table's
//! end reads zeroes. Internal snapshots copy the whole L1 table, so one
//! taken after a VM state write keeps that state, and applying it brings
//! it back (snapshot entries record a VM state size of 0: qemu-img's
//! snapshots, like the engine's, save no VM state of their own).

use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::image::{Image, MAX_L1_BYTES};

impl<D: BlockDev> Image<D> {
    /// [`Image::vm_state_offset`]: the implementation.
    pub(crate) fn vm_state_offset_impl(&self) -> u64 {
        self.geo.l1_entries_for(self.geo.virtual_size) * self.geo.l2_span()
    }

    /// The guest range of `len` bytes at `pos` in the VM state area, if
    /// an L1 table within the metadata limit can map it.
    fn vm_state_range(&self, pos: u64, len: u64) -> Result<(u64, u64)> {
        let start = self.vm_state_offset().checked_add(pos);
        let end = start.and_then(|s| s.checked_add(len));
        let most = (MAX_L1_BYTES / 8) * self.geo.l2_span();
        match (start, end) {
            (Some(s), Some(e)) if e <= most => Ok((s, e)),
            _ => Err(Error::MetadataLimit {
                what: format!("an L1 table for VM state up to byte {pos} + {len}"),
                needed: end.map_or(u64::MAX, |e| e.div_ceil(self.geo.l2_span()) * 8),
                limit: MAX_L1_BYTES,
            }),
        }
    }

    /// Refused for an image with an external data file, whose guest
    /// offsets are the data file's: QEMU keeps no VM state there either.
    fn check_vm_state_supported(&self) -> Result<()> {
        if self.has_data_file() {
            return Err(Error::Unsupported(
                "VM state in an image with an external data file".into(),
            ));
        }
        Ok(())
    }

    /// [`Image::write_vmstate`]: the implementation.
    pub(crate) async fn write_vmstate_impl(&self, pos: u64, buf: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.check_vm_state_supported()?;
        let (start, end) = self.vm_state_range(pos, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let needed = end.div_ceil(self.geo.l2_span());
        let have = self.meta.read_unlocked().tables.l1().len() as u64;
        if needed > have {
            // Grown by half again until it covers the write, as QEMU's
            // driver grows a table a write outruns (a resize grows it to
            // the entry), within the metadata limit.
            let mut len = have.max(1);
            while len < needed {
                len = (len * 3).div_ceil(2);
            }
            let len = len.min(MAX_L1_BYTES / 8);
            self.switch_l1(len, self.geo.virtual_size).await?;
        }
        let id = self.begin_write(start, end).await;
        let r = self.write_locked_range(start, buf).await;
        self.end_write(id);
        r
    }

    /// [`Image::read_vmstate`]: the implementation.
    pub(crate) async fn read_vmstate_impl(&self, pos: u64, buf: &mut [u8]) -> Result<()> {
        self.check_vm_state_supported()?;
        let (start, end) = self.vm_state_range(pos, buf.len() as u64)?;
        // What the L1 table maps is read; past its end, zeroes.
        let mapped = self.meta.read_unlocked().tables.l1().len() as u64 * self.geo.l2_span();
        let split = end.min(mapped).max(start);
        let (head, tail) = buf.split_at_mut((split - start) as usize);
        tail.fill(0);
        self.read_steps(start, head).await
    }
}
