//! One client connection, on two threads of its own: the reader runs the
//! handshake, then reads requests, checks them (`request::validate`),
//! reads a write's data and hands each request to the executor thread;
//! the writer sends replies in the order they complete. Requests in
//! flight are bounded per connection, in number and in bytes
//! ([`Budget`]): a request's ticket is given back only once its reply is
//! written, so a client that sends without reading stops being read
//! instead of growing the server's memory.

use std::io::{self, BufWriter, Read, Write};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;

use crate::export::ExportInfo;
use crate::handshake::{self, Session};
use crate::reply;
use crate::request::{self, Command, Header, HEADER_LEN};
use crate::socket::Stream;
use crate::wire::CMD_WRITE;

/// Bounds on what clients may hold of the server.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; more are closed on arrival.
    pub max_connections: usize,
    /// Requests in flight per connection.
    pub max_in_flight: usize,
    /// Bytes of reads and writes in flight per connection (a single
    /// request of up to the maximum block size is always let through).
    pub max_in_flight_bytes: u64,
    /// How long a client may take over each step of the handshake.
    pub handshake_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16,
            max_in_flight: 64,
            max_in_flight_bytes: 64 << 20,
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

/// What a connection hands the export's executor, or the server's stop.
pub(crate) enum Msg {
    Job(Job),
    Shutdown,
}

/// A request handed to the executor: what to do, and where its reply goes.
pub(crate) struct Job {
    pub cmd: Command,
    pub cookie: u64,
    pub structured: bool,
    /// A write's data.
    pub payload: Vec<u8>,
    pub replies: mpsc::Sender<Outgoing>,
    pub ticket: Ticket,
}

/// A reply for the writer, with the ticket it gives back once written.
pub(crate) struct Outgoing {
    pub bytes: Vec<u8>,
    pub ticket: Ticket,
}

/// Requests and bytes in flight on one connection.
pub(crate) struct Budget {
    state: Mutex<(usize, u64)>,
    freed: Condvar,
    max_requests: usize,
    max_bytes: u64,
}

/// One request's share of its connection's [`Budget`], given back when
/// dropped: after its reply is written, or when it is dropped unanswered
/// (the server stopping).
pub(crate) struct Ticket {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Budget {
    fn new(limits: &Limits) -> Arc<Budget> {
        Arc::new(Budget {
            state: Mutex::new((0, 0)),
            freed: Condvar::new(),
            max_requests: limits.max_in_flight.max(1),
            max_bytes: limits.max_in_flight_bytes,
        })
    }

