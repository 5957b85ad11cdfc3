//! qcsim's judges: the reference model of guest-visible data and the crash
//! rules it enforces, and the qcow2 image checker (the `qemu-img check`
//! equivalent), which reads images on its own, without the engine's code.

pub mod check;
pub mod data;
pub mod dump;
pub mod model;
