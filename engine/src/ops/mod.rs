//! Operations on the image as a whole, as `qemu-img` runs them: create
//! (`create`, its options in `create_options`, preallocation in
//! `prealloc`), open (`open`), amend (`amend`), the backing file name
//! (`backing_file`), resize (`resize`), internal snapshots (`snapshot`),
//! and external data files (`data_file`).

pub(crate) mod amend;
pub(crate) mod backing_file;
pub(crate) mod create;
pub(crate) mod create_options;
pub(crate) mod data_file;
pub(crate) mod open;
pub mod prealloc;
pub(crate) mod resize;
pub(crate) mod snapshot;
