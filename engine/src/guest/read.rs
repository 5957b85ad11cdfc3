//! The guest read path: per run of clusters, from the host clusters, the
//! backing file, zeroes, a compressed cluster, or (for clusters allocated
//! but not yet linked) the new cluster where data was written and the old
//! source elsewhere.

use crate::broken::{self, Broken};
use crate::cluster::mapping::Run;
use crate::cow::CowSource;
use crate::dev::BlockDev;
use crate::error::{Error, Result};
use crate::guards::Guard;
use crate::image::{Backing, Image};

impl<D: BlockDev> Image<D> {
    /// [`Image::read`]: the implementation.
    pub(crate) async fn read_impl(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_request(offset, buf.len() as u64)?;
        self.check_data_attached()?;
        self.count(|c| {
            c.guest_reads += 1;
            c.guest_bytes_read += buf.len() as u64;
        });
        self.read_steps(offset, buf).await
    }

    /// The read loop over a range already checked.
    pub(crate) async fn read_steps(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let mut done = 0usize;
        while done < buf.len() {
            done += self
                .read_step(offset + done as u64, &mut buf[done..])
                .await?;
        }
        Ok(())
    }

    async fn read_step(&self, off: u64, buf: &mut [u8]) -> Result<usize> {
        let mg = self.meta.lock().await;
        let cs = self.geo.cluster_size;
        // Deliberately wrong when broken: reads see only the L2 table.
        let see_allocs = !broken::is(&self.opts, Broken::ReadIgnoresAllocs);
        let pending = self.inflight.borrow().allocs.at(off).filter(|_| see_allocs);
        if let Some(id) = pending {
            self.guard_arose(Guard::ReadsSeeUnlinked);
            // Allocated, not linked: written bytes from the new cluster,
            // the rest from where the cluster's data was before.
            let (src, n) = {
                let inf = self.inflight.borrow();
                let a = inf.allocs.alloc(id);
                let cluster_end = self.geo.cluster_start(off) + cs;
                let max = (buf.len() as u64).min(cluster_end - off);
                match a.written().covering_end(off) {
                    Some(e) => (
                        CowSource::Host(a.host_of(off) - self.geo.offset_into_cluster(off)),
                        (e - off).min(max),
                    ),
                    None => {
                        let next = a.written().next_start_after(off).unwrap_or(u64::MAX);
                        // A source holds for one subcluster at most.
                        let sc_end = self.geo.subcluster_start(off) + self.geo.subcluster_size;
                        (
                            self.cow_source(a, off),
                            (next - off).min(max).min(sc_end - off),
                        )
                    }
                }
            };
            let io = self.inflight.borrow_mut().begin_io();
            drop(mg);
            let r = self
                .read_cow_source(&src, off, &mut buf[..n as usize])
                .await;
            self.inflight.borrow_mut().end_io(io);
            r?;
            return Ok(n as usize);
        }
        let limit = {
            let inf = self.inflight.borrow();
            let mut l = buf.len() as u64;
            if let Some(next) = inf.allocs.next_start_after(off).filter(|_| see_allocs) {
                l = l.min(next - off);
            }
            l
        };
        let (run, len) = self.map_run(&mg, off, limit).await?;
        let part = &mut buf[..len as usize];
        let io = self.inflight.borrow_mut().begin_io();
        drop(mg);
        let r = match run {
            Run::Data { host, .. } => self
                .data_dev()
                .read(host + self.geo.offset_into_cluster(off), part)
                .await
                .map_err(Error::from),
            Run::Zero => {
                part.fill(0);
                Ok(())
            }
            Run::Unallocated => self.read_backing(off, part).await,
            Run::Compressed { host, sectors } => {
                self.read_cow_source(&CowSource::Compressed { host, sectors }, off, part)
                    .await
            }
        };
        self.inflight.borrow_mut().end_io(io);
        r?;
        Ok(len as usize)
    }

    /// Read from the backing file (zeroes without one, and past its end).
    pub(crate) async fn read_backing(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let Some(b) = &self.backing else {
            buf.fill(0);
            return Ok(());
        };
        self.count(|c| c.backing_bytes_read += buf.len() as u64);
        match b {
            Backing::Raw(dev) => Ok(dev.read(off, buf).await?),
            Backing::Qcow2(img) => {
                let size = img.virtual_size();
                buf.fill(0);
                if off >= size {
                    return Ok(());
                }
                let n = (buf.len() as u64).min(size - off) as usize;
                Box::pin(img.read(off, &mut buf[..n])).await
            }
        }
    }

    /// Read and decode one compressed cluster.
    pub(crate) async fn read_compressed(&self, host: u64, sectors: u64) -> Result<Vec<u8>> {
        let cs = self.geo.cluster_size as usize;
        if self.has_data_file() {
            return Err(Error::corrupt(
                "compressed cluster in an image with an external data file",
                host,
            ));
        }
        let kind = self.meta.read_unlocked().header.compression();
        // The descriptor counts sectors from the one holding `host`.
        let len = (sectors * 512 - (host & 511)) as usize;
        if len > 2 * cs + 512 {
            return Err(Error::corrupt(
                "compressed cluster descriptor too long",
                host,
            ));
        }
        let mut raw = vec![0u8; len];
        let io = self.inflight.borrow_mut().begin_io();
        let r = self.dev.read(host, &mut raw).await;
        self.inflight.borrow_mut().end_io(io);
        r?;
        crate::format::compress::decompress_cluster(kind, &raw, cs, host)
    }
}

impl<D: BlockDev> Image<D> {
    /// [`Image::mapping_at`]: the implementation.
    pub(crate) async fn mapping_at_impl(&self, guest: u64) -> Result<crate::format::L2Mapping> {
        self.check_request(guest, 1)?;
        let mg = self.meta.lock().await;
        Ok(self.decode_l2(self.l2_entry(&mg, guest).await?, guest))
    }

    /// [`Image::is_compressed`]: the implementation.
    pub(crate) async fn is_compressed_impl(&self, guest: u64) -> Result<bool> {
        Ok(matches!(
            self.mapping_at(guest).await?,
            crate::format::L2Mapping::Compressed { .. }
        ))
    }

    /// [`Image::host_offset`]: the implementation.
    pub(crate) async fn host_offset_impl(&self, guest: u64) -> Result<Option<u64>> {
        match self.mapping_at(guest).await? {
            crate::format::L2Mapping::Normal { host, .. } => {
                Ok(Some(host + self.geo.offset_into_cluster(guest)))
            }
            _ => Ok(None),
        }
    }

    /// [`Image::zero_host_offset`]: the implementation.
    pub(crate) async fn zero_host_offset_impl(&self, guest: u64) -> Result<Option<u64>> {
        match self.mapping_at(guest).await? {
            crate::format::L2Mapping::Zero {
                preallocated: Some(host),
            } => Ok(Some(host + self.geo.offset_into_cluster(guest))),
            _ => Ok(None),
        }
    }
}
