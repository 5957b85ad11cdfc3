//! What several engine test modules share: the seeded yielding device (so
//! concurrent requests interleave and complete out of order on a
//! single-threaded pool) and the QEMU helpers, both from the shared crates
//! (`blockdev`, `testkit`), re-exported under the names the modules use.
#![allow(unused_imports)]

pub use engine::dev::{YieldDev, YieldN};
pub use testkit::{assert_clean, qemu_create, qemu_raw, tool, tool_in};

/// `qemu-io -c CMD ... IMG` in the image's directory; it must succeed.
pub fn qemu_io(img: &std::path::Path, cmds: &[String]) {
    testkit::qemu_io(None, img, cmds);
}
