//! The server's side of the fixed newstyle handshake: the greeting, the
//! client's flags, then options until the client enters transmission
//! (NBD_OPT_GO or NBD_OPT_EXPORT_NAME) or leaves. Answered: GO and INFO
//! (export size and flags, name, description, block sizes), EXPORT_NAME,
//! LIST, STRUCTURED_REPLY, LIST_META_CONTEXT and SET_META_CONTEXT (only
//! `base:allocation`), ABORT; everything else (STARTTLS, extended headers,
//! unknown options) is refused with NBD_REP_ERR_UNSUP, as the protocol
//! lets a server without them.
//!
//! Only the default export (the empty name) exists. An option's data is
//! read whole only up to [`MAX_OPTION_LEN`] and at most [`MAX_OPTIONS`]
//! options are answered per connection: past either the connection is
//! closed (the protocol allows it against a client that looks like a
//! denial of service), so a peer cannot make the server allocate or loop
//! without bound.

use std::io::{self, Read, Write};

use crate::codec::{Put, Take};
use crate::export::ExportInfo;
use crate::wire::*;

/// Longest option data read (a meta context query list of several names
/// of the protocol's longest string fits).
pub const MAX_OPTION_LEN: u32 = 64 << 10;

/// Most options answered on one connection before it is closed.
pub const MAX_OPTIONS: usize = 256;

/// Most meta context queries in one option.
pub const MAX_QUERIES: u32 = 128;

/// The context id given to `base:allocation`.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// What the handshake agreed for the transmission phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Session {
    /// Structured replies were negotiated.
    pub structured: bool,
    /// `base:allocation` was selected: block status is answered with this
    /// context id.
    pub base_allocation: Option<u32>,
}

/// Why the handshake ended without a session.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    #[error("client flags {0:#x} carry bits this server does not know")]
    ClientFlags(u32),
    #[error("option without the IHAVEOPT magic (got {0:#018x})")]
    OptionMagic(u64),
    #[error("option {option} has {len} bytes of data, more than the {MAX_OPTION_LEN} allowed")]
    OptionTooLong { option: u32, len: u32 },
    #[error("more than {MAX_OPTIONS} options on one connection")]
    TooManyOptions,
    #[error("the client asked for export '{0}' with NBD_OPT_EXPORT_NAME; only the default export (empty name) exists")]
    UnknownExport(String),
    #[error("the client aborted the handshake")]
    Aborted,
}

/// Run the handshake on `stream`; `Ok` means transmission starts.
pub fn negotiate<S: Read + Write>(
    stream: &mut S,
    info: &ExportInfo,
) -> Result<Session, HandshakeError> {
    let mut greeting = Vec::with_capacity(18);
    greeting.put_u64(NBDMAGIC);
    greeting.put_u64(IHAVEOPT);
    greeting.put_u16(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    stream.write_all(&greeting)?;
    stream.flush()?;

    let client = read_u32(stream)?;
    if client & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(HandshakeError::ClientFlags(client));
    }
    let no_zeroes = client & FLAG_C_NO_ZEROES != 0;
    let mut haggle = Haggle {
        info,
        session: Session::default(),
    };
    for _ in 0..MAX_OPTIONS {
        let magic = read_u64(stream)?;
        if magic != IHAVEOPT {
            return Err(HandshakeError::OptionMagic(magic));
        }
        let option = read_u32(stream)?;
        let len = read_u32(stream)?;
        if len > MAX_OPTION_LEN {
            return Err(HandshakeError::OptionTooLong { option, len });
        }
        let mut data = vec![0u8; len as usize];
        stream.read_exact(&mut data)?;
        match haggle.answer(stream, option, &data, no_zeroes)? {
            Next::More => {}
            Next::Transmission => {
                stream.flush()?;
                return Ok(haggle.session);
            }
        }
        stream.flush()?;
    }
    Err(HandshakeError::TooManyOptions)
}

enum Next {
    More,
    Transmission,
}

struct Haggle<'a> {
    info: &'a ExportInfo,
    session: Session,
}

