//! The server: an accept thread, two threads per connection (`conn`), and
//! the caller's thread running the export on one single-threaded executor
//! (a `futures` `LocalPool`), so an export's futures need not be `Send`:
//! the engine is `!Send` and single-threaded by design. Requests from
//! every connection meet in one channel; each runs as a task of its own,
//! so requests are carried out concurrently and answered in the order
//! they complete, not the order they came.
//!
//! Stopping ([`ShutdownHandle::shutdown`], e.g. from a signal handler's
//! thread): no request is started after it; those already started run to
//! the end and their replies are sent; then [`Server::run`] returns the
//! export for the caller to close. A request of a client that went away
//! still completes: what the export acknowledged as flushed stays flushed.

use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::{unbounded, UnboundedReceiver, UnboundedSender};
use futures::executor::LocalPool;
use futures::task::LocalSpawnExt;
use futures::StreamExt;

pub use crate::conn::Limits;
use crate::conn::{self, Job, Msg, Outgoing};
use crate::export::{Export, ExportInfo};
use crate::reply;
use crate::request::Command;
use crate::socket::Listener;

/// Most extents in one block status reply: a client asking about a huge
/// fragmented range gets the first part and asks again.
pub const MAX_EXTENTS: usize = 1024;

/// Where the server reports what happens to connections (one line each).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// Stops a running server, from any thread.
#[derive(Clone)]
pub struct ShutdownHandle {
    tx: UnboundedSender<Msg>,
}

impl ShutdownHandle {
    pub fn shutdown(&self) {
        let _ = self.tx.unbounded_send(Msg::Shutdown);
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot start the accept thread: {0}")]
    Thread(std::io::Error),
    #[error("listening socket: {0}")]
    Listener(std::io::Error),
}

/// A server bound to its listener, not yet serving.
pub struct Server {
    listener: Listener,
    limits: Limits,
    log: Log,
    tx: UnboundedSender<Msg>,
    rx: UnboundedReceiver<Msg>,
}

impl Server {
    pub fn new(listener: Listener, limits: Limits, log: Log) -> Server {
        let (tx, rx) = unbounded();
        Server {
            listener,
            limits,
            log,
            tx,
            rx,
        }
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            tx: self.tx.clone(),
        }
    }

    /// Serve `export` until shut down; returns it once every request
    /// started has been answered and the listener is closed. The export
    /// comes back whatever happened, so that the caller can close it.
    pub fn run<E: Export + 'static>(self, export: E) -> (E, Result<(), ServeError>) {
        let Server {
            listener,
            limits,
            log,
            tx,
            mut rx,
        } = self;
        let info = Arc::new(export.info());
        let stop = Arc::new(AtomicBool::new(false));
        // Accepting polls, so that it notices the stop without a wake-up
        // connection; 20 ms is nothing next to a client's connect.
        if let Err(e) = listener.set_nonblocking(true) {
            return (export, Err(ServeError::Listener(e)));
        }
        let acceptor = {
            let (stop, info, limits, log) =
                (stop.clone(), info.clone(), limits.clone(), log.clone());
            std::thread::Builder::new()
                .name("nbd-accept".into())
                .spawn(move || accept_loop(listener, &info, &limits, &log, tx, &stop))
        };
        let acceptor = match acceptor {
            Ok(a) => a,
            Err(e) => return (export, Err(ServeError::Thread(e))),
        };

        let export = Rc::new(export);
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        let dispatch = {
            let export = export.clone();
            async move {
                while let Some(msg) = rx.next().await {
                    match msg {
                        Msg::Job(job) => {
                            let export = export.clone();
                            if spawner.spawn_local(handle(export, job)).is_err() {
                                break;
                            }
                        }
                        Msg::Shutdown => break,
                    }
                }
                // `rx` is dropped here: readers still sending learn the
                // server is going and close their connections.
            }
        };
        pool.run_until(dispatch);
        stop.store(true, Ordering::SeqCst);
        // Every request started finishes before the export is handed back.
        pool.run();
        let _ = acceptor.join();
        drop(pool);
        let export = Rc::try_unwrap(export)
            .unwrap_or_else(|_| unreachable!("every task holding the export has finished"));
        (export, Ok(()))
    }
}

