//! The NBD protocol's server side, for exporting a byte range to QEMU,
//! the Linux kernel's client or anything else that speaks NBD, and a
//! simple client.
//!
//! - `wire`: the protocol's numbers;
//! - `handshake`: the fixed newstyle handshake, options parsed with
//!   limits;
//! - `request`: transmission requests decoded and checked against the
//!   export;
//! - `reply`: simple and structured replies encoded;
//! - `export`: the [`Export`] trait the server serves;
//! - `socket`: Unix and TCP listeners and connections;
//! - `conn`, `server`: the threads and the single-threaded executor that
//!   run an export for many connections at once;
//! - `client`: a simple client (GO, one request at a time, simple
//!   replies), for driving a server as a guest would.
//!
//! The protocol is described by `doc/proto.md` of the NetworkBlockDevice
//! project; this is written from that description.

pub mod client;
mod codec;
mod conn;
pub mod export;
pub mod handshake;
pub mod reply;
pub mod request;
pub mod server;
pub mod socket;
pub mod wire;

pub use client::{Client, ClientError, Negotiated};
pub use export::{Export, ExportError, ExportInfo, ExportResult, Extent, ZeroRequest, MAX_PAYLOAD};
pub use server::{Limits, Log, ServeError, Server, ShutdownHandle};
pub use socket::{ListenError, Listener, Stream};
