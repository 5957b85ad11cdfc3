//! `qcsim serve --sim`: a simulated disk (`sim::served`) as an NBD export,
//! so that a driver that runs on NBD storage (QEMU's qcow2 driver with
//! `file.driver=nbd`) runs on the simulated disk: its volatile cache, the
//! Linux flush and FUA rules and its faults.
//!
//! Every request is submitted to the disk when the server starts it; then
//! the request yields once to the server's executor, so that the requests
//! that arrived together are all submitted (they are in flight at once,
//! and complete in the disk's order), and then it runs the simulation
//! until it completes. Nothing runs the simulation between requests, so an
//! idle client is never taken for a hang.

use std::cell::RefCell;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use engine::dev::{DevError, YieldN, ZeroFlags};
use nbd::{Export, ExportError, ExportInfo, ExportResult, Extent, ZeroRequest};
use sim::disk::{DiskCounters, DiskOptions, SparseStore, CHUNK};
use sim::served::{DiskRequest, ServedDisk, ServedError};

pub struct SimExport {
    disk: RefCell<ServedDisk>,
    path: PathBuf,
    read_only: bool,
    /// The first error of the simulation or the request log: every later
    /// request fails with it, and serving ends in an error.
    broken: RefCell<Option<String>>,
}

impl SimExport {
    pub fn new(disk: ServedDisk, path: PathBuf, read_only: bool) -> SimExport {
        SimExport {
            disk: RefCell::new(disk),
            path,
            read_only,
            broken: RefCell::new(None),
        }
    }

    pub fn into_disk(self) -> (ServedDisk, Option<String>) {
        (self.disk.into_inner(), self.broken.into_inner())
    }

    pub fn counters(&self) -> DiskCounters {
        self.disk.borrow().disk().counters()
    }

    /// Submit `req`, let the requests that came with it be submitted too,
    /// then run the simulation until it completes.
    async fn run(&self, req: DiskRequest) -> ExportResult<Vec<u8>> {
        if let Some(why) = self.broken.borrow().as_ref() {
            return Err(ExportError::Io(why.clone()));
        }
        let ticket = self
            .disk
            .borrow_mut()
            .submit(req)
            .map_err(|e| self.fail(e))?;
        YieldN(1).await;
        let reply = self
            .disk
            .borrow_mut()
            .wait(ticket)
            .map_err(|e| self.fail(e))?;
        reply.map_err(export_error)
    }

    fn fail(&self, e: ServedError) -> ExportError {
        let why = e.to_string();
        self.broken.borrow_mut().get_or_insert_with(|| why.clone());
        ExportError::Io(why)
    }
}

fn export_error(e: DevError) -> ExportError {
    match e {
        DevError::NoSpace { .. } => ExportError::NoSpace(e.to_string()),
        DevError::NotSupported { .. } => ExportError::NotSupported(e.to_string()),
        other => ExportError::Io(other.to_string()),
    }
}

impl Export for SimExport {
    fn info(&self) -> ExportInfo {
        let served = self.disk.borrow();
        let disk = served.disk();
        let sector = disk.options().sector_size;
        ExportInfo {
            size: engine::dev::BlockDev::len(disk),
            read_only: self.read_only,
            trim: true,
            write_zeroes: true,
            fast_zero: true,
            // Always: QEMU's client sends no flush to an export that does
            // not say it takes them, and flushes are the point.
            flush: true,
            // One disk behind every connection: a flush makes durable what
            // completed before it, whichever connection wrote it.
            multi_conn: true,
            // The disk's sector: a client does its own read-modify-write
            // below it, as on a real disk.
            min_block: sector,
            preferred_block: 4096.max(sector),
            description: format!("qcsim simulated disk: {}", self.path.display()),
        }
    }

    async fn read(&self, offset: u64, buf: &mut [u8]) -> ExportResult<()> {
        let len = buf.len() as u64;
        let data = self.run(DiskRequest::Read { offset, len }).await?;
        buf.copy_from_slice(&data);
        Ok(())
    }

    async fn write(&self, offset: u64, data: &[u8], fua: bool) -> ExportResult<()> {
        let data = data.to_vec();
        self.run(DiskRequest::Write { offset, data, fua })
            .await
            .map(drop)
    }