impl Haggle<'_> {
    fn answer<S: Read + Write>(
        &mut self,
        s: &mut S,
        option: u32,
        data: &[u8],
        no_zeroes: bool,
    ) -> Result<Next, HandshakeError> {
        match option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(data).into_owned();
                if !name.is_empty() {
                    return Err(HandshakeError::UnknownExport(name));
                }
                let mut reply = Vec::with_capacity(134);
                reply.put_u64(self.info.size);
                reply.put_u16(self.info.transmission_flags());
                if !no_zeroes {
                    reply.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&reply)?;
                Ok(Next::Transmission)
            }
            OPT_ABORT => {
                // The client drops the connection after the ACK; if it
                // already has, there is nobody to tell.
                let _ = reply(s, option, REP_ACK, &[]);
                let _ = s.flush();
                Err(HandshakeError::Aborted)
            }
            OPT_LIST => {
                if !data.is_empty() {
                    return refuse(s, option, REP_ERR_INVALID, "NBD_OPT_LIST takes no data");
                }
                let mut server = Vec::new();
                server.put_u32(0);
                reply(s, option, REP_SERVER, &server)?;
                reply(s, option, REP_ACK, &[])?;
                Ok(Next::More)
            }
            OPT_STRUCTURED_REPLY => {
                if !data.is_empty() {
                    return refuse(
                        s,
                        option,
                        REP_ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                }
                self.session.structured = true;
                reply(s, option, REP_ACK, &[])?;
                Ok(Next::More)
            }
            OPT_INFO | OPT_GO => self.info_or_go(s, option, data),
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => self.meta_context(s, option, data),
            OPT_STARTTLS => refuse(s, option, REP_ERR_UNSUP, "TLS is not supported"),
            _ => refuse(s, option, REP_ERR_UNSUP, "option not supported"),
        }
    }

    fn info_or_go<S: Write>(
        &mut self,
        s: &mut S,
        option: u32,
        data: &[u8],
    ) -> Result<Next, HandshakeError> {
        let Some((name, wanted)) = parse_info_request(data) else {
            return refuse(s, option, REP_ERR_INVALID, "malformed NBD_OPT_INFO/GO data");
        };
        if !name.is_empty() {
            return refuse(
                s,
                option,
                REP_ERR_UNKNOWN,
                "only the default export (empty name) exists",
            );
        }
        let mut export = Vec::new();
        export.put_u16(INFO_EXPORT);
        export.put_u64(self.info.size);
        export.put_u16(self.info.transmission_flags());
        reply(s, option, REP_INFO, &export)?;
        if wanted.contains(&INFO_NAME) {
            let mut n = Vec::new();
            n.put_u16(INFO_NAME);
            reply(s, option, REP_INFO, &n)?;
        }
        if wanted.contains(&INFO_DESCRIPTION) {
            let mut d = Vec::new();
            d.put_u16(INFO_DESCRIPTION);
            d.extend_from_slice(truncated(&self.info.description).as_bytes());
            reply(s, option, REP_INFO, &d)?;
        }
        // Block sizes go out whether asked or not: the maximum is what
        // keeps a client's requests under the server's payload limit.
        let (min, pref, max) = self.info.block_sizes();
        let mut b = Vec::new();
        b.put_u16(INFO_BLOCK_SIZE);
        b.put_u32(min);
        b.put_u32(pref);
        b.put_u32(max);
        reply(s, option, REP_INFO, &b)?;
        reply(s, option, REP_ACK, &[])?;
        Ok(if option == OPT_GO {
            Next::Transmission
        } else {
            Next::More
        })
    }

    fn meta_context<S: Write>(
        &mut self,
        s: &mut S,
        option: u32,
        data: &[u8],
    ) -> Result<Next, HandshakeError> {
        let set = option == OPT_SET_META_CONTEXT;
        if set && !self.session.structured {
            return refuse(
                s,
                option,
                REP_ERR_INVALID,
                "meta contexts need structured replies first",
            );
        }
        let Some((name, queries)) = parse_meta_request(data) else {
            return refuse(s, option, REP_ERR_INVALID, "malformed meta context data");
        };
        if !name.is_empty() {
            return refuse(
                s,
                option,
                REP_ERR_UNKNOWN,
                "only the default export (empty name) exists",
            );
        }
        // LIST with no queries lists every context; `base:` names all of
        // the namespace's, which is one. SET selects exact names only.
        let matches = |q: &[u8]| q == BASE_ALLOCATION.as_bytes() || (!set && q == b"base:");
        let selected = if queries.is_empty() {
            !set
        } else {
            queries.iter().any(|q| matches(q))
        };
        if set {
            self.session.base_allocation = selected.then_some(BASE_ALLOCATION_ID);
        }
        if selected {
            let mut ctx = Vec::new();
            ctx.put_u32(BASE_ALLOCATION_ID);
            ctx.extend_from_slice(BASE_ALLOCATION.as_bytes());
            reply(s, option, REP_META_CONTEXT, &ctx)?;
        }
        reply(s, option, REP_ACK, &[])?;
        Ok(Next::More)
    }
}

