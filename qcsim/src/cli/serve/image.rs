//! The guest view of an image file as an NBD export: every request goes
//! through the engine (`tools::files::Disk`: qcow2 through `engine::Image`,
//! a raw file as it is), and block status is the engine's, down the
//! backing chain, as `base:allocation` states: data is data, zero and
//! unallocated clusters are holes that read as zeroes. A request flagged
//! FUA goes to the disk as one (`Disk::write_flagged` and its kin: the
//! engine's FUA calls for qcow2, a FUA device request for raw), not as
//! the request and a flush.

use std::path::PathBuf;

use engine::dev::DevError;
use engine::Status;
use nbd::{Export, ExportError, ExportInfo, ExportResult, Extent, ZeroRequest};
use tools::files::Disk;

/// Bytes of zeroes written per request where a range must stay allocated.
const ZERO_PIECE: u64 = 1 << 20;

pub struct ImageExport {
    disk: Disk,
    path: PathBuf,
    read_only: bool,
}

impl ImageExport {
    pub fn new(disk: Disk, path: PathBuf, read_only: bool) -> ImageExport {
        ImageExport {
            disk,
            path,
            read_only,
        }
    }

    /// The clean close: flush, and for qcow2 write refcounts back and clear
    /// the dirty bit, as any closing command does.
    pub async fn close(self) -> engine::Result<()> {
        self.disk.close().await
    }

    /// Whether zeroing `offset..offset + len` is a metadata change only:
    /// whole clusters of a version 3 qcow2 image (the disk's last partial
    /// cluster counts as whole), which become zero clusters.
    fn zeroes_fast(&self, offset: u64, len: u64) -> bool {
        let Some(image) = self.disk.qcow2() else {
            return false;
        };
        let cs = image.cluster_size();
        let end = offset + len;
        image.header().version >= 3
            && offset.is_multiple_of(cs)
            && (end.is_multiple_of(cs) || end == image.virtual_size())
    }

    /// What the engine counted of the clients' requests, for the log at
    /// the end (a raw file has no engine, so nothing).
    pub fn summary(&self) -> Option<String> {
        let c = self.disk.qcow2()?.counters();
        Some(format!(
            "{} reads, {} writes, {} write zeroes, {} discards, {} flushes, {} FUA requests ({} device flushes for them)",
            c.guest_reads,
            c.guest_writes,
            c.guest_zero_writes,
            c.guest_discards,
            c.guest_flushes,
            c.guest_fua_requests,
            c.fua_flushes
        ))
    }
}

/// The NBD error an engine error is sent as.
fn export_error(e: engine::Error) -> ExportError {
    match e {
        engine::Error::Dev(DevError::NoSpace { .. }) => ExportError::NoSpace(e.to_string()),
        engine::Error::OutOfRange { .. } => ExportError::Invalid(e.to_string()),
        engine::Error::ReadOnly => ExportError::ReadOnly,
        other => ExportError::Io(other.to_string()),
    }
}

impl Export for ImageExport {
    fn info(&self) -> ExportInfo {
        let cluster = self.disk.qcow2().map_or(4096, |i| i.cluster_size());
        ExportInfo {
            size: self.disk.virtual_size(),
            read_only: self.read_only,
            trim: true,
            write_zeroes: true,
            fast_zero: true,
            flush: true,
            // One engine serves every connection: a flush on any of them
            // makes every completed write durable.
            multi_conn: true,
            min_block: 1,
            preferred_block: cluster.clamp(4096, 2 << 20) as u32,
            description: format!("qcsim: {} ({})", self.path.display(), self.disk.format()),
        }
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> ExportResult<()> {
        self.disk.read(offset, buf).await.map_err(export_error)
    }

    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        self.disk
            .write_flagged(offset, data, fua)
            .await
            .map_err(export_error)
    }

    async fn write_zeroes(&self, offset: u64, len: u64, how: ZeroRequest) -> ExportResult<()> {
        if how.fast && (how.no_hole || !self.zeroes_fast(offset, len)) {
            return Err(ExportError::NotSupported(format!(
                "zeroing {len} bytes at {offset} would be no faster than writing them"
            )));
        }
        match (&self.disk, how.no_hole) {
            (Disk::Qcow2(_), true) => {
                // The engine's write zeroes always unmaps whole clusters;
                // NO_HOLE asks that they stay allocated, so write zeroes,
                // every piece with the request's FUA: the request is
                // durable only once all of them are.
                let zeroes = vec![0u8; len.min(ZERO_PIECE) as usize];
                let mut at = offset;
                while at < offset + len {
                    let n = (offset + len - at).min(ZERO_PIECE);
                    self.disk
                        .write_flagged(at, &zeroes[..n as usize], how.fua)
                        .await
                        .map_err(export_error)?;
                    at += n;
                }
                Ok(())
            }
            (_, no_hole) => self
                .disk
                .zeroes_flagged(offset, len, !no_hole, how.fua)
                .await
                .map_err(export_error),
        }
    }

    async fn trim(&self, offset: u64, len: u64, fua: bool) -> ExportResult<()> {
        self.disk
            .discard_flagged(offset, len, fua)
            .await
            .map_err(export_error)
    }

    async fn flush(&self) -> ExportResult<()> {
        self.disk.flush().await.map_err(export_error)
    }

    async fn block_status(&self, offset: u64, len: u64) -> ExportResult<Extent> {
        let Some(image) = self.disk.qcow2() else {
            // A raw file's holes are not looked for: all of it is data.
            return Ok(Extent {
                len,
                hole: false,
                zero: false,
            });
        };
        let (status, n) = image
            .block_status_deep(offset, len)
            .await
            .map_err(export_error)?;
        let hole = status != Status::Data;
        Ok(Extent {
            len: n,
            hole,
            zero: status.reads_as_zero(),
        })
    }
}