    /// Wait until a request of `bytes` fits (one always fits alone).
    fn acquire(self: &Arc<Budget>, bytes: u64) -> Ticket {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 > 0 && (s.0 >= self.max_requests || s.1 + bytes > self.max_bytes) {
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s.0 += 1;
        s.1 += bytes;
        Ticket {
            budget: Arc::clone(self),
            bytes,
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut s = self.budget.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 -= 1;
        s.1 -= self.bytes;
        self.budget.freed.notify_all();
    }
}

/// Serve one connection until it ends; the reason it ended, for the log.
pub(crate) fn run(
    mut stream: Stream,
    info: &ExportInfo,
    limits: &Limits,
    jobs: UnboundedSender<Msg>,
) -> String {
    // A peer that stalls in the handshake must not hold a thread forever.
    if let Err(e) = stream.set_timeouts(Some(limits.handshake_timeout)) {
        return format!("setting up: {e}");
    }
    let session = match handshake::negotiate(&mut stream, info) {
        Ok(s) => s,
        Err(e) => {
            stream.shutdown();
            return format!("handshake: {e}");
        }
    };
    if let Err(e) = stream.set_timeouts(None) {
        stream.shutdown();
        return format!("setting up: {e}");
    }
    let writer_stream = match stream.try_clone() {
        Ok(s) => s,
        Err(e) => {
            stream.shutdown();
            return format!("setting up: {e}");
        }
    };
    let (replies, outgoing) = mpsc::channel::<Outgoing>();
    let writer = std::thread::Builder::new()
        .name("nbd-writer".into())
        .spawn(move || write_replies(writer_stream, outgoing));
    let writer = match writer {
        Ok(w) => w,
        Err(e) => {
            stream.shutdown();
            return format!("starting its writer: {e}");
        }
    };
    let budget = Budget::new(limits);
    let why = read_requests(&mut stream, info, &session, &budget, &replies, &jobs);
    // The writer ends once every reply still owed is written (each job
    // holds a sender), then closes the connection.
    drop(replies);
    let _ = writer.join();
    stream.shutdown();
    why
}

fn read_requests(
    stream: &mut Stream,
    info: &ExportInfo,
    session: &Session,
    budget: &Arc<Budget>,
    replies: &mpsc::Sender<Outgoing>,
    jobs: &UnboundedSender<Msg>,
) -> String {
    loop {
        let mut raw = [0u8; HEADER_LEN];
        if let Err(e) = stream.read_exact(&mut raw) {
            return match e.kind() {
                io::ErrorKind::UnexpectedEof => "client closed the connection".into(),
                _ => format!("reading a request: {e}"),
            };
        }
        let header = match Header::decode(&raw) {
            Ok(h) => h,
            Err(e) => return format!("{e}; closing"),
        };
        let command = request::validate(&header, info, session);
        if let Ok(Command::Disconnect) = command {
            return "client disconnected".into();
        }
        let cost = match command {
            Ok(Command::Read { len, .. } | Command::Write { len, .. }) => u64::from(len),
            _ => 0,
        };
        let ticket = budget.acquire(cost);
        match command {
            Ok(cmd) => {
                let mut payload = Vec::new();
                if header.kind == CMD_WRITE {
                    payload.resize(header.len as usize, 0);
                    if let Err(e) = stream.read_exact(&mut payload) {
                        return format!("reading the data of a write: {e}");
                    }
                }
                let job = Job {
                    cmd,
                    cookie: header.cookie,
                    structured: session.structured,
                    payload,
                    replies: replies.clone(),
                    ticket,
                };
                if jobs.unbounded_send(Msg::Job(job)).is_err() {
                    return "the server is shutting down".into();
                }
            }
            Err(rejected) => {
                let bytes = reply::error(
                    header.cookie,
                    session.structured,
                    rejected.errno,
                    &rejected.to_string(),
                );
                let _ = replies.send(Outgoing { bytes, ticket });
                let data = header.payload_len();
                if data > crate::export::MAX_PAYLOAD {
                    // Reading that much only to throw it away would let a
                    // client keep the server busy; the protocol lets it
                    // close instead.
                    return format!("{rejected}; closing");
                }
                if data > 0 {
                    let skipped =
                        io::copy(&mut (&mut *stream).take(u64::from(data)), &mut io::sink());
                    if !matches!(skipped, Ok(n) if n == u64::from(data)) {
                        return "the connection ended inside a write's data".into();
                    }
                }
            }
        }
    }
}

/// Send replies as they come; once the client stops reading (an error),
/// keep taking them so that their tickets are given back.
fn write_replies(stream: Stream, outgoing: mpsc::Receiver<Outgoing>) {
    let closer = stream.try_clone();
    let mut out = BufWriter::with_capacity(256 << 10, stream);
    let mut broken = false;
    while let Ok(first) = outgoing.recv() {
        let mut next = Some(first);
        while let Some(Outgoing { bytes, ticket }) = next {
            if !broken && out.write_all(&bytes).is_err() {
                broken = true;
            }
            // Written (or never to be): its share of the budget is free.
            drop(ticket);
            next = outgoing.try_recv().ok();
        }
        if !broken && out.flush().is_err() {
            broken = true;
        }
        if broken {
            // Unblock the reader, which may be waiting for the client.
            if let Ok(c) = &closer {
                c.shutdown();
            }
        }
    }
    let _ = out.flush();
}
