//! Counters the engine keeps so that each optimisation can be seen working:
//! guest requests, COW areas created, cancelled and performed, zeroing
//! requests, joins of in-flight allocations, metadata writeback.

use serde::{Deserialize, Serialize};

/// Monotonic counters of one opened image. Device-level counts (requests,
/// bytes, flushes) belong to the device; these are the engine's view.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub guest_reads: u64,
    pub guest_bytes_read: u64,
    pub guest_writes: u64,
    pub guest_bytes_written: u64,
    pub guest_flushes: u64,
    pub guest_zero_writes: u64,
    pub guest_discards: u64,
    /// Host clusters allocated for guest data.
    pub clusters_allocated: u64,
    /// COW areas (head or tail of a partially written new cluster) created.
    pub cow_created: u64,
    /// COW areas a later write covered completely, so never copied.
    pub cow_cancelled_whole: u64,
    /// COW areas a later write covered in part, so only the rest was copied.
    pub cow_cancelled_partial: u64,
    /// COW areas copied to the device (in whole or the uncancelled part).
    pub cow_performed: u64,
    /// Bytes written to the device for COW areas.
    pub cow_bytes_written: u64,
    /// Efficient (no-fallback) write_zeroes requests issued for zero_cow.
    pub zeroing_requests: u64,
    /// Zero-source COW ranges that needed no request at all: growing the
    /// file had zeroed the new clusters (zero_cow), and nothing used them.
    pub cow_already_zero: u64,
    /// zero_cow attempts the device refused, falling back to zero buffers.
    pub zeroing_fallbacks: u64,
    /// Efficient write_zeroes requests that grew the image file ahead of
    /// allocation (zero_cow, `EngineOptions::grow_ahead`).
    pub grow_requests: u64,
    /// Bytes those requests added to the file.
    pub grow_bytes: u64,
    /// Writes that joined a cluster allocation already in flight.
    pub alloc_joins: u64,
    /// Allocations given up before they were linked (the write into them
    /// failed, or a flush could not complete their deferred COW).
    pub allocs_dropped: u64,
    /// Writes that waited for an overlapping in-flight write.
    pub overlap_waits: u64,
    /// Bytes read from the backing file.
    pub backing_bytes_read: u64,
    /// L2 tables written to the device.
    pub l2_writebacks: u64,
    /// Refcount blocks written to the device.
    pub refcount_writebacks: u64,
    /// Device flushes the engine issued (for any reason).
    pub device_flushes: u64,
}

impl Counters {
    /// What happened between `earlier` and `self`, field by field (both
    /// taken from one image, so no field can go backwards).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            guest_reads: self.guest_reads - earlier.guest_reads,
            guest_bytes_read: self.guest_bytes_read - earlier.guest_bytes_read,
            guest_writes: self.guest_writes - earlier.guest_writes,
            guest_bytes_written: self.guest_bytes_written - earlier.guest_bytes_written,
            guest_flushes: self.guest_flushes - earlier.guest_flushes,
            guest_zero_writes: self.guest_zero_writes - earlier.guest_zero_writes,
            guest_discards: self.guest_discards - earlier.guest_discards,
            clusters_allocated: self.clusters_allocated - earlier.clusters_allocated,
            cow_created: self.cow_created - earlier.cow_created,
            cow_cancelled_whole: self.cow_cancelled_whole - earlier.cow_cancelled_whole,
            cow_cancelled_partial: self.cow_cancelled_partial - earlier.cow_cancelled_partial,
            cow_performed: self.cow_performed - earlier.cow_performed,
            cow_bytes_written: self.cow_bytes_written - earlier.cow_bytes_written,
            zeroing_requests: self.zeroing_requests - earlier.zeroing_requests,
            zeroing_fallbacks: self.zeroing_fallbacks - earlier.zeroing_fallbacks,
            cow_already_zero: self.cow_already_zero - earlier.cow_already_zero,
            grow_requests: self.grow_requests - earlier.grow_requests,
            grow_bytes: self.grow_bytes - earlier.grow_bytes,
            alloc_joins: self.alloc_joins - earlier.alloc_joins,
            allocs_dropped: self.allocs_dropped - earlier.allocs_dropped,
            overlap_waits: self.overlap_waits - earlier.overlap_waits,
            backing_bytes_read: self.backing_bytes_read - earlier.backing_bytes_read,
            l2_writebacks: self.l2_writebacks - earlier.l2_writebacks,
            refcount_writebacks: self.refcount_writebacks - earlier.refcount_writebacks,
            device_flushes: self.device_flushes - earlier.device_flushes,
        }
    }
}
