//! The reference model of guest-visible data: which values each 512-byte
//! guest sector may hold while requests are in flight, and after a crash.
//!
//! The model follows ARCHITECTURE.md ("The oracle's rules"): it keeps write ids, not
//! bytes, one history per sector touched, so its memory is proportional to
//! the sectors written, not to the disk size. The runner feeds it the guest
//! requests as they are issued and completed, and every read's bytes; the
//! model answers with the violations it finds.

mod history;
mod sectors;
mod state;
mod types;
mod violation;

pub use state::{Model, Stats};
pub use types::{DiscardContract, OpId, SectorRange, Status, Value, WriteKind};
pub use violation::{summarize, Violation, When, READ_BACK_OPS};
