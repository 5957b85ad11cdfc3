//! The host-cluster allocator's state (`Allocator`): where the search for
//! free clusters starts, the high-water mark of clusters in use, where
//! compressed clusters are being packed (`CompressedTail`), and the
//! frees waiting until the metadata change that stopped referencing a
//! cluster is durable. The search itself, and applying frees to the
//! refcounts, live in `refcount`; this module does no I/O.
//!
//! Invariants:
//! - every cluster in use (data, tables, refcount blocks) or handed out
//!   lies below `end_cluster`, which never moves down while the image is
//!   open; `alloc_clusters_fresh` raises it before it sets a run's
//!   refcounts, so a run whose refcounts were only partly set still lies
//!   below it (growing never zeroes it, closing never trims it off);
//! - `free_hint` is only where a search starts: clusters below it may be
//!   free (a free run too short for a request is passed over), and a free
//!   lowers it;
//! - a queued free is applied only once it is durable and no data I/O
//!   numbered below its `io_seq` is in flight; queue order is kept.
//!
//! `Allocator` is part of `Meta`, reached through the metadata lock like
//! the rest of it; `FreeQueue` is the image's own (see its doc).

/// A cluster whose refcount is to drop once the metadata change that
/// stopped referencing it is durable.
#[derive(Debug, Clone, Copy)]
struct PendingFree {
    cluster: u64,
    /// Data I/O with a sequence number below this may still touch the
    /// cluster; it must finish before the cluster can be reused.
    io_seq: u64,
    /// The L2/L1 change is durable (a writeback has completed since).
    durable: bool,
    /// Durable, but held back by in-flight data I/O at least once.
    held: bool,
}

pub(crate) struct Allocator {
    /// Where the search for free clusters starts.
    free_hint: u64,
    /// Where the next compressed cluster's bytes may go: just after the
    /// last one's, in the host cluster that one ended in (QEMU's "free
    /// byte offset"); `None` once that cluster is full or freed.
    compressed_tail: Option<CompressedTail>,
    /// One past the highest cluster in use or allocated.
    end_cluster: u64,
}

/// The partly used host cluster compressed clusters are packed into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompressedTail {
    /// The host cluster.
    pub cluster: u64,
    /// The host byte offset of its first unused byte (inside it, never
    /// at its start).
    pub offset: u64,
}

impl Allocator {
    /// The state of an image just opened whose file ends at cluster
    /// `end_cluster`.
    pub(crate) fn new(end_cluster: u64) -> Self {
        Allocator {
            free_hint: 0,
            compressed_tail: None,
            end_cluster,
        }
    }

    /// Where the search for free clusters starts.
    pub(crate) fn search_start(&self) -> u64 {
        self.free_hint
    }

    /// Start the next search at cluster `c` (the end of a run just
    /// handed out, or 0 to search the whole image again).
    pub(crate) fn set_search_start(&mut self, c: u64) {
        self.free_hint = c;
    }

    /// Cluster `c` may have become free: start the next search no later
    /// than there. Compressed data goes into it no more: once free it may
    /// be handed out whole. Returns the packing tail it forgot, if the tail
    /// was in `c`.
    pub(crate) fn note_free(&mut self, c: u64) -> Option<CompressedTail> {
        self.free_hint = self.free_hint.min(c);
        if self.compressed_tail.is_some_and(|t| t.cluster == c) {
            return self.compressed_tail.take();
        }
        None
    }

    /// Where compressed data may continue, if anywhere.
    pub(crate) fn compressed_tail(&self) -> Option<CompressedTail> {
        self.compressed_tail
    }

    /// Compressed data now ends at `tail` (`None`: at a cluster end).
    pub(crate) fn set_compressed_tail(&mut self, tail: Option<CompressedTail>) {
        self.compressed_tail = tail;
    }

    /// One past the highest cluster in use or allocated.
    pub(crate) fn end_cluster(&self) -> u64 {
        self.end_cluster
    }

    /// Clusters below `end` are in use or handed out: raise the
    /// high-water mark to cover them. Returns the mark before.
    pub(crate) fn note_allocated(&mut self, end: u64) -> u64 {
        let before = self.end_cluster;
        self.end_cluster = self.end_cluster.max(end);
        before
    }
}

/// The frees waiting until the metadata change that stopped referencing
/// each cluster is durable, in queue order. Not part of `Meta`: it is an
/// append-only log that any task may add to with no await (an allocation
/// given up at a failed flush must not wait for the lock before the flush
/// reports it); the writeback marks entries durable by count and applies
/// them only while it holds the metadata lock, so an entry added while a
/// writeback is under way waits for the next one.
#[derive(Default)]
pub(crate) struct FreeQueue {
    pending_frees: Vec<PendingFree>,
}

impl FreeQueue {
    /// Queue the free of `cluster`, to be applied once a writeback has
    /// made the change that dropped the reference durable
    /// ([`FreeQueue::mark_durable`]) and no data I/O numbered below
    /// `io_seq` is in flight.
    pub(crate) fn queue_free(&mut self, cluster: u64, io_seq: u64) {
        self.pending_frees.push(PendingFree {
            cluster,
            io_seq,
            durable: false,
            held: false,
        });
    }

    /// Queue the free of `cluster`, which nothing on disk references
    /// (already durable): applied once no data I/O numbered below
    /// `io_seq` is in flight.
    pub(crate) fn queue_durable_free(&mut self, cluster: u64, io_seq: u64) {
        self.pending_frees.push(PendingFree {
            cluster,
            io_seq,
            durable: true,
            held: false,
        });
    }

    /// How many frees are queued: a writeback notes it before it starts,
    /// and then marks that many durable.
    pub(crate) fn queued_frees(&self) -> usize {
        self.pending_frees.len()
    }

    /// The first `n` queued frees (those queued before a writeback began
    /// that has now completed) are durable.
    pub(crate) fn mark_durable(&mut self, n: usize) {
        for f in self.pending_frees.iter_mut().take(n) {
            f.durable = true;
        }
    }

    /// Take the clusters of the durable frees that no in-flight data I/O
    /// can still touch (`oldest_io`: the oldest in flight, if any), in
    /// queue order; the others stay queued, in order. Also returns how many
    /// durable frees were held back by in-flight I/O for the first time
    /// (each counted once, for the guard's counter).
    pub(crate) fn take_ready_frees(&mut self, oldest_io: Option<u64>) -> (Vec<u64>, u64) {
        let mut held = 0;
        for f in &mut self.pending_frees {
            if f.durable && !f.held && oldest_io.is_some_and(|o| o < f.io_seq) {
                f.held = true;
                held += 1;
            }
        }
        let (ready, keep): (Vec<PendingFree>, Vec<PendingFree>) = self
            .pending_frees
            .drain(..)
            .partition(|f| f.durable && oldest_io.is_none_or(|o| o >= f.io_seq));
        self.pending_frees = keep;
        (ready.into_iter().map(|f| f.cluster).collect(), held)
    }
}
