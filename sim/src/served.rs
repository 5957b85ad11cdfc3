//! A simulated disk served from outside the simulation: requests come one
//! at a time from a caller that is not a simulated task (the NBD server's
//! thread under `qcsim serve --sim`), and the caller drives the simulation
//! only as far as the request it waits for.
//!
//! The executor reports a hang when tasks wait and no timer is pending, and
//! its budgets count over the simulation's whole life; a served disk never
//! runs the executor while it is idle ([`ServedDisk::wait`] runs it only
//! until the request asked for completes, and every disk request completes
//! on a timer), and it gives the simulation budgets no session reaches.
//!
//! The simulation is a pure function of the sequence of submissions and
//! waits (the seed, the options and the initial content fixed): the order
//! requests arrive from a socket depends on real time, so that sequence is
//! what [`reqlog`] records, and replaying it rebuilds the same disk, bit for
//! bit, down to every pending write and so every crash state.

pub mod reqlog;

use std::collections::BTreeMap;
use std::io::Write;

use engine::dev::{BlockDev, DevError, WriteFlags, ZeroFlags};

use crate::disk::{DiskOptions, OptionsError, SimDisk, SparseStore};
use crate::exec::{ExecError, ExecOptions, JoinHandle, Nanos, SchedulePolicy, Sim};

/// Largest payload of one request (a write's data, a read's length).
pub const MAX_REQUEST: u64 = 32 << 20;

/// One request to the disk, as a client sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiskRequest {
    Read {
        offset: u64,
        len: u64,
    },
    Write {
        offset: u64,
        data: Vec<u8>,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        len: u64,
        flags: ZeroFlags,
    },
    Discard {
        offset: u64,
        len: u64,
    },
    Flush,
}

/// A submitted request's number, in submission order from 0.
pub type Ticket = u64;

/// What a completed request returns: a read's bytes (empty for the rest).
pub type Reply = Result<Vec<u8>, DevError>;

