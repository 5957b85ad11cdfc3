//! Standard output for every command, and what happens when it fails.
//!
//! Every byte a command prints goes through [`Stdout`]: the crate's
//! `print!` and `println!` (defined in `main.rs`, they shadow std's, which
//! panic when the write fails) and the writers handed to code that prints
//! (`qcsim io`'s commands). The first failed write is recorded and every
//! later write fails at once without touching the file, so a command whose
//! reader went away (`qcsim dump IMG | head -1`) finishes its work quietly
//! (closes its image, writes its report file) instead of panicking, and
//! `main` ([`exit_code`]) then exits as a program killed by `SIGPIPE` is
//! reported by a shell: status 141 (128 + 13), with no message. Any other
//! write error (a full disk behind a redirection) is reported on standard
//! error and the command exits 1.
//!
//! The process keeps the Rust runtime's disposition of `SIGPIPE` (ignored):
//! a write to a closed pipe or socket is an `EPIPE` error, never a signal,
//! so sockets need no `MSG_NOSIGNAL`.

use std::fmt;
use std::io::{self, Write};
use std::sync::Mutex;

/// The first error a write to standard output met, if any.
static FAILED: Mutex<Option<io::ErrorKind>> = Mutex::new(None);

fn failed() -> Option<io::ErrorKind> {
    *FAILED.lock().unwrap_or_else(|e| e.into_inner())
}

fn record(e: &io::Error) {
    let mut failed = FAILED.lock().unwrap_or_else(|e| e.into_inner());
    if failed.is_some() {
        return;
    }
    *failed = Some(e.kind());
    // A closed pipe is the reader's choice and goes unsaid; another error
    // is said once, here (the command's own error, if it reports one, is a
    // consequence and is not printed).
    if e.kind() != io::ErrorKind::BrokenPipe {
        eprintln!("qcsim: writing standard output: {e}");
    }
}

/// Standard output, locked while this value lives (so that what one
/// command writes is not interleaved with another thread's). Write errors
/// are recorded for [`exit_code`]; after the first, writes fail without
/// being tried.
pub struct Stdout {
    inner: io::StdoutLock<'static>,
}

/// [`Stdout`], locked.
pub fn stdout() -> Stdout {
    Stdout {
        inner: io::stdout().lock(),
    }
}

impl Stdout {
    fn attempt<T>(
        &mut self,
        f: impl FnOnce(&mut io::StdoutLock<'static>) -> io::Result<T>,
    ) -> io::Result<T> {
        if let Some(kind) = failed() {
            return Err(kind.into());
        }
        f(&mut self.inner).inspect_err(record)
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.attempt(|o| o.write(buf))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.attempt(|o| o.write_all(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.attempt(|o| o.flush())
    }
}

/// What `print!` and `println!` call. A failure is recorded, not returned:
/// the command goes on and [`exit_code`] reports it.
pub fn print_fmt(args: fmt::Arguments<'_>) {
    let _ = stdout().write_fmt(args);
}

/// The process's exit status: `code` when standard output took everything
/// the command printed (flushed here), 141 when its reader had gone (the
/// status of a program killed by `SIGPIPE`), 1 on another write error.
pub fn exit_code(code: i32) -> i32 {
    let _ = stdout().flush();
    match failed() {
        None => code,
        Some(io::ErrorKind::BrokenPipe) => 141,
        Some(_) => 1,
    }
}

/// Whether standard output has failed (a command's error is then taken to
/// come from it, and not printed).
pub fn has_failed() -> bool {
    failed().is_some()
}
