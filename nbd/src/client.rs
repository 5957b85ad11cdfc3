//! A simple NBD client: the fixed newstyle handshake with NBD_OPT_GO for
//! the default export, then one request at a time with simple replies
//! (read, write with FUA, flush, trim, write zeroes, or any command with
//! any flags), over any stream. For
//! a harness that drives a server (`qemu-nbd`) as a guest would; not a
//! general client: no structured replies, no TLS, no block status.

use std::io::{Read, Write};

use crate::wire;

/// Longest string or option reply the client reads.
const MAX_OPTION_REPLY: u32 = 64 << 10;

/// Largest request the client sends or read reply it accepts.
pub const MAX_CLIENT_REQUEST: u32 = 32 << 20;

/// Why talking to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("handshake: {0}")]
    Handshake(String),
    #[error("{command} at {offset} (+{len}): the server answered error {errno}")]
    Server {
        command: &'static str,
        offset: u64,
        len: u64,
        errno: u32,
    },
    #[error("{command} at {offset} (+{len}): {reason}")]
    Refused {
        command: &'static str,
        offset: u64,
        len: u64,
        reason: String,
    },
    #[error("a reply that does not belong: {0}")]
    Protocol(String),
}

/// What the server said about its export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub size: u64,
    pub flags: u16,
}

