//! Transmission requests: the 28-byte header decoded, and checked against
//! the export and the session into a [`Command`] or a [`Rejected`] (the
//! error value and why) before anything is read past the header but a
//! write's data, so the export only sees requests it can carry out.

use crate::export::{ExportInfo, ZeroRequest, MAX_PAYLOAD};
use crate::handshake::Session;
use crate::wire::*;

/// Bytes of a request header.
pub const HEADER_LEN: usize = 28;

/// A request header as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

/// A header that is not one: the stream cannot be trusted any more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("request without the request magic (got {0:#010x})")]
pub struct BadMagic(pub u32);

impl Header {
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, BadMagic> {
        let magic = u32::from_be_bytes(b[0..4].try_into().expect("4 bytes"));
        if magic != REQUEST_MAGIC {
            return Err(BadMagic(magic));
        }
        Ok(Header {
            flags: u16::from_be_bytes([b[4], b[5]]),
            kind: u16::from_be_bytes([b[6], b[7]]),
            cookie: u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(b[16..24].try_into().expect("8 bytes")),
            len: u32::from_be_bytes(b[24..28].try_into().expect("4 bytes")),
        })
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Bytes of data that follow the header on the wire: a write's.
    pub fn payload_len(&self) -> u32 {
        if self.kind == CMD_WRITE {
            self.len
        } else {
            0
        }
    }
}

/// A request the export can carry out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read {
        offset: u64,
        len: u32,
    },
    Write {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        len: u32,
        how: ZeroRequest,
    },
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
        context: u32,
    },
    Disconnect,
}

/// A request refused before it reaches the export.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason} ({})", command_name(*.kind), .errno.name())]
pub struct Rejected {
    pub kind: u16,
    pub errno: Errno,
    pub reason: String,
}

