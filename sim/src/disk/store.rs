//! Sparse byte storage: the disk's content in 4 KiB chunks, absent chunks
//! reading as zeroes. Chunks are reference-counted and copied on write, so
//! the durable and volatile views (and crash images) share whatever they
//! have in common, and a 256 MiB benchmark does not hold its data twice.
//!
//! Chunks are kept in groups of [`GROUP_CHUNKS`] (1 MiB), each group itself
//! shared and copied on write: the disk shares its whole volatile view as
//! the durable one every time nothing is pending, so a copy of the store
//! must cost the number of groups, not of chunks.

use std::collections::BTreeMap;
use std::rc::Rc;

/// The size of one chunk in bytes.
pub const CHUNK: u64 = 4 << 10;

/// Chunks per group.
pub const GROUP_CHUNKS: u64 = 256;

/// One chunk's bytes: an array, so that a chunk (and its copy on write) is
/// one allocation and not a vector's two.
type Chunk = [u8; CHUNK as usize];

/// The chunks of one group, by their index within it: a table, not a map,
/// so that finding a chunk is an index and unsharing a group (the first
/// write to it after the durable view took the volatile one) one copy of
/// 256 pointers rather than a tree rebuilt node by node. The price: a
/// group's table is 2 KiB however few chunks it holds, so writes scattered
/// one per megabyte cost 6 KiB each instead of about 4.
#[derive(Debug, Clone)]
struct Group {
    chunks: [Option<Rc<Chunk>>; GROUP_CHUNKS as usize],
    /// How many of `chunks` are present.
    present: usize,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            chunks: std::array::from_fn(|_| None),
            present: 0,
        }
    }
}

impl Group {
    /// The present chunks with an index in `first..=last` (within the
    /// group), in order.
    fn range(&self, first: usize, last: usize) -> impl Iterator<Item = (usize, &Rc<Chunk>)> {
        self.chunks[first..=last]
            .iter()
            .enumerate()
            .filter_map(move |(i, c)| c.as_ref().map(|c| (first + i, c)))
    }

    fn iter(&self) -> impl Iterator<Item = (usize, &Rc<Chunk>)> {
        self.range(0, GROUP_CHUNKS as usize - 1)
    }

    /// Chunk `i`, made (zeroes) if absent.
    fn slot(&mut self, i: usize) -> &mut Rc<Chunk> {
        let present = &mut self.present;
        self.chunks[i].get_or_insert_with(|| {
            *present += 1;
            Rc::new([0; CHUNK as usize])
        })
    }

    fn remove(&mut self, i: usize) {
        if self.chunks[i].take().is_some() {
            self.present -= 1;
        }
    }

    /// Drops every chunk from index `i` on.
    fn remove_from(&mut self, i: usize) {
        for c in &mut self.chunks[i..] {
            if c.take().is_some() {
                self.present -= 1;
            }
        }
    }
}

/// Whether `chunk` is held elsewhere too (`Rc::make_mut` would copy it).
fn shared(chunk: &Rc<Chunk>) -> bool {
    Rc::strong_count(chunk) > 1 || Rc::weak_count(chunk) > 0
}

/// A chunk index's group and its place within the group.
fn split(idx: u64) -> (u64, usize) {
    (idx / GROUP_CHUNKS, (idx % GROUP_CHUNKS) as usize)
}

/// A sparse, growable byte array with a length (bytes past it read as zero).
/// Two stores are equal when their lengths and contents are, however their
/// chunks happen to be allocated.
#[derive(Debug, Clone, Default)]
pub struct SparseStore {
    /// Groups by group index; a group is never empty.
    groups: BTreeMap<u64, Rc<Group>>,
    len: u64,
}

