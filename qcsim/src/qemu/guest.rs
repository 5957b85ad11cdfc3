//! The driver under test as a run sends it guest requests (`Guest`), and
//! connecting to a socket a driver's process is still setting up. Below
//! `run` and the drivers (`imago`; QEMU's `qemu-nbd` in `run`).

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

/// The driver under test, as the run sends it guest requests.
pub trait Guest {
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()>;
    fn write(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()>;
    fn write_zeroes(&mut self, offset: u64, len: u64, no_hole: bool) -> anyhow::Result<()>;
    fn trim(&mut self, offset: u64, len: u64) -> anyhow::Result<()>;
    fn flush(&mut self) -> anyhow::Result<()>;
    /// [`Guest::write`] flagged FUA: durable once it returns Ok. A driver
    /// with no FUA of its own gets the write then a flush.
    fn write_fua(&mut self, offset: u64, data: &[u8]) -> anyhow::Result<()> {
        self.write(offset, data)?;
        self.flush()
    }
    /// [`Guest::write_zeroes`] flagged FUA (see [`Guest::write_fua`]).
    fn write_zeroes_fua(&mut self, offset: u64, len: u64, no_hole: bool) -> anyhow::Result<()> {
        self.write_zeroes(offset, len, no_hole)?;
        self.flush()
    }
    /// [`Guest::trim`] flagged FUA (see [`Guest::write_fua`]).
    fn trim_fua(&mut self, offset: u64, len: u64) -> anyhow::Result<()> {
        self.trim(offset, len)?;
        self.flush()
    }
    /// The power cut: the driver stops where it stands.
    fn crash(self: Box<Self>);
    /// The clean close: the driver writes back what it holds and ends.
    fn close(self: Box<Self>) -> anyhow::Result<()>;
}

/// Connect to `socket`, which qemu-nbd may have bound and not yet be
/// listening on (a connection is refused in between).
pub fn connect(socket: &Path) -> anyhow::Result<UnixStream> {
    let start = Instant::now();
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && start.elapsed() < Duration::from_secs(60) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).with_context(|| format!("{}", socket.display())),
        }
    }
}