fn accept_loop(
    listener: Listener,
    info: &Arc<ExportInfo>,
    limits: &Limits,
    log: &Log,
    tx: UnboundedSender<Msg>,
    stop: &AtomicBool,
) {
    let active = Arc::new(AtomicUsize::new(0));
    let mut serial = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let stream = match listener.accept() {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        serial += 1;
        let n = serial;
        if active.load(Ordering::SeqCst) >= limits.max_connections {
            log(&format!(
                "connection {n}: refused, {} connections already open",
                limits.max_connections
            ));
            stream.shutdown();
            continue;
        }
        active.fetch_add(1, Ordering::SeqCst);
        let (info, limits, clog, tx, cactive) = (
            info.clone(),
            limits.clone(),
            log.clone(),
            tx.clone(),
            active.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name(format!("nbd-conn-{n}"))
            .spawn(move || {
                clog(&format!("connection {n}: opened"));
                let why = conn::run(stream, &info, &limits, tx);
                clog(&format!("connection {n}: closed: {why}"));
                cactive.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            active.fetch_sub(1, Ordering::SeqCst);
            log(&format!("connection {n}: cannot start its thread: {e}"));
        }
    }
    // Dropping the listener removes a Unix socket's file.
}

/// Carry out one request and queue its reply.
async fn handle<E: Export>(export: Rc<E>, job: Job) {
    let Job {
        cmd,
        cookie,
        structured,
        payload,
        replies,
        ticket,
    } = job;
    let fail =
        |e: crate::export::ExportError| reply::error(cookie, structured, e.errno(), &e.to_string());
    let ok = |r: crate::export::ExportResult<()>| match r {
        Ok(()) => reply::done(cookie, structured),
        Err(e) => fail(e),
    };
    let bytes = match cmd {
        Command::Read { offset, len } => {
            let (mut buf, at) = reply::read_buffer(cookie, structured, offset, len);
            if len == 0 {
                buf
            } else {
                match export.read(offset, &mut buf[at..]).await {
                    Ok(()) => buf,
                    Err(e) => fail(e),
                }
            }
        }
        Command::Write { offset, len, fua } => {
            if len == 0 {
                ok(Ok(()))
            } else {
                ok(export.write(offset, &payload, fua).await)
            }
        }
        Command::Flush => ok(export.flush().await),
        Command::Trim { offset, len, fua } => {
            if len == 0 {
                ok(Ok(()))
            } else {
                ok(export.trim(offset, u64::from(len), fua).await)
            }
        }
        Command::WriteZeroes { offset, len, how } => {
            if len == 0 {
                ok(Ok(()))
            } else {
                ok(export.write_zeroes(offset, u64::from(len), how).await)
            }
        }
        Command::BlockStatus {
            offset,
            len,
            req_one,
            context,
        } => match extents(&*export, offset, len, req_one).await {
            Ok(ex) => reply::block_status(cookie, context, &ex),
            Err(e) => fail(e),
        },
        Command::Disconnect => unreachable!("the reader handles a disconnect"),
    };
    drop(payload);
    // A connection that is gone has no use for the reply.
    let _ = replies.send(Outgoing { bytes, ticket });
}

/// The extents of `len` bytes from `offset`, adjacent ones of the same
/// state merged; one with `req_one`, at most [`MAX_EXTENTS`].
async fn extents<E: Export>(
    export: &E,
    offset: u64,
    len: u32,
    req_one: bool,
) -> crate::export::ExportResult<Vec<(u32, u32)>> {
    let end = offset + u64::from(len);
    let mut pos = offset;
    let mut out: Vec<(u32, u32)> = Vec::new();
    while pos < end && out.len() < MAX_EXTENTS {
        let e = export.block_status(pos, end - pos).await?;
        if e.len == 0 {
            return Err(crate::export::ExportError::Io(format!(
                "block status at {pos} answered an empty extent"
            )));
        }
        // The export may not answer past what was asked.
        let n = e.len.min(end - pos) as u32;
        let flags = e.flags();
        match out.last_mut() {
            Some(last) if last.1 == flags => last.0 += n,
            _ => out.push((n, flags)),
        }
        pos += u64::from(n);
        if req_one {
            break;
        }
    }
    Ok(out)
}