impl PartialEq for SparseStore {
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len {
            return false;
        }
        let zero = |c: &Rc<Chunk>| c.iter().all(|&b| b == 0);
        let keys: std::collections::BTreeSet<u64> =
            self.chunk_indices().chain(other.chunk_indices()).collect();
        keys.into_iter()
            .all(|k| match (self.chunk(k), other.chunk(k)) {
                (Some(a), Some(b)) => Rc::ptr_eq(a, b) || a == b,
                (Some(c), None) | (None, Some(c)) => zero(c),
                (None, None) => true,
            })
    }
}

impl Eq for SparseStore {}

impl SparseStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut s = Self::new();
        s.write(0, bytes);
        s
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held in memory (allocated chunks).
    pub fn allocated(&self) -> u64 {
        self.groups.values().map(|g| g.present as u64).sum::<u64>() * CHUNK
    }

    fn chunk(&self, idx: u64) -> Option<&Rc<Chunk>> {
        let (gi, i) = split(idx);
        self.groups.get(&gi)?.chunks[i].as_ref()
    }

    /// Every present chunk, in order, with its index over the whole store.
    fn all_chunks(&self) -> impl Iterator<Item = (u64, &Rc<Chunk>)> + '_ {
        self.groups.iter().flat_map(|(&gi, g)| {
            g.iter()
                .map(move |(i, c)| (gi * GROUP_CHUNKS + i as u64, c))
        })
    }

    fn chunk_indices(&self) -> impl Iterator<Item = u64> + '_ {
        self.all_chunks().map(|(idx, _)| idx)
    }

    /// The allocated chunks in offset order, as `(offset, bytes)`, the last
    /// one cut at the length: what a sparse copy of the store to a file
    /// writes (everything else reads as zeroes).
    pub fn chunks(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.all_chunks().filter_map(move |(idx, c)| {
            let at = idx * CHUNK;
            let n = CHUNK.min(self.len.saturating_sub(at)) as usize;
            (n > 0).then(|| (at, &c[..n]))
        })
    }

    /// The chunks present from index `first` to `last` (both included), in
    /// order, found by walking the groups and chunks the range holds
    /// rather than looking each index up.
    fn chunks_in(&self, first: u64, last: u64) -> impl Iterator<Item = (u64, &Rc<Chunk>)> + '_ {
        self.groups
            .range(first / GROUP_CHUNKS..=last / GROUP_CHUNKS)
            .flat_map(move |(&gi, g)| {
                let base = gi * GROUP_CHUNKS;
                let lo = first.max(base) - base;
                let hi = last.min(base + GROUP_CHUNKS - 1) - base;
                g.range(lo as usize, hi as usize)
                    .map(move |(i, c)| (base + i as u64, c))
            })
    }

    /// The chunk at `idx` to write into, made if absent and unshared.
    fn chunk_mut(&mut self, idx: u64) -> &mut Chunk {
        let (gi, i) = split(idx);
        let group = Rc::make_mut(self.groups.entry(gi).or_default());
        Rc::make_mut(group.slot(i))
    }

    /// Fill `buf` from `offset`; bytes past the length or never written read
    /// as zero.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        let end = (offset + buf.len() as u64).min(self.len);
        // Bytes before `done` are set: each present chunk is copied once and
        // only the gaps between them are zeroed.
        let mut done = offset;
        if end > offset {
            for (idx, chunk) in self.chunks_in(offset / CHUNK, (end - 1) / CHUNK) {
                let (start, stop) = ((idx * CHUNK).max(offset), ((idx + 1) * CHUNK).min(end));
                buf[(done - offset) as usize..(start - offset) as usize].fill(0);
                let within = (start - idx * CHUNK) as usize;
                buf[(start - offset) as usize..(stop - offset) as usize]
                    .copy_from_slice(&chunk[within..within + (stop - start) as usize]);
                done = stop;
            }
        }
        buf[(done - offset) as usize..].fill(0);
    }

    /// Write `data` at `offset`, growing the length to cover it.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let mut pos = offset;
        // Group by group: each group is looked up (and unshared) once, not
        // once per chunk.
        while pos < end {
            let gi = pos / CHUNK / GROUP_CHUNKS;
            let group_end = ((gi + 1) * GROUP_CHUNKS * CHUNK).min(end);
            let group = Rc::make_mut(self.groups.entry(gi).or_default());
            while pos < group_end {
                let idx = pos / CHUNK;
                let within = (pos % CHUNK) as usize;
                let n = ((CHUNK - pos % CHUNK).min(group_end - pos)) as usize;
                let src = &data[(pos - offset) as usize..(pos - offset) as usize + n];
                let i = split(idx).1;
                match &mut group.chunks[i] {
                    Some(chunk) if n == CHUNK as usize && shared(chunk) => {
                        // Shared and overwritten whole: a new chunk, not a
                        // copy of the old one written over.
                        *chunk = Rc::new(src.try_into().expect("one chunk"));
                    }
                    _ => Rc::make_mut(group.slot(i))[within..within + n].copy_from_slice(src),
                }
                pos += n as u64;
            }
        }
        self.len = self.len.max(end);
    }

    /// Make `len` bytes at `offset` read as zero, growing the length to
    /// cover them. Whole chunks are dropped rather than filled, and only the
    /// chunks that exist are visited, so zeroing a huge range is cheap.
    pub fn zero(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        if len > 0 {
            let present: Vec<u64> = self
                .chunks_in(offset / CHUNK, (end - 1) / CHUNK)
                .map(|(idx, _)| idx)
                .collect();
            for idx in present {
                let (start, stop) = ((idx * CHUNK).max(offset), ((idx + 1) * CHUNK).min(end));
                let (gi, i) = split(idx);
                let group = Rc::make_mut(self.groups.get_mut(&gi).expect("present"));
                if stop - start == CHUNK {
                    group.remove(i);
                    if group.present == 0 {
                        self.groups.remove(&gi);
                    }
                } else {
                    let chunk = Rc::make_mut(group.chunks[i].as_mut().expect("present"));
                    let within = (start - idx * CHUNK) as usize;
                    chunk[within..within + (stop - start) as usize].fill(0);
                }
            }
        }
        self.len = self.len.max(end);
    }

    /// Set the length; bytes past a shrunk end are forgotten, so a later
    /// extension reads zeroes there.
    pub fn truncate(&mut self, len: u64) {
        if len < self.len {
            let first_dead = len.div_ceil(CHUNK);
            let (gi, i) = split(first_dead);
            let mut tail = self.groups.split_off(&gi);
            if let Some(mut group) = tail.remove(&gi) {
                let kept = Rc::make_mut(&mut group);
                kept.remove_from(i);
                if kept.present > 0 {
                    self.groups.insert(gi, group);
                }
            }
            if !len.is_multiple_of(CHUNK) {
                let idx = len / CHUNK;
                if self.chunk(idx).is_some() {
                    self.chunk_mut(idx)[(len % CHUNK) as usize..].fill(0);
                }
            }
        }
        self.len = len;
    }

    /// A hash of the length and the content, equal for equal stores however
    /// their chunks are allocated (a chunk of zeroes counts as absent, as
    /// `==` has it): to pick out likely-equal stores among many, each match
    /// then confirmed with `==`. Not a trace hash: nothing prints it.
    pub fn content_hash(&self) -> u64 {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let step = |h: u64, v: u64| (h ^ v).wrapping_mul(K).rotate_left(29);
        let mut h = step(K, self.len);
        for (idx, chunk) in self.all_chunks() {
            if chunk.iter().all(|&b| b == 0) {
                continue;
            }
            h = step(h, idx);
            for w in chunk.chunks_exact(8) {
                h = step(h, u64::from_le_bytes(w.try_into().expect("8 bytes")));
            }
        }
        h
    }

    /// The whole content as one buffer. Panics if it does not fit in memory
    /// (a programmer error: only small test images are flattened).
    pub fn to_bytes(&self) -> Vec<u8> {
        let len = usize::try_from(self.len).expect("image larger than the address space");
        let mut out = vec![0; len];
        self.read(0, &mut out);
        out
    }
}
