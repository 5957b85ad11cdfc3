//! QEMU's pre-write metadata overlap check, in its default ("cached")
//! mode: before a repair writes metadata it makes sure the write does not
//! land on other metadata, judged from the structures as currently loaded.
//! A write that would is refused and the image is marked corrupt, exactly
//! as QEMU does, so that a repair fails where QEMU's fails.

use super::header::{INCOMPAT_CORRUPT, OFF_INCOMPATIBLE};
use super::pass::{Abort, Ol, Pass, L1E_OFFSET_MASK};
use super::refcounts::REFT_OFFSET_MASK;
use super::report::FindingKind;

fn ranges_overlap(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    a < b.saturating_add(blen) && b < a.saturating_add(alen)
}

impl Pass<'_, '_> {
    /// The metadata a write of `size` bytes at `offset` would overwrite,
    /// ignoring the kind `ign`.
    pub(crate) fn overlap(&self, ign: Ol, offset: u64, size: u64) -> Option<&'static str> {
        if size == 0 {
            return None;
        }
        let h = &self.img.h;
        let cs = h.cluster_size();
        if offset < cs {
            return Some("qcow2_header");
        }
        let start = offset & !(cs - 1);
        let len = ((offset - start) + size).div_ceil(cs) * cs;
        let hit = |o: u64, l: u64| ranges_overlap(start, len, o, l);
        if ign != Ol::ActiveL1 && h.l1_size != 0 && hit(h.l1_table_offset, u64::from(h.l1_size) * 8)
        {
            return Some("active L1 table");
        }
        let rt = &self.img.disk;
        if !rt.table.is_empty() && hit(rt.table_offset, rt.table.len() as u64 * 8) {
            return Some("refcount table");
        }
        if self.snapshots.size != 0 && hit(h.snapshots_offset, self.snapshots.size) {
            return Some("snapshot table");
        }
        for sn in &self.snapshots.snapshots {
            if sn.l1_size != 0 && hit(sn.l1_table_offset, u64::from(sn.l1_size) * 8) {
                return Some("inactive L1 table");
            }
        }
        if ign != Ol::ActiveL2 {
            for &e in &self.img.l1 {
                let o = e & L1E_OFFSET_MASK;
                if o != 0 && hit(o, cs) {
                    return Some("active L2 table");
                }
            }
        }
        if ign != Ol::RefcountBlock {
            for &e in &rt.table {
                let o = e & REFT_OFFSET_MASK;
                if o != 0 && hit(o, cs) {
                    return Some("refcount block");
                }
            }
        }
        if let Some(b) = h.bitmaps {
            if hit(b.directory_offset, b.directory_size) {
                return Some("bitmap directory");
            }
        }
        None
    }

    /// Writes metadata after the overlap check; a refused write marks the
    /// image corrupt and fails the repair.
    pub(crate) fn guarded_write(&mut self, ign: Ol, off: u64, buf: &[u8]) -> Result<(), Abort> {
        if let Some(what) = self.overlap(ign, off, buf.len() as u64) {
            let msg = format!(
                "Marking image as corrupt: Preventing invalid write on metadata (overlaps with {what})"
            );
            self.findings.push(super::report::Finding {
                kind: FindingKind::CheckError,
                offset: Some(off),
                message: msg.clone(),
            });
            self.mark_corrupt();
            return Err(Abort(msg));
        }
        let sink = self.img.io.sink().map_err(|e| Abort(e.to_string()))?;
        sink.write_at(off, buf)
            .map_err(|e| Abort(format!("write at {off:#x} failed: {e}")))
    }

    /// Sets the corrupt bit (version 3 only), as QEMU does when it detects
    /// corruption on an image open for writing.
    pub(crate) fn mark_corrupt(&mut self) {
        if self.img.h.version < 3 {
            return;
        }
        self.img.h.incompatible |= INCOMPAT_CORRUPT;
        let flags = self.img.h.incompatible;
        // Best effort, as in QEMU: the refused write already fails the
        // repair, whether or not the flag reaches the disk.
        if let Ok(sink) = self.img.io.sink() {
            sink.write_at(OFF_INCOMPATIBLE, &flags.to_be_bytes()).ok();
        }
    }
}
