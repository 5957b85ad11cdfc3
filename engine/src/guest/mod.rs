//! The guest's requests: read (`read`), write (`write`), discard and
//! write_zeroes (`discard`), the same flagged FUA
//! (`fua`), compressed writes (`compressed_write`), the VM
//! state area (`vmstate`), and block status (`status`). The flush is
//! `writeback`'s.

pub(crate) mod block_status;
pub(crate) mod compressed_write;
pub(crate) mod discard;
pub(crate) mod fua;
pub(crate) mod read;
pub(crate) mod status;
pub(crate) mod vmstate;
pub(crate) mod write;
