//! The qemu-io command set on an image: the command parser
//! ([`parse_command`]: `read`, `readv`, `write`, `writev`, `aio_read`,
//! `aio_write`, `aio_flush`, `discard`, `alloc`, `map`, `length`, `info`,
//! `flush`, `open`, `close`, `reopen`, `truncate`, `abort`, `sigraise`,
//! `quit`, with qemu-io's flags and its messages for bad arguments) and its
//! executor, a [`Session`] holding one open of the image (and its locks)
//! across commands. A command's output follows qemu-io's: "wrote N/N bytes
//! at offset M", then, when the session is built [`Session::with_timing`],
//! the size, operation count and timing line (off by default, so that runs
//! are reproducible); "Pattern verification failed at offset N, N bytes";
//! `read -v` hex dumps. A failing command prints its failure as qemu-io
//! does and reports it as a [`CmdFailure`], and the session goes on.
//! Commands that change which image is open (`open`, `close`, `reopen`)
//! or end the process (`quit`, `abort`, `sigraise`) are parsed here and
//! carried out by the caller, which owns the session.
//!
//! The modules, bottom up: `cmd` the commands as values, `format`
//! qemu-io's text for sizes, times, dumps and errnos, `scan` the words of
//! a command (flags, numbers, patterns, [`CmdError`]), `parse` the parser,
//! `exec` what executing any command shares ([`CmdFailure`], the report
//! lines), `request` the I/O requests (read, write, discard, flush),
//! `query` the questions (alloc, map, length, info), `session` the
//! [`Session`] that dispatches to them.

mod cmd;
mod exec;
mod format;
mod parse;
mod query;
mod request;
mod scan;
mod session;

pub use cmd::{Cmd, PatternCheck, ReadCmd, Report, WriteCmd, WriteData, MAX_REQUEST};
pub use exec::CmdFailure;
pub use format::{cvtstr, errno_text, hexdump, timestr};
pub use parse::parse_command;
pub use scan::{parse_pattern, CmdError};
pub use session::{Executed, Session, SessionError};
