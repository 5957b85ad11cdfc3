//! Rewriting the snapshot table, the last step of `-r all` when entries
//! were found incomplete: the table is written afresh (every entry with the
//! extra data version 3 requires) into newly allocated clusters, the header
//! is pointed at it and the old table's clusters are freed.

use super::header::OFF_NB_SNAPSHOTS;
use super::pass::Ol;
use super::pass::{Abort, Pass};
use super::snapshot::encode_table;

impl Pass<'_, '_> {
    /// Finds `count` contiguous clusters whose stored refcount is 0 and
    /// that existing refcount blocks cover, and gives them refcount 1.
    fn alloc_stored(&mut self, count: u64) -> Result<u64, Abort> {
        let limit = self.img.disk.covered_clusters();
        let mut run = 0;
        let mut cluster = 1;
        while cluster < limit && run < count {
            let free = self.img.disk.get(self.img.io.src(), cluster).ok() == Some(0)
                && self.img.disk.covers(cluster);
            run = if free { run + 1 } else { 0 };
            cluster += 1;
        }
        if run < count {
            return Err(Abort(
                "ERROR failed to update snapshot table: no free clusters under the existing refcount blocks".into(),
            ));
        }
        let start = cluster - count;
        for c in start..cluster {
            self.set_stored(c, 1)?;
        }
        Ok(start << self.img.h.cluster_bits)
    }

    fn set_stored(&mut self, cluster: u64, value: u64) -> Result<(), Abort> {
        let sink = self.img.io.sink().map_err(|e| Abort(e.to_string()))?;
        self.img
            .disk
            .set(sink, cluster, value)
            .map_err(|e| Abort(format!("ERROR failed to update refcount: {e:?}")))
    }

    /// Writes the snapshot table afresh (QEMU's `qcow2_write_snapshots`).
    pub(crate) fn rewrite_snapshot_table(&mut self) -> Result<(), Abort> {
        let bytes = encode_table(&self.snapshots.snapshots, self.img.h.size);
        let cs = self.img.h.cluster_size();
        let clusters = (bytes.len() as u64).div_ceil(cs);
        let offset = self.alloc_stored(clusters)?;
        self.guarded_write(Ol::None, offset, &bytes)?;
        let mut hdr = [0u8; 12];
        hdr[..4].copy_from_slice(&(self.snapshots.snapshots.len() as u32).to_be_bytes());
        hdr[4..].copy_from_slice(&offset.to_be_bytes());
        let sink = self.img.io.sink().map_err(|e| Abort(e.to_string()))?;
        sink.write_at(OFF_NB_SNAPSHOTS, &hdr)
            .map_err(|e| Abort(format!("ERROR failed to update snapshot table: {e}")))?;
        let (old, old_size) = (self.img.h.snapshots_offset, self.snapshots.size);
        self.img.h.snapshots_offset = offset;
        if old_size != 0 {
            let first = old >> self.img.h.cluster_bits;
            let last = (old + old_size - 1) >> self.img.h.cluster_bits;
            for c in first..=last {
                if let Ok(r) = self.img.disk.get(self.img.io.src(), c) {
                    if r > 0 {
                        self.set_stored(c, r - 1)?;
                    }
                }
            }
        }
        Ok(())
    }
}