/// Check `h` against the export and the session.
pub fn validate(h: &Header, info: &ExportInfo, session: &Session) -> Result<Command, Rejected> {
    let reject = |errno, reason: String| {
        Err(Rejected {
            kind: h.kind,
            errno,
            reason,
        })
    };
    let allowed = match h.kind {
        CMD_READ => CMD_FLAG_DF,
        CMD_WRITE_ZEROES => CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
        CMD_WRITE | CMD_TRIM | CMD_FLUSH | CMD_DISC => 0,
        _ => return reject(Errno::Inval, "command not supported".into()),
    };
    // FUA is the one flag valid on every command, but only once the
    // export has advertised it (SEND_FUA, with SEND_FLUSH): then the
    // protocol has the server accept it anywhere, ignoring it where
    // nothing is written (clients are known to send it on reads and
    // flushes), and otherwise answer EINVAL like any flag not allowed.
    if h.flags & CMD_FLAG_FUA != 0 && !info.flush {
        return reject(Errno::Inval, "FUA was not advertised".into());
    }
    if h.flags & !(allowed | CMD_FLAG_FUA) != 0 {
        return reject(Errno::Inval, format!("flags {:#x} not valid here", h.flags));
    }
    if h.flags & CMD_FLAG_DF != 0 && !session.structured {
        return reject(Errno::Inval, "DF needs structured replies".into());
    }
    let fua = h.flags & CMD_FLAG_FUA != 0;
    let writes = matches!(h.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && info.read_only {
        return reject(Errno::Perm, "the export is read-only".into());
    }
    if matches!(h.kind, CMD_READ | CMD_WRITE) && h.len > MAX_PAYLOAD {
        return reject(
            Errno::Inval,
            format!(
                "length {} exceeds the maximum block size {MAX_PAYLOAD}",
                h.len
            ),
        );
    }
    if !matches!(h.kind, CMD_FLUSH | CMD_DISC)
        && h.offset
            .checked_add(u64::from(h.len))
            .is_none_or(|end| end > info.size)
    {
        // Past the end: a write-like request runs out of space, the others
        // ask for what is not there.
        let errno = if matches!(h.kind, CMD_WRITE | CMD_WRITE_ZEROES) {
            Errno::NoSpc
        } else {
            Errno::Inval
        };
        return reject(
            errno,
            format!(
                "offset {} length {} is past the end of the {}-byte export",
                h.offset, h.len, info.size
            ),
        );
    }
    let (offset, len) = (h.offset, h.len);
    Ok(match h.kind {
        CMD_READ => Command::Read { offset, len },
        CMD_WRITE => Command::Write { offset, len, fua },
        CMD_FLUSH => Command::Flush,
        CMD_TRIM => {
            if !info.trim {
                return reject(Errno::Inval, "trim not supported".into());
            }
            Command::Trim { offset, len, fua }
        }
        CMD_WRITE_ZEROES => {
            if !info.write_zeroes {
                return reject(Errno::Inval, "write zeroes not supported".into());
            }
            let fast = h.flags & CMD_FLAG_FAST_ZERO != 0;
            if fast && !info.fast_zero {
                return reject(Errno::Inval, "fast zero not advertised".into());
            }
            Command::WriteZeroes {
                offset,
                len,
                how: ZeroRequest {
                    no_hole: h.flags & CMD_FLAG_NO_HOLE != 0,
                    fast,
                    fua,
                },
            }
        }
        CMD_BLOCK_STATUS => {
            let Some(context) = session.base_allocation else {
                return reject(Errno::Inval, "no meta context was negotiated".into());
            };
            if len == 0 {
                return reject(Errno::Inval, "length 0".into());
            }
            Command::BlockStatus {
                offset,
                len,
                req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
                context,
            }
        }
        CMD_DISC => Command::Disconnect,
        _ => unreachable!("unknown commands were rejected above"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ExportInfo {
        ExportInfo {
            size: 1 << 20,
            read_only: false,
            trim: true,
            write_zeroes: true,
            fast_zero: true,
            flush: true,
            multi_conn: true,
            min_block: 1,
            preferred_block: 4096,
            description: String::new(),
        }
    }

    fn h(kind: u16, flags: u16, offset: u64, len: u32) -> Header {
        Header {
            flags,
            kind,
            cookie: 7,
            offset,
            len,
        }
    }

    const FULL: Session = Session {
        structured: true,
        base_allocation: Some(1),
    };

    #[test]
    fn header_round_trips_and_garbage_is_bad_magic() {
        let x = h(CMD_WRITE, CMD_FLAG_FUA, 4096, 512);
        assert_eq!(Header::decode(&x.encode()), Ok(x));
        assert_eq!(x.payload_len(), 512);
        assert_eq!(h(CMD_READ, 0, 0, 512).payload_len(), 0);
        let mut junk = [0x41u8; HEADER_LEN];
        junk[0] = 0x47;
        assert_eq!(Header::decode(&junk), Err(BadMagic(0x47414141)));
    }

    #[test]
    fn valid_requests_become_commands() {
        let i = info();
        assert_eq!(
            validate(
                &h(
                    CMD_WRITE_ZEROES,
                    CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
                    0,
                    1 << 20
                ),
                &i,
                &FULL
            ),
            Ok(Command::WriteZeroes {
                offset: 0,
                len: 1 << 20,
                how: ZeroRequest {
                    no_hole: true,
                    fast: true,
                    fua: false
                }
            })
        );
        assert_eq!(
            validate(&h(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 512, 512), &i, &FULL),
            Ok(Command::BlockStatus {
                offset: 512,
                len: 512,
                req_one: true,
                context: 1
            })
        );
        assert_eq!(
            validate(&h(CMD_FLUSH, 0, 0, 0), &i, &FULL),
            Ok(Command::Flush)
        );
    }

    #[test]
    fn bad_requests_are_rejected_with_the_right_error() {
        let i = info();
        let errno = |r: Header, s: &Session| validate(&r, &i, s).unwrap_err().errno;
        assert_eq!(errno(h(CMD_READ, 0, (1 << 20) - 1, 2), &FULL), Errno::Inval);
        assert_eq!(errno(h(CMD_WRITE, 0, 1 << 20, 1), &FULL), Errno::NoSpc);
        assert_eq!(errno(h(CMD_READ, 0, u64::MAX, 1), &FULL), Errno::Inval);
        assert_eq!(
            errno(h(CMD_READ, 0, 0, MAX_PAYLOAD + 1), &FULL),
            Errno::Inval
        );
        assert_eq!(
            errno(h(CMD_READ, CMD_FLAG_NO_HOLE, 0, 1), &FULL),
            Errno::Inval
        );
        assert_eq!(errno(h(CMD_CACHE, 0, 0, 1), &FULL), Errno::Inval);
        assert_eq!(errno(h(77, 0, 0, 1), &FULL), Errno::Inval);
        assert_eq!(
            errno(h(CMD_BLOCK_STATUS, 0, 0, 1), &Session::default()),
            Errno::Inval
        );
        assert_eq!(errno(h(CMD_BLOCK_STATUS, 0, 0, 0), &FULL), Errno::Inval);
        assert_eq!(
            errno(h(CMD_READ, CMD_FLAG_DF, 0, 1), &Session::default()),
            Errno::Inval
        );
        let ro = ExportInfo {
            read_only: true,
            ..info()
        };
        let r = validate(&h(CMD_TRIM, 0, 0, 512), &ro, &FULL).unwrap_err();
        assert_eq!(r.errno, Errno::Perm);
        assert_eq!(r.to_string(), "trim: the export is read-only (EPERM)");
    }

    /// FUA: carried on the three write-like commands; accepted and ignored
    /// on the others once advertised; refused with EINVAL on every command
    /// of an export that did not advertise it; and no way past the
    /// read-only check.
    #[test]
    fn fua_is_valid_everywhere_once_advertised() {
        let i = info();
        let ok = |kind, len| validate(&h(kind, CMD_FLAG_FUA, 0, len), &i, &FULL);
        assert_eq!(
            ok(CMD_WRITE, 512),
            Ok(Command::Write {
                offset: 0,
                len: 512,
                fua: true
            })
        );
        assert_eq!(
            ok(CMD_TRIM, 4096),
            Ok(Command::Trim {
                offset: 0,
                len: 4096,
                fua: true
            })
        );
        assert!(matches!(
            ok(CMD_WRITE_ZEROES, 4096),
            Ok(Command::WriteZeroes {
                how: ZeroRequest { fua: true, .. },
                ..
            })
        ));
        assert_eq!(
            ok(CMD_READ, 512),
            Ok(Command::Read {
                offset: 0,
                len: 512
            })
        );
        assert_eq!(ok(CMD_FLUSH, 0), Ok(Command::Flush));
        assert!(matches!(
            ok(CMD_BLOCK_STATUS, 512),
            Ok(Command::BlockStatus { .. })
        ));
        assert_eq!(ok(CMD_DISC, 0), Ok(Command::Disconnect));

        let no_fua = ExportInfo {
            flush: false,
            ..info()
        };
        assert_eq!(no_fua.transmission_flags() & FLAG_SEND_FUA, 0);
        for kind in [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES, CMD_FLUSH] {
            let r = validate(&h(kind, CMD_FLAG_FUA, 0, 512), &no_fua, &FULL).unwrap_err();
            assert_eq!(r.errno, Errno::Inval, "{r}");
            assert!(r.reason.contains("FUA was not advertised"), "{r}");
        }
        assert!(validate(&h(CMD_WRITE, 0, 0, 512), &no_fua, &FULL).is_ok());

        let ro = ExportInfo {
            read_only: true,
            ..info()
        };
        assert_ne!(ro.transmission_flags() & FLAG_SEND_FUA, 0);
        for kind in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
            let r = validate(&h(kind, CMD_FLAG_FUA, 0, 512), &ro, &FULL).unwrap_err();
            assert_eq!(r.errno, Errno::Perm, "{r}");
        }
        assert!(validate(&h(CMD_READ, CMD_FLAG_FUA, 0, 512), &ro, &FULL).is_ok());
    }
}