/// NBD_OPT_INFO/GO data: the export name and the information types
/// asked; `None` if the lengths do not add up.
fn parse_info_request(data: &[u8]) -> Option<(&[u8], Vec<u16>)> {
    let mut t = Take::new(data);
    let len = t.u32()? as usize;
    if len > MAX_STRING {
        return None;
    }
    let name = t.bytes(len)?;
    let n = t.u16()?;
    let mut wanted = Vec::with_capacity(usize::from(n).min(data.len() / 2));
    for _ in 0..n {
        wanted.push(t.u16()?);
    }
    t.is_empty().then_some((name, wanted))
}

/// Meta context option data: the export name and the queries.
fn parse_meta_request(data: &[u8]) -> Option<(&[u8], Vec<&[u8]>)> {
    let mut t = Take::new(data);
    let len = t.u32()? as usize;
    if len > MAX_STRING {
        return None;
    }
    let name = t.bytes(len)?;
    let n = t.u32()?;
    if n > MAX_QUERIES {
        return None;
    }
    let mut queries = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let qlen = t.u32()? as usize;
        if qlen > MAX_STRING {
            return None;
        }
        queries.push(t.bytes(qlen)?);
    }
    t.is_empty().then_some((name, queries))
}

/// `s` cut to the protocol's longest string, at a character boundary.
pub(crate) fn truncated(s: &str) -> &str {
    if s.len() <= MAX_STRING {
        return s;
    }
    let mut end = MAX_STRING;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn reply<S: Write>(s: &mut S, option: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut r = Vec::with_capacity(20 + data.len());
    r.put_u64(OPTION_REPLY_MAGIC);
    r.put_u32(option);
    r.put_u32(kind);
    r.put_u32(data.len() as u32);
    r.extend_from_slice(data);
    s.write_all(&r)
}

/// An error reply with a message for a human; haggling goes on.
fn refuse<S: Write>(
    s: &mut S,
    option: u32,
    kind: u32,
    message: &str,
) -> Result<Next, HandshakeError> {
    reply(s, option, kind, message.as_bytes())?;
    Ok(Next::More)
}

fn read_u32<R: Read>(r: &mut R) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64<R: Read>(r: &mut R) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted peer: reads come from `input`, writes collect.
    struct Peer {
        input: io::Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Peer {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Peer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

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
            preferred_block: 65536,
            description: "test".into(),
        }
    }

    fn option(out: &mut Vec<u8>, opt: u32, data: &[u8]) {
        out.put_u64(IHAVEOPT);
        out.put_u32(opt);
        out.put_u32(data.len() as u32);
        out.extend_from_slice(data);
    }

    fn run(client: Vec<u8>) -> (Result<Session, HandshakeError>, Vec<u8>) {
        let mut peer = Peer {
            input: io::Cursor::new(client),
            output: Vec::new(),
        };
        let r = negotiate(&mut peer, &info());
        (r, peer.output)
    }

    /// The option replies after the 18-byte greeting, as (option, type, data).
    fn replies(out: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
        let mut t = Take::new(&out[18..]);
        let mut v = Vec::new();
        while !t.is_empty() {
            assert_eq!(t.u64(), Some(OPTION_REPLY_MAGIC));
            let opt = t.u32().unwrap();
            let kind = t.u32().unwrap();
            let len = t.u32().unwrap() as usize;
            v.push((opt, kind, t.bytes(len).unwrap().to_vec()));
        }
        v
    }

    fn meta(queries: &[&str]) -> Vec<u8> {
        let mut d = Vec::new();
        d.put_u32(0);
        d.put_u32(queries.len() as u32);
        for q in queries {
            d.put_u32(q.len() as u32);
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    #[test]
    fn go_with_structured_replies_and_base_allocation() {
        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES);
        option(&mut c, OPT_STRUCTURED_REPLY, &[]);
        option(
            &mut c,
            OPT_SET_META_CONTEXT,
            &meta(&["base:allocation", "qemu:nothing"]),
        );
        let mut go = Vec::new();
        go.put_u32(0);
        go.put_u16(1);
        go.put_u16(INFO_BLOCK_SIZE);
        option(&mut c, OPT_GO, &go);
        let (r, out) = run(c);
        let s = r.unwrap();
        assert!(s.structured);
        assert_eq!(s.base_allocation, Some(BASE_ALLOCATION_ID));
        assert_eq!(&out[..8], &NBDMAGIC.to_be_bytes());
        let rs = replies(&out);
        let kinds: Vec<u32> = rs.iter().map(|r| r.1).collect();
        assert_eq!(
            kinds,
            [
                REP_ACK,
                REP_META_CONTEXT,
                REP_ACK,
                REP_INFO,
                REP_INFO,
                REP_ACK
            ]
        );
        assert_eq!(&rs[1].2[4..], BASE_ALLOCATION.as_bytes());
        let mut export = Take::new(&rs[3].2);
        assert_eq!(export.u16(), Some(INFO_EXPORT));
        assert_eq!(export.u64(), Some(1 << 20));
        let flags = export.u16().unwrap();
        assert_ne!(flags & FLAG_SEND_FUA, 0);
        assert_eq!(flags & FLAG_READ_ONLY, 0);
        let mut bs = Take::new(&rs[4].2);
        assert_eq!(bs.u16(), Some(INFO_BLOCK_SIZE));
        assert_eq!(
            (bs.u32(), bs.u32(), bs.u32()),
            (Some(1), Some(65536), Some(32 << 20))
        );
    }

    #[test]
    fn meta_context_needs_structured_replies_and_bad_options_are_refused() {
        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        option(&mut c, OPT_SET_META_CONTEXT, &meta(&["base:allocation"]));
        option(&mut c, OPT_STARTTLS, &[]);
        option(&mut c, 999, b"xyz");
        option(&mut c, OPT_GO, &[0, 0, 0, 9]); // name longer than the data
        let mut go = Vec::new();
        go.put_u32(3);
        go.extend_from_slice(b"foo");
        go.put_u16(0);
        option(&mut c, OPT_GO, &go);
        let (r, out) = run(c);
        // The script ends without entering transmission: the peer hung up.
        assert!(matches!(r, Err(HandshakeError::Io(_))), "{r:?}");
        let kinds: Vec<u32> = replies(&out).iter().map(|r| r.1).collect();
        assert_eq!(
            kinds,
            [
                REP_ERR_INVALID,
                REP_ERR_UNSUP,
                REP_ERR_UNSUP,
                REP_ERR_INVALID,
                REP_ERR_UNKNOWN
            ]
        );
    }

    #[test]
    fn export_name_enters_transmission_with_the_zeroes() {
        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        option(&mut c, OPT_EXPORT_NAME, b"");
        let (r, out) = run(c);
        assert_eq!(r.unwrap(), Session::default());
        assert_eq!(out.len(), 18 + 8 + 2 + 124);

        let mut c = Vec::new();
        c.put_u32(0);
        option(&mut c, OPT_EXPORT_NAME, b"other");
        assert!(matches!(run(c).0, Err(HandshakeError::UnknownExport(n)) if n == "other"));
    }

    #[test]
    fn hostile_peers_end_the_handshake_without_allocating() {
        let mut c = Vec::new();
        c.put_u32(1 << 7);
        assert!(matches!(run(c).0, Err(HandshakeError::ClientFlags(0x80))));

        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        c.put_u64(IHAVEOPT);
        c.put_u32(OPT_GO);
        c.put_u32(u32::MAX);
        assert!(matches!(
            run(c).0,
            Err(HandshakeError::OptionTooLong { len: u32::MAX, .. })
        ));

        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        c.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert!(matches!(run(c).0, Err(HandshakeError::OptionMagic(_))));

        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        for _ in 0..=MAX_OPTIONS {
            option(&mut c, OPT_LIST, &[]);
        }
        assert!(matches!(run(c).0, Err(HandshakeError::TooManyOptions)));

        // A count of queries far beyond the data is malformed, not a huge
        // allocation.
        let mut d = Vec::new();
        d.put_u32(0);
        d.put_u32(u32::MAX);
        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        option(&mut c, OPT_LIST_META_CONTEXT, &d);
        let (_, out) = run(c);
        assert_eq!(replies(&out)[0].1, REP_ERR_INVALID);
    }

    #[test]
    fn list_meta_context_lists_base_allocation() {
        let mut c = Vec::new();
        c.put_u32(FLAG_C_FIXED_NEWSTYLE);
        option(&mut c, OPT_LIST_META_CONTEXT, &meta(&[]));
        option(&mut c, OPT_LIST_META_CONTEXT, &meta(&["base:"]));
        option(
            &mut c,
            OPT_LIST_META_CONTEXT,
            &meta(&["qemu:dirty-bitmap:x"]),
        );
        let (_, out) = run(c);
        let kinds: Vec<u32> = replies(&out).iter().map(|r| r.1).collect();
        assert_eq!(
            kinds,
            [
                REP_META_CONTEXT,
                REP_ACK,
                REP_META_CONTEXT,
                REP_ACK,
                REP_ACK
            ]
        );
    }
}
