//! Workloads: the guest operations of a case, generated from a seed by a
//! profile that imitates a real program (dd, iozone, qemu-img bench, mkfs),
//! or decoded from fuzzer bytes.
//!
//! Every generated workload mixes in flushes, reads and several
//! crash-and-reopen points, and stays small (a few MiB of virtual disk, a
//! few hundred operations) so that a campaign runs thousands of cases.

mod amend;
mod arbitrary;
mod backing;
mod bench;
mod builder;
mod dsync;
mod fua;
mod generate;
mod hazard;
mod iozone;
mod journal;
mod mkfs;
mod profile;
mod random;
mod resize;
mod sequential;
mod snapshot_compress;

pub use arbitrary::{
    MAX_ARBITRARY_AMENDS, MAX_ARBITRARY_CRASHES, MAX_ARBITRARY_EXTRAS, MAX_ARBITRARY_OPS,
    MAX_ARBITRARY_RESIZES,
};
pub use profile::{Profile, UnknownProfile};
