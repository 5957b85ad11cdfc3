//! qcsim's judges: the reference model of guest-visible data and the crash
//! rules it enforces, and the qcow2 image checker (the `qemu-img check`
//! equivalent), which reads images on its own, without the engine's code.
//!
//! ## What it holds
//!
//! the judges: `data` (self-describing guest sectors), `model` (the reference
//! model and crash rules), `check` (the `qemu-img check` equivalent, with
//! repair), `dump`. It parses images itself and does not use the engine

pub mod check;
pub mod data;
pub mod dump;
pub mod model;
