//! qcsim's engine on real image files: opening an image and its backing
//! chain on `FileDev`s as QEMU resolves them (`files`), `qemu-img create`
//! for raw and qcow2 files so that a failed command destroys none
//! (`create`), the argument syntax shared with qemu-img and qemu-io
//! (`qemu_args`), and the tools themselves as functions with typed errors
//! and structured results: `qemu-img info` (`info`), `check` with repair
//! (`check`), `convert` (`convert`) and its `-p` progress lines
//! (`progress`), the qemu-io command parser and
//! session (`io`), `qemu-img resize` (`resize`), `rebase` (`rebase`), `commit`
//! (`commit`), `qemu-img measure` (`measure`: the size a new raw or qcow2
//! image needs), `qemu-img amend` for qcow2 (`amend`), the metadata dump (`dump`), and qemu-img bench's job
//! through the engine, timed by the wall clock, with its flags and the
//! `qemu-img bench` run it is compared with (`bench`).
//!
//! The `qcsim` binary is thin glue over this crate and `sim`: it parses
//! arguments, calls these functions, prints and maps results to exit
//! codes. This crate never uses the simulation.

pub mod amend;
pub mod bench;
pub mod check;
pub mod commit;
pub mod convert;
pub mod create;
pub mod dump;
pub mod files;
pub mod info;
pub mod io;
pub mod map;
pub mod measure;
pub mod progress;
pub mod qemu_args;
pub mod rebase;
pub mod resize;
pub mod snapshot;
