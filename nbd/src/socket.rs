//! Where the server listens and what a connection is: a Unix socket path
//! or a TCP address, behind one [`Listener`] and one [`Stream`] so the
//! rest of the server does not care which. A Unix socket's file is
//! created by [`Listener::unix`] (refusing a path that exists, so a
//! running server's socket is never taken over) and removed when the
//! listener is dropped.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the server could not listen.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{0}: already exists (remove it if no server is using it)")]
    Exists(PathBuf),
    #[error("{path}: cannot listen: {error}")]
    Unix { path: PathBuf, error: io::Error },
    #[error("{addr}: cannot listen: {error}")]
    Tcp { addr: String, error: io::Error },
}

/// A listening socket.
#[derive(Debug)]
pub enum Listener {
    Unix {
        listener: UnixListener,
        path: PathBuf,
    },
    Tcp(TcpListener),
}

impl Listener {
    pub fn unix(path: &Path) -> Result<Listener, ListenError> {
        if path.symlink_metadata().is_ok() {
            return Err(ListenError::Exists(path.to_owned()));
        }
        let listener = UnixListener::bind(path).map_err(|error| ListenError::Unix {
            path: path.to_owned(),
            error,
        })?;
        Ok(Listener::Unix {
            listener,
            path: path.to_owned(),
        })
    }

    pub fn tcp(addr: &str) -> Result<Listener, ListenError> {
        TcpListener::bind(addr)
            .map(Listener::Tcp)
            .map_err(|error| ListenError::Tcp {
                addr: addr.to_owned(),
                error,
            })
    }

    /// Where clients connect, for messages: the socket path, or the bound
    /// address (with the port the system chose for port 0).
    pub fn describe(&self) -> String {
        match self {
            Listener::Unix { path, .. } => format!("unix socket {}", path.display()),
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("tcp {a}"),
                Err(_) => "tcp".into(),
            },
        }
    }

    /// The bound TCP address, if this is TCP.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix { .. } => None,
        }
    }

    pub(crate) fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Listener::Unix { listener, .. } => listener.set_nonblocking(on),
            Listener::Tcp(l) => l.set_nonblocking(on),
        }
    }

    /// The next connection, blocking as the listener is set to.
    pub(crate) fn accept(&self) -> io::Result<Stream> {
        let s = match self {
            Listener::Unix { listener, .. } => Stream::Unix(listener.accept()?.0),
            Listener::Tcp(l) => {
                let s = l.accept()?.0;
                // Replies are whole messages written at once: send them now.
                s.set_nodelay(true)?;
                Stream::Tcp(s)
            }
        };
        // A listener polled without blocking must not hand its mode on.
        s.set_nonblocking(false)?;
        Ok(s)
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix { path, .. } = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// One client connection.
#[derive(Debug)]
pub enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    pub fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
        })
    }

    pub fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Stream::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_nonblocking(on),
            Stream::Tcp(s) => s.set_nonblocking(on),
        }
    }

    /// Close both directions (the other clones of the connection too).
    pub fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}
