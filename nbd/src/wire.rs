//! The protocol's numbers, as the NBD protocol document
//! (`doc/proto.md` of the NetworkBlockDevice/nbd repository) names them:
//! magics, handshake and transmission flags, options and their replies,
//! commands, command flags, reply chunk types, error values and the
//! `base:allocation` state bits. Everything on the wire is big-endian.

/// "NBDMAGIC", the first 8 bytes a server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": the newstyle magic, and the start of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The start of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Transmission flags.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types; errors have bit 31 set.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR | 1;
pub const REP_ERR_POLICY: u32 = REP_ERR | 2;
pub const REP_ERR_INVALID: u32 = REP_ERR | 3;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR | 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR | 7;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR | 9;

// Information types of NBD_OPT_INFO and NBD_OPT_GO.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply chunks.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;

/// The `base:allocation` meta context and its state bits.
pub const BASE_ALLOCATION: &str = "base:allocation";
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// Longest string (export name, context name, message) the protocol
/// allows.
pub const MAX_STRING: usize = 4096;

/// Error values in replies (the protocol's, equal to Linux errno values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Errno {
    Perm = 1,
    Io = 5,
    NoMem = 12,
    Inval = 22,
    NoSpc = 28,
    Overflow = 75,
    NotSup = 95,
    Shutdown = 108,
}

impl Errno {
    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn name(self) -> &'static str {
        match self {
            Errno::Perm => "EPERM",
            Errno::Io => "EIO",
            Errno::NoMem => "ENOMEM",
            Errno::Inval => "EINVAL",
            Errno::NoSpc => "ENOSPC",
            Errno::Overflow => "EOVERFLOW",
            Errno::NotSup => "ENOTSUP",
            Errno::Shutdown => "ESHUTDOWN",
        }
    }
}

/// What a command is called in messages.
pub fn command_name(kind: u16) -> &'static str {
    match kind {
        CMD_READ => "read",
        CMD_WRITE => "write",
        CMD_DISC => "disconnect",
        CMD_FLUSH => "flush",
        CMD_TRIM => "trim",
        CMD_CACHE => "cache",
        CMD_WRITE_ZEROES => "write_zeroes",
        CMD_BLOCK_STATUS => "block_status",
        _ => "unknown command",
    }
}
