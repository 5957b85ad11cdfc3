//! Copy-on-write: filling the bytes of an allocation (new clusters, or
//! subclusters filled in place) that no guest write covers with what they
//! held before.
//!
//! - `source`: where the old content lives (zeroes, the backing file, the
//!   old host cluster, a compressed cluster), cut into pieces of one
//!   source, and reading it;
//! - `plan`: the one pure decision of which device requests do the COW:
//!   nothing (a fresh run already reads as zeroes), one efficient zeroing
//!   (zero_cow), copies from the sources, or COW and guest data merged
//!   into one write (merge_cow); the in-place rule; the `DropPartialCow`
//!   broken variant. No I/O, unit-tested;
//! - `exec`: describing an allocation's COW to the planner and carrying
//!   the plan out on the data device.
//!
//! Both write paths use it: the allocating write without delayed COW (COW
//! and data together, `Image::write_with_cow`) and the commit of an
//! allocation (what no write covered, `Image::perform_remaining_cow`).

mod exec;
pub mod plan;
pub mod source;

pub(crate) use exec::Place;
pub(crate) use plan::plan;
pub(crate) use source::CowSource;
