//! Reply encoding: simple replies, or structured reply chunks when the
//! session negotiated them (a read's data as one OFFSET_DATA chunk, an
//! error as an ERROR chunk with its message, block status as one
//! BLOCK_STATUS chunk, success of anything else as NONE), each complete
//! message in one buffer for the connection's writer.

use crate::codec::Put;
use crate::handshake::truncated;
use crate::wire::*;

fn structured_header(out: &mut Vec<u8>, flags: u16, kind: u16, cookie: u64, len: u32) {
    out.put_u32(STRUCTURED_REPLY_MAGIC);
    out.put_u16(flags);
    out.put_u16(kind);
    out.put_u64(cookie);
    out.put_u32(len);
}

fn simple(cookie: u64, error: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    out.put_u32(SIMPLE_REPLY_MAGIC);
    out.put_u32(error);
    out.put_u64(cookie);
    out
}

/// Success of a request that returns no data.
pub fn done(cookie: u64, structured: bool) -> Vec<u8> {
    if !structured {
        return simple(cookie, 0);
    }
    let mut out = Vec::with_capacity(20);
    structured_header(&mut out, REPLY_FLAG_DONE, REPLY_TYPE_NONE, cookie, 0);
    out
}

/// A failed request: the error value, and, in a structured reply, why.
pub fn error(cookie: u64, structured: bool, errno: Errno, message: &str) -> Vec<u8> {
    if !structured {
        return simple(cookie, errno.code());
    }
    let message = truncated(message);
    let mut out = Vec::with_capacity(26 + message.len());
    structured_header(
        &mut out,
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        6 + message.len() as u32,
    );
    out.put_u32(errno.code());
    out.put_u16(message.len() as u16);
    out.extend_from_slice(message.as_bytes());
    out
}

/// A read's reply with room for its data: the buffer and where the data
/// goes (`buf[at..]`, `len` bytes), so the export reads straight into the
/// message that is sent.
pub fn read_buffer(cookie: u64, structured: bool, offset: u64, len: u32) -> (Vec<u8>, usize) {
    let mut out;
    if structured {
        out = Vec::with_capacity(28 + len as usize);
        structured_header(
            &mut out,
            REPLY_FLAG_DONE,
            REPLY_TYPE_OFFSET_DATA,
            cookie,
            8 + len,
        );
        out.put_u64(offset);
    } else {
        out = simple(cookie, 0);
        out.reserve_exact(len as usize);
    }
    let at = out.len();
    out.resize(at + len as usize, 0);
    (out, at)
}

/// A BLOCK_STATUS chunk for `context`: (length, state flags) extents.
pub fn block_status(cookie: u64, context: u32, extents: &[(u32, u32)]) -> Vec<u8> {
    let len = 4 + 8 * extents.len() as u32;
    let mut out = Vec::with_capacity(20 + len as usize);
    structured_header(
        &mut out,
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        len,
    );
    out.put_u32(context);
    for &(l, f) in extents {
        out.put_u32(l);
        out.put_u32(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_and_structured_layouts() {
        assert_eq!(
            done(9, false),
            [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]
        );
        let s = done(9, true);
        assert_eq!(&s[..4], &STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert_eq!(&s[4..8], &[0, 1, 0, 0]);
        assert_eq!(s.len(), 20);

        let e = error(3, true, Errno::NoSpc, "full");
        assert_eq!(&e[6..8], &REPLY_TYPE_ERROR.to_be_bytes());
        assert_eq!(&e[16..20], &10u32.to_be_bytes());
        assert_eq!(&e[20..24], &28u32.to_be_bytes());
        assert_eq!(&e[24..26], &4u16.to_be_bytes());
        assert_eq!(&e[26..], b"full");
        assert_eq!(&error(3, false, Errno::Io, "x")[4..8], &5u32.to_be_bytes());

        let long = "é".repeat(3000);
        let e = error(1, true, Errno::Io, &long);
        let n = u16::from_be_bytes([e[24], e[25]]) as usize;
        assert!(n <= MAX_STRING);
        assert!(std::str::from_utf8(&e[26..]).is_ok());
    }

    #[test]
    fn read_buffer_leaves_room_for_the_data() {
        let (b, at) = read_buffer(5, true, 4096, 512);
        assert_eq!(at, 28);
        assert_eq!(b.len(), 28 + 512);
        assert_eq!(&b[16..20], &520u32.to_be_bytes());
        assert_eq!(&b[20..28], &4096u64.to_be_bytes());
        let (b, at) = read_buffer(5, false, 4096, 512);
        assert_eq!((at, b.len()), (16, 16 + 512));
    }

    #[test]
    fn block_status_chunk() {
        let b = block_status(1, 1, &[(4096, 0), (8192, STATE_HOLE | STATE_ZERO)]);
        assert_eq!(&b[16..20], &20u32.to_be_bytes());
        assert_eq!(&b[20..24], &1u32.to_be_bytes());
        assert_eq!(&b[24..32], &[0, 0, 16, 0, 0, 0, 0, 0]);
        assert_eq!(&b[32..40], &[0, 0, 32, 0, 0, 0, 0, 3]);
    }
}
