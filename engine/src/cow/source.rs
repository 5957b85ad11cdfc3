//! COW sources: where the old content of a cluster being replaced comes
//! from (zeroes, the backing file, the old host cluster, or a compressed
//! cluster), the pieces of one source a range is cut into, and reading
//! them.

use crate::alloc::allocs::Alloc;
use crate::dev::BlockDev;
use crate::error::Result;
use crate::format::L2Mapping;
use crate::image::Image;

/// Where the old content of a guest cluster lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CowSource {
    /// Zeroes: a zero cluster, or an unallocated one without a backing
    /// file.
    Zero,
    /// The backing file, at the same guest offset (an unallocated cluster
    /// over a backing file).
    Backing,
    /// The old host cluster (cluster-aligned offset).
    Host(u64),
    /// A compressed cluster: its host offset and sector count.
    Compressed { host: u64, sectors: u64 },
}

impl CowSource {
    /// Whether the old content is zeroes.
    pub fn is_zero(&self) -> bool {
        matches!(self, CowSource::Zero)
    }
}

/// Guest bytes `[start, end)` of an allocation whose old content has one
/// source; never wider than a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// First guest byte.
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Where its old content lives.
    pub src: CowSource,
}

impl Piece {
    pub(crate) fn len(&self) -> u64 {
        self.end - self.start
    }
}

impl<D: BlockDev> Image<D> {
    /// The source of the old content at guest offset `guest`, which lies
    /// in allocation `a`. It holds for the rest of `guest`'s subcluster
    /// (cluster, in standard images).
    pub(crate) fn cow_source(&self, a: &Alloc, guest: u64) -> CowSource {
        let i = ((guest - a.guest_start()) / self.geo.cluster_size) as usize;
        match self.decode_l2(a.old_entry(i), guest) {
            L2Mapping::Unallocated if self.backing.is_some() => CowSource::Backing,
            L2Mapping::Unallocated | L2Mapping::Zero { .. } => CowSource::Zero,
            L2Mapping::Normal { host, .. } => CowSource::Host(host),
            L2Mapping::Compressed { host, sectors } => CowSource::Compressed { host, sectors },
        }
    }

    /// [s, e) of allocation `a` cut where its COW source may change (at
    /// cluster boundaries, and subcluster boundaries with extended L2
    /// entries), each piece with its source. Neighbours in one cluster with
    /// the same source stay one piece.
    pub(crate) fn cow_pieces(&self, a: &Alloc, s: u64, e: u64) -> Vec<Piece> {
        let mut out: Vec<Piece> = Vec::new();
        let mut p = s;
        while p < e {
            let q = e.min(self.geo.subcluster_start(p) + self.geo.subcluster_size);
            let src = self.cow_source(a, p);
            match out.last_mut() {
                Some(last)
                    if last.end == p
                        && last.src == src
                        && self.geo.cluster_start(last.start) == self.geo.cluster_start(p) =>
                {
                    last.end = q
                }
                _ => out.push(Piece {
                    start: p,
                    end: q,
                    src,
                }),
            }
            p = q;
        }
        out
    }

    /// Read the old content at guest offset `guest` (all of `buf` inside
    /// one cluster) from `src`.
    pub(crate) async fn read_cow_source(
        &self,
        src: &CowSource,
        guest: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        match *src {
            CowSource::Zero => {
                buf.fill(0);
                Ok(())
            }
            CowSource::Backing => self.read_backing(guest, buf).await,
            CowSource::Host(h) => {
                let io = self.inflight.borrow_mut().begin_io();
                let r = self
                    .data_dev()
                    .read(h + self.geo.offset_into_cluster(guest), buf)
                    .await;
                self.inflight.borrow_mut().end_io(io);
                Ok(r?)
            }
            CowSource::Compressed { host, sectors } => {
                let cluster = self.read_compressed(host, sectors).await?;
                let o = self.geo.offset_into_cluster(guest) as usize;
                buf.copy_from_slice(&cluster[o..o + buf.len()]);
                Ok(())
            }
        }
    }
}