    async fn write_zeroes(&self, offset: u64, len: u64, how: ZeroRequest) -> ExportResult<()> {
        let flags = ZeroFlags {
            may_unmap: !how.no_hole,
            // The disk refuses at once a zeroing it would do by writing
            // zero buffers: what FAST_ZERO asks.
            no_fallback: how.fast,
            fua: how.fua,
        };
        self.run(DiskRequest::WriteZeroes { offset, len, flags })
            .await
            .map(drop)
    }

    async fn trim(&self, offset: u64, len: u64, fua: bool) -> ExportResult<()> {
        self.run(DiskRequest::Discard { offset, len }).await?;
        // A discard carries no FUA on the disk; a flush after it makes it
        // durable (and with it whatever else had completed: more than FUA
        // promises, never less).
        if fua {
            self.run(DiskRequest::Flush).await?;
        }
        Ok(())
    }

    async fn flush(&self) -> ExportResult<()> {
        self.run(DiskRequest::Flush).await?;
        // The request log is on disk at least as far as the data it
        // describes.
        let logged = self.disk.borrow_mut().flush_log();
        logged.map_err(|e| self.fail(e))
    }

    async fn block_status(&self, _offset: u64, len: u64) -> ExportResult<Extent> {
        // A disk has no holes to report: all of it is data.
        Ok(Extent {
            len,
            hole: false,
            zero: false,
        })
    }
}

/// The disk's content file: read whole at the start (chunks of zeroes left
/// out), made first with `size` bytes of zeroes if it does not exist.
pub fn load(path: &Path, size: Option<u64>) -> anyhow::Result<SparseStore> {
    let mut file = match (File::open(path), size) {
        (Ok(f), _) => f,
        (Err(e), Some(size)) if e.kind() == std::io::ErrorKind::NotFound => {
            let f = File::create_new(path)
                .with_context(|| format!("{}: cannot create the disk", path.display()))?;
            f.set_len(size)
                .with_context(|| format!("{}: cannot make it {size} bytes", path.display()))?;
            File::open(path)?
        }
        (Err(e), _) => {
            return Err(e).with_context(|| {
                format!(
                    "{}: cannot open the disk's content (give --sim-size to create it)",
                    path.display()
                )
            })
        }
    };
    let len = file.metadata()?.len();
    if let Some(size) = size {
        if size != len {
            bail!(
                "{}: the disk exists with {len} bytes, not the {size} of --sim-size (remove it, or leave --sim-size out)",
                path.display()
            );
        }
    }
    if len == 0 {
        bail!("{}: an empty disk cannot be exported", path.display());
    }
    let mut store = SparseStore::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = read_some(&mut file, &mut buf)
            .with_context(|| format!("{}: reading at {at}", path.display()))?;
        if n == 0 {
            break;
        }
        for (i, c) in buf[..n].chunks(CHUNK as usize).enumerate() {
            if c.iter().any(|&b| b != 0) {
                store.write(at + (i as u64) * CHUNK, c);
            }
        }
        at += n as u64;
    }
    store.truncate(len);
    Ok(store)
}

/// Fill `buf` as far as the file goes.
fn read_some(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Write `content` to `path` in place of what it held: to a file beside
/// it, sparse, then renamed over it, so that a failure leaves the old
/// content whole.
pub fn store(path: &Path, content: &SparseStore) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".qcsim-new");
    let tmp = PathBuf::from(tmp);
    let written = (|| -> std::io::Result<()> {
        let mut f = File::create(&tmp)?;
        f.set_len(content.len())?;
        for (at, bytes) in content.chunks() {
            if bytes.iter().any(|&b| b != 0) {
                f.seek(SeekFrom::Start(at))?;
                f.write_all(bytes)?;
            }
        }
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("{}: writing the disk's content", path.display()));
    }
    Ok(())
}

/// The disk's options for a session: the default disk, its write log off
/// (a session may last for ever; the request log is the record), its cache
/// bounded.
pub fn options(cache_bytes_max: u64) -> DiskOptions {
    let mut o = DiskOptions::default();
    o.log.enabled = false;
    o.crash.cache_bytes_max = Some(cache_bytes_max);
    o
}
