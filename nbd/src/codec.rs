//! Big-endian encoding into a buffer, and bounded decoding from a received
//! message: every read says whether the bytes were there, so a short or
//! lying message is an error, never a panic.

/// Appends big-endian fields to a `Vec<u8>`.
pub(crate) trait Put {
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
}

impl Put for Vec<u8> {
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
}

/// Reads big-endian fields from a received message, front to back.
pub(crate) struct Take<'a> {
    rest: &'a [u8],
}

impl<'a> Take<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Take<'a> {
        Take { rest: bytes }
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.rest.len() {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.bytes(8)
            .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_messages_are_none_not_panics() {
        let mut t = Take::new(&[0, 1, 2]);
        assert_eq!(t.u16(), Some(1));
        assert_eq!(t.u32(), None);
        assert_eq!(t.bytes(1), Some(&[2u8][..]));
        assert!(t.is_empty());
        assert_eq!(t.u64(), None);
    }

    #[test]
    fn put_is_big_endian() {
        let mut v = Vec::new();
        v.put_u16(0x0102);
        v.put_u32(0x0304_0506);
        v.put_u64(7);
        assert_eq!(v, [1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 7]);
    }
}
