//! The qemu-io commands as values: [`Cmd`] and what its requests carry
//! ([`ReadCmd`], [`WriteCmd`], [`WriteData`], [`PatternCheck`],
//! [`Report`]), with qemu-io's limit on one request ([`MAX_REQUEST`]).
//! Made by the parser (`parse`), carried out by the session (`session`)
//! or, for those that change which image is open or end the process, by
//! its caller.

/// Largest single request, as qemu-io's limit (2 GiB less one sector).
pub const MAX_REQUEST: u64 = (i32::MAX as u64) & !511;

/// `read -P`'s check: every byte of `[offset, offset + len)` of the data
/// read (relative to the request; `-s` and `-l`) must be `byte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternCheck {
    pub byte: u8,
    pub offset: u64,
    /// `None`: to the end of the request.
    pub len: Option<u64>,
}

/// How a request's result is reported (qemu-io's `-q` and `-C`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    pub quiet: bool,
    /// `-C`: one comma-separated line instead of the two lines.
    pub csv: bool,
}

/// `read`, `readv` (several lengths, one after the other) and `aio_read`,
/// which here completes before the next command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadCmd {
    /// The command's name as qemu-io reports its failures.
    pub op: &'static str,
    pub offset: u64,
    pub lens: Vec<u64>,
    pub pattern: Option<PatternCheck>,
    pub verbose: bool,
    pub report: Report,
    /// `-b`: the offset is in the VM state area, not the disk.
    pub vmstate: bool,
}

/// `write`, `writev` and `aio_write`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteCmd {
    pub op: &'static str,
    pub offset: u64,
    pub lens: Vec<u64>,
    pub data: WriteData,
    /// `-f`: force unit access: every request durable when it completes.
    pub fua: bool,
    pub report: Report,
    /// `-b`: the offset is in the VM state area, not the disk.
    pub vmstate: bool,
}

/// One parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    Read(ReadCmd),
    Write(WriteCmd),
    Discard {
        offset: u64,
        len: u64,
        report: Report,
    },
    /// `alloc off [count]`: how much of the range this image (not its
    /// backing file) holds.
    Alloc {
        offset: u64,
        count: u64,
    },
    /// The allocation map of the whole image.
    Map,
    /// The virtual size.
    Length,
    /// Format, cluster size and the format's own information.
    Info,
    Flush,
    /// `aio_flush`: requests complete before the next command, so this is
    /// a flush.
    AioFlush,
    /// `open [-r] [-s] [-n] [-o opts] [FILE]`: without FILE, the options
    /// name it.
    Open {
        file: Option<String>,
        read_only: bool,
        /// `-n`, `-t none`: bypass the host page cache.
        nocache: bool,
        /// `-o key=value,...` as given.
        options: Vec<String>,
    },
    Close,
    /// `reopen [-r|-w] [-c cache] [-o opts]`: the same image, opened
    /// again read-only (`Some(true)`), read-write, or as it was.
    Reopen {
        read_only: Option<bool>,
        /// `-c MODE`: the cache mode, as given.
        cache: Option<String>,
        options: Vec<String>,
    },
    /// `truncate [-m MODE] SIZE`: the virtual size set to SIZE (grown or
    /// shrunk), with preallocation mode MODE as given (only `off` is
    /// carried out). Needs the session mutably: `Session::truncate`.
    Truncate {
        size: u64,
        prealloc: Option<String>,
    },
    /// End the process with SIGABRT, as a crash would.
    Abort,
    /// Raise the signal of this number.
    Sigraise(i32),
    /// End the session; later commands are not run.
    Quit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteData {
    Pattern(u8),
    /// `write -c`: the pattern, written as compressed clusters (whole
    /// clusters only, as QEMU's qcow2 driver takes them).
    Compressed(u8),
    /// `-z`, with `-u` to allow unmapping.
    Zeroes {
        unmap: bool,
    },
}