impl Negotiated {
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// A connection in transmission.
pub struct Client<S> {
    stream: S,
    export: Negotiated,
    next_cookie: u64,
}

fn read_u16(s: &mut impl Read) -> std::io::Result<u16> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(s: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(s: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

impl<S: Read + Write> Client<S> {
    /// Handshake on `stream` and enter transmission on the default export.
    pub fn connect(mut stream: S) -> Result<Client<S>, ClientError> {
        let bad = |m: String| ClientError::Handshake(m);
        if read_u64(&mut stream)? != wire::NBDMAGIC {
            return Err(bad("no NBDMAGIC: not an NBD server".into()));
        }
        if read_u64(&mut stream)? != wire::IHAVEOPT {
            return Err(bad("not a newstyle server".into()));
        }
        let hflags = read_u16(&mut stream)?;
        if hflags & wire::FLAG_FIXED_NEWSTYLE == 0 {
            return Err(bad("the server is not fixed newstyle".into()));
        }
        let mut cflags = wire::FLAG_C_FIXED_NEWSTYLE;
        if hflags & wire::FLAG_NO_ZEROES != 0 {
            cflags |= wire::FLAG_C_NO_ZEROES;
        }
        stream.write_all(&cflags.to_be_bytes())?;
        // NBD_OPT_GO: the default (empty) name, no information asked for.
        let mut m = wire::IHAVEOPT.to_be_bytes().to_vec();
        m.extend(wire::OPT_GO.to_be_bytes());
        m.extend(6u32.to_be_bytes());
        m.extend(0u32.to_be_bytes());
        m.extend(0u16.to_be_bytes());
        stream.write_all(&m)?;
        stream.flush()?;
        let mut export = None;
        loop {
            if read_u64(&mut stream)? != wire::OPTION_REPLY_MAGIC {
                return Err(bad("an option reply without its magic".into()));
            }
            let option = read_u32(&mut stream)?;
            let kind = read_u32(&mut stream)?;
            let len = read_u32(&mut stream)?;
            if option != wire::OPT_GO {
                return Err(bad(format!("a reply to option {option}, not to GO")));
            }
            if len > MAX_OPTION_REPLY {
                return Err(bad(format!("an option reply of {len} bytes")));
            }
            let mut data = vec![0u8; len as usize];
            stream.read_exact(&mut data)?;
            match kind {
                wire::REP_INFO => {
                    if data.len() >= 12 && data[..2] == wire::INFO_EXPORT.to_be_bytes() {
                        export = Some(Negotiated {
                            size: u64::from_be_bytes(data[2..10].try_into().expect("8 bytes")),
                            flags: u16::from_be_bytes([data[10], data[11]]),
                        });
                    }
                }
                wire::REP_ACK => break,
                k if k & (1 << 31) != 0 => {
                    return Err(bad(format!(
                        "the server refused GO (reply {k:#x}): {}",
                        String::from_utf8_lossy(&data)
                    )))
                }
                k => return Err(bad(format!("unknown reply {k} to GO"))),
            }
        }
        let export = export.ok_or_else(|| bad("GO acknowledged without NBD_INFO_EXPORT".into()))?;
        Ok(Client {
            stream,
            export,
            next_cookie: 1,
        })
    }

    pub fn export(&self) -> Negotiated {
        self.export
    }

    fn send(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        len: u64,
        data: &[u8],
    ) -> Result<u64, ClientError> {
        let name = wire::command_name(command);
        let refused = |reason: String| ClientError::Refused {
            command: name,
            offset,
            len,
            reason,
        };
        let len32 = u32::try_from(len).map_err(|_| refused("longer than 32 bits".into()))?;
        if matches!(command, wire::CMD_READ | wire::CMD_WRITE) && len32 > MAX_CLIENT_REQUEST {
            return Err(refused(format!("more than {MAX_CLIENT_REQUEST} bytes")));
        }
        if offset.checked_add(len).is_none_or(|e| e > self.export.size) {
            return Err(refused(format!(
                "past the export's end ({} bytes)",
                self.export.size
            )));
        }
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let mut m = Vec::with_capacity(28 + data.len());
        m.extend(wire::REQUEST_MAGIC.to_be_bytes());
        m.extend(flags.to_be_bytes());
        m.extend(command.to_be_bytes());
        m.extend(cookie.to_be_bytes());
        m.extend(offset.to_be_bytes());
        m.extend(len32.to_be_bytes());
        m.extend_from_slice(data);
        self.stream.write_all(&m)?;
        self.stream.flush()?;
        Ok(cookie)
    }

    /// The simple reply to `cookie`; its error as a [`ClientError`].
    fn reply(
        &mut self,
        cookie: u64,
        command: u16,
        offset: u64,
        len: u64,
    ) -> Result<(), ClientError> {
        if read_u32(&mut self.stream)? != wire::SIMPLE_REPLY_MAGIC {
            return Err(ClientError::Protocol("not a simple reply".into()));
        }
        let errno = read_u32(&mut self.stream)?;
        let got = read_u64(&mut self.stream)?;
        if got != cookie {
            return Err(ClientError::Protocol(format!(
                "the reply to cookie {got} where {cookie} was asked"
            )));
        }
        if errno != 0 {
            return Err(ClientError::Server {
                command: wire::command_name(command),
                offset,
                len,
                errno,
            });
        }
        Ok(())
    }

    fn simple(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        len: u64,
        data: &[u8],
    ) -> Result<(), ClientError> {
        let cookie = self.send(command, flags, offset, len, data)?;
        self.reply(cookie, command, offset, len)
    }

    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), ClientError> {
        let len = buf.len() as u64;
        let cookie = self.send(wire::CMD_READ, 0, offset, len, &[])?;
        self.reply(cookie, wire::CMD_READ, offset, len)?;
        self.stream.read_exact(buf)?;
        Ok(())
    }

    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), ClientError> {
        let flags = if fua { wire::CMD_FLAG_FUA } else { 0 };
        self.simple(wire::CMD_WRITE, flags, offset, data.len() as u64, data)
    }

    pub fn flush(&mut self) -> Result<(), ClientError> {
        self.simple(wire::CMD_FLUSH, 0, 0, 0, &[])
    }

    pub fn trim(&mut self, offset: u64, len: u64) -> Result<(), ClientError> {
        self.trim_flagged(offset, len, false)
    }

    /// A trim, flagged FUA when `fua` (only where the export advertises
    /// NBD_FLAG_SEND_FUA).
    pub fn trim_flagged(&mut self, offset: u64, len: u64, fua: bool) -> Result<(), ClientError> {
        let flags = if fua { wire::CMD_FLAG_FUA } else { 0 };
        self.simple(wire::CMD_TRIM, flags, offset, len, &[])
    }

    /// Write zeroes; with `no_hole` the range stays allocated.
    pub fn write_zeroes(
        &mut self,
        offset: u64,
        len: u64,
        no_hole: bool,
    ) -> Result<(), ClientError> {
        self.write_zeroes_flagged(offset, len, no_hole, false)
    }

    /// [`Client::write_zeroes`], flagged FUA when `fua`.
    pub fn write_zeroes_flagged(
        &mut self,
        offset: u64,
        len: u64,
        no_hole: bool,
        fua: bool,
    ) -> Result<(), ClientError> {
        let mut flags = if no_hole { wire::CMD_FLAG_NO_HOLE } else { 0 };
        if fua {
            flags |= wire::CMD_FLAG_FUA;
        }
        self.simple(wire::CMD_WRITE_ZEROES, flags, offset, len, &[])
    }

    /// Any command with any command flags, sent as given: for peers that
    /// test a server's checks (a flag where the protocol does not allow
    /// it, a write to a read-only export) or send what the methods above
    /// do not (FUA on a trim or a write zeroes). A write's data is `data`
    /// (`len` must be its length); a read's data comes back; the other
    /// commands carry and return none. The server's refusal is
    /// [`ClientError::Server`] and leaves the connection usable.
    pub fn request(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        len: u64,
        data: &[u8],
    ) -> Result<Vec<u8>, ClientError> {
        let carries = if command == wire::CMD_WRITE { len } else { 0 };
        if command == wire::CMD_DISC || data.len() as u64 != carries {
            return Err(ClientError::Refused {
                command: wire::command_name(command),
                offset,
                len,
                reason: if command == wire::CMD_DISC {
                    "a disconnect has no reply: use disconnect".into()
                } else {
                    format!(
                        "{} bytes of data where the command carries {carries}",
                        data.len()
                    )
                },
            });
        }
        let cookie = self.send(command, flags, offset, len, data)?;
        self.reply(cookie, command, offset, len)?;
        let mut back = Vec::new();
        if command == wire::CMD_READ {
            back.resize(len as usize, 0);
            self.stream.read_exact(&mut back)?;
        }
        Ok(back)
    }

    /// Say goodbye (NBD_CMD_DISC has no reply) and hand the stream back.
    pub fn disconnect(mut self) -> Result<S, ClientError> {
        self.send(wire::CMD_DISC, 0, 0, 0, &[])?;
        Ok(self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A stream whose reads come from a script and whose writes are kept.
    struct Scripted {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Scripted {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn greeting(size: u64, flags: u16) -> Vec<u8> {
        let mut s = wire::NBDMAGIC.to_be_bytes().to_vec();
        s.extend(wire::IHAVEOPT.to_be_bytes());
        s.extend((wire::FLAG_FIXED_NEWSTYLE | wire::FLAG_NO_ZEROES).to_be_bytes());
        for (kind, data) in [
            (wire::REP_INFO, {
                let mut d = wire::INFO_EXPORT.to_be_bytes().to_vec();
                d.extend(size.to_be_bytes());
                d.extend(flags.to_be_bytes());
                d
            }),
            (wire::REP_ACK, Vec::new()),
        ] {
            s.extend(wire::OPTION_REPLY_MAGIC.to_be_bytes());
            s.extend(wire::OPT_GO.to_be_bytes());
            s.extend(kind.to_be_bytes());
            s.extend((data.len() as u32).to_be_bytes());
            s.extend(data);
        }
        s
    }

    fn simple_reply(errno: u32, cookie: u64) -> Vec<u8> {
        let mut s = wire::SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
        s.extend(errno.to_be_bytes());
        s.extend(cookie.to_be_bytes());
        s
    }

    /// A client connected to a 1 MiB export that takes flushes and FUA,
    /// whose server then answers `after` (replies and read data).
    fn connected(after: &[&[u8]]) -> Client<Scripted> {
        let flags = wire::FLAG_HAS_FLAGS | wire::FLAG_SEND_FLUSH | wire::FLAG_SEND_FUA;
        let mut script = greeting(1 << 20, flags);
        script.extend(after.concat());
        let stream = Scripted {
            input: Cursor::new(script),
            output: Vec::new(),
        };
        Client::connect(stream).unwrap()
    }

    /// GO, a write with FUA, a read, and a flush the server fails: the
    /// requests on the wire as the protocol has them, the error named.
    #[test]
    fn requests_and_replies() {
        let mut c = connected(&[
            &simple_reply(0, 1),
            &simple_reply(0, 2),
            &[7u8; 512],
            &simple_reply(5, 3),
        ]);
        assert_eq!(c.export().size, 1 << 20);
        assert!(c.export().has(wire::FLAG_SEND_FUA));
        let sent_handshake = c.stream.output.len();
        c.write(4096, &[1; 512], true).unwrap();
        let w = &c.stream.output[sent_handshake..];
        assert_eq!(&w[..4], &wire::REQUEST_MAGIC.to_be_bytes());
        assert_eq!(&w[4..6], &wire::CMD_FLAG_FUA.to_be_bytes());
        assert_eq!(&w[6..8], &wire::CMD_WRITE.to_be_bytes());
        assert_eq!(&w[16..24], &4096u64.to_be_bytes());
        assert_eq!(w.len(), 28 + 512);
        let mut buf = [0u8; 512];
        c.read(0, &mut buf).unwrap();
        assert_eq!(buf, [7; 512]);
        let e = c.flush().unwrap_err().to_string();
        assert!(e.contains("error 5"), "{e}");
        // Past the end: refused before anything is sent.
        let before = c.stream.output.len();
        assert!(c.trim((1 << 20) - 512, 1024).is_err());
        assert_eq!(c.stream.output.len(), before);
    }

    /// `request` sends the flags as given and reads a read's data only
    /// when the server did not refuse it; a refusal is the server's error
    /// and the next request goes on.
    #[test]
    fn any_request_with_any_flags() {
        let mut c = connected(&[
            &simple_reply(22, 1),
            &simple_reply(0, 2),
            &[9u8; 16],
            &simple_reply(0, 3),
        ]);
        let start = c.stream.output.len();
        let refused = c.request(wire::CMD_READ, wire::CMD_FLAG_NO_HOLE, 0, 16, &[]);
        assert!(
            matches!(refused, Err(ClientError::Server { errno: 22, .. })),
            "{refused:?}"
        );
        assert_eq!(
            c.request(wire::CMD_READ, wire::CMD_FLAG_FUA, 0, 16, &[])
                .unwrap(),
            [9u8; 16]
        );
        assert!(c
            .request(wire::CMD_TRIM, wire::CMD_FLAG_FUA, 4096, 4096, &[])
            .unwrap()
            .is_empty());
        let sent = &c.stream.output[start..];
        assert_eq!(sent.len(), 3 * 28);
        assert_eq!(&sent[4..6], &wire::CMD_FLAG_NO_HOLE.to_be_bytes());
        assert_eq!(&sent[28 + 4..28 + 6], &wire::CMD_FLAG_FUA.to_be_bytes());
        assert_eq!(&sent[56 + 6..56 + 8], &wire::CMD_TRIM.to_be_bytes());
        // Data that does not fit the command, and a disconnect: refused
        // before anything is sent.
        assert!(c.request(wire::CMD_WRITE, 0, 0, 512, &[1; 100]).is_err());
        assert!(c.request(wire::CMD_READ, 0, 0, 4, &[1; 4]).is_err());
        assert!(c.request(wire::CMD_DISC, 0, 0, 0, &[]).is_err());
        assert_eq!(c.stream.output.len(), start + 3 * 28);
    }

    #[test]
    fn a_server_that_is_not_one_is_refused() {
        let stream = Scripted {
            input: Cursor::new(b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec()),
            output: Vec::new(),
        };
        let e = Client::connect(stream).err().unwrap().to_string();
        assert!(e.contains("not an NBD server"), "{e}");
    }
}
