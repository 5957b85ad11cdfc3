//! The qcow2 image checker: the `qemu-img check` equivalent, with repair.
//!
//! It reads the image on its own (never through the engine), rebuilds the
//! reference counts from the header, L1/L2 tables, snapshots, refcount
//! structure and bitmaps, compares them with the stored refcounts and
//! reports with `qemu-img check`'s counting rules, JSON fields and exit
//! codes.

mod bitmap;
mod header;
mod image;
mod overlap;
mod pass;
mod rebuild;
mod refcounts;
mod report;
mod run;
mod snapshot;
mod snapshot_repair;
mod source;

pub use report::{CheckReport, Finding, FindingKind};
pub use run::{check, repair, RepairError, RepairMode};
pub use source::{ImageSink, ImageSource};