/// Why serving a request failed (not the disk's answer, which is a
/// [`Reply`]).
#[derive(Debug, thiserror::Error)]
pub enum ServedError {
    #[error("request #{0} was never submitted or was already answered")]
    UnknownTicket(Ticket),
    #[error("{what} of {len} bytes is larger than the {MAX_REQUEST} bytes a request may carry")]
    TooLarge { what: &'static str, len: u64 },
    #[error("the simulation stopped: {0}")]
    Exec(#[from] ExecError),
    #[error("writing the request log: {0}")]
    Log(std::io::Error),
}

/// Budgets no session reaches: a poll costs far more than a nanosecond of
/// real time, so `u64::MAX / 4` polls or simulated nanoseconds (146 years)
/// are never spent, and the sums near them cannot overflow.
fn unbounded() -> ExecOptions {
    ExecOptions {
        steps_max: u64::MAX / 4,
        time_max: Nanos::MAX / 4,
        policy: SchedulePolicy::Random,
    }
}

/// A simulated disk and its simulation, driven request by request.
pub struct ServedDisk {
    sim: Sim,
    disk: SimDisk,
    next: Ticket,
    running: BTreeMap<Ticket, JoinHandle<Reply>>,
    log: Option<reqlog::Writer>,
}

impl ServedDisk {
    /// A disk of simulation `seed` holding `content`, all durable.
    pub fn new(
        seed: u64,
        options: DiskOptions,
        content: SparseStore,
    ) -> Result<Self, OptionsError> {
        let sim = Sim::with_options(seed, unbounded());
        let disk = SimDisk::with_content(&sim, options, content)?;
        Ok(ServedDisk {
            sim,
            disk,
            next: 0,
            running: BTreeMap::new(),
            log: None,
        })
    }

    pub fn disk(&self) -> &SimDisk {
        &self.disk
    }

    pub fn sim(&self) -> &Sim {
        &self.sim
    }

    /// Requests submitted and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }

    /// Record every submission and wait from now on into `out`, after a
    /// header with the seed, the options and the disk's content now. Call
    /// it before the first request: a log must hold everything from the
    /// content it starts from.
    pub fn record(&mut self, out: Box<dyn Write>) -> Result<(), ServedError> {
        let w = reqlog::Writer::start(
            out,
            self.sim.seed(),
            self.disk.options(),
            &self.disk.volatile(),
        )
        .map_err(ServedError::Log)?;
        self.log = Some(w);
        Ok(())
    }

    /// Write the log's end marker and flush it (a log without one was cut
    /// short: the server was killed).
    pub fn finish_log(&mut self) -> Result<(), ServedError> {
        match self.log.take() {
            Some(w) => w.finish().map_err(ServedError::Log),
            None => Ok(()),
        }
    }

    /// Flush what the log holds so far to its file (e.g. when the client
    /// flushes: the log is as durable as the data it describes).
    pub fn flush_log(&mut self) -> Result<(), ServedError> {
        match &mut self.log {
            Some(w) => w.flush().map_err(ServedError::Log),
            None => Ok(()),
        }
    }

    /// Issue `req` to the disk: it starts at the current simulated time,
    /// with every other request submitted since the last wait.
    pub fn submit(&mut self, req: DiskRequest) -> Result<Ticket, ServedError> {
        match &req {
            DiskRequest::Read { len, .. } if *len > MAX_REQUEST => {
                return Err(ServedError::TooLarge {
                    what: "a read",
                    len: *len,
                })
            }
            DiskRequest::Write { data, .. } if data.len() as u64 > MAX_REQUEST => {
                return Err(ServedError::TooLarge {
                    what: "a write",
                    len: data.len() as u64,
                })
            }
            _ => {}
        }
        let ticket = self.next;
        if let Some(w) = &mut self.log {
            w.submit(ticket, &req).map_err(ServedError::Log)?;
        }
        self.next += 1;
        let d = self.disk.clone();
        let name = format!("request #{ticket} {}", req.kind());
        let handle = self.sim.spawn_named(name, async move {
            match req {
                DiskRequest::Read { offset, len } => {
                    let mut buf = vec![0u8; len as usize];
                    d.read(offset, &mut buf).await.map(|()| buf)
                }
                DiskRequest::Write { offset, data, fua } => d
                    .write(offset, &data, WriteFlags { fua })
                    .await
                    .map(|()| Vec::new()),
                DiskRequest::WriteZeroes { offset, len, flags } => d
                    .write_zeroes(offset, len, flags)
                    .await
                    .map(|()| Vec::new()),
                DiskRequest::Discard { offset, len } => {
                    d.discard(offset, len).await.map(|()| Vec::new())
                }
                DiskRequest::Flush => d.flush().await.map(|()| Vec::new()),
            }
        });
        self.running.insert(ticket, handle);
        Ok(ticket)
    }

    /// The answer to request `ticket`, running the simulation (and with
    /// it every request in flight) until that request completes.
    pub fn wait(&mut self, ticket: Ticket) -> Result<Reply, ServedError> {
        let handle = self
            .running
            .remove(&ticket)
            .ok_or(ServedError::UnknownTicket(ticket))?;
        if let Some(w) = &mut self.log {
            w.wait(ticket).map_err(ServedError::Log)?;
        }
        if !handle.is_finished() {
            self.sim.run_until(|| handle.is_finished())?;
        }
        Ok(handle
            .take()
            .expect("the request ran to completion and its answer is taken once"))
    }
}

impl DiskRequest {
    /// Its kind, as task names and errors show it.
    pub fn kind(&self) -> &'static str {
        match self {
            DiskRequest::Read { .. } => "read",
            DiskRequest::Write { .. } => "write",
            DiskRequest::WriteZeroes { .. } => "write_zeroes",
            DiskRequest::Discard { .. } => "discard",
            DiskRequest::Flush => "flush",
        }
    }
}
