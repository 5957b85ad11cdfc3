//! The small vocabulary the model's events are written in.

use crate::data::{Content, WriteId};

/// A guest request, as the runner numbers them; unique within a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpId(pub u64);

impl std::fmt::Display for OpId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "op {}", self.0)
    }
}

/// A run of guest sectors: `len` sectors from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SectorRange {
    pub start: u64,
    pub len: u64,
}

impl SectorRange {
    pub fn new(start: u64, len: u64) -> SectorRange {
        SectorRange { start, len }
    }

    /// One past the last sector.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    pub fn sectors(&self) -> std::ops::Range<u64> {
        self.start..self.end()
    }
}

/// What a guest write puts in the sectors it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WriteKind {
    /// Generated data ([`crate::data::fill_write_buffer`]) of this write id.
    Data(WriteId),
    /// write_zeroes, with or without unmap: the sectors read as zeroes.
    Zero,
    /// discard: advisory, so each sector reads as zeroes, the backing
    /// file's data (qcow2 unmaps the cluster, and an unmapped cluster reads
    /// from the backing file) or its old value (a partial-cluster discard
    /// may do nothing).
    Discard,
}

/// How a guest request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    Ok,
    /// The request returned an error (an injected I/O error).
    Failed,
}

/// A value the model allows a sector to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Zero,
    /// The backing file's data for this sector (only where it has data;
    /// elsewhere the backing file reads as [`Value::Zero`]).
    Backing,
    Data(WriteId),
    /// Garbage a post-crash check found; it becomes the sector's value for
    /// the next epoch so that the run can go on, already failed, without
    /// reporting the same sector again.
    Garbage,
    /// Anything at all: a discarded sector under
    /// [`DiscardContract::Unspecified`], until it is written again.
    Unspecified,
}

/// What a discard promises about the sectors it covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DiscardContract {
    /// qcsim's engine: each sector reads as zeroes, the backing file's
    /// data or its old value ([`WriteKind::Discard`]), also after a crash.
    #[default]
    Advisory,
    /// The block layer's contract (NBD's TRIM, Linux's discard): nothing
    /// may be assumed about the contents until they are written again.
    /// A driver held to this may, after a crash, show there data the
    /// guest wrote elsewhere after the discard (QEMU reuses a discarded
    /// cluster before the L2 change unlinking it is durable).
    Unspecified,
}

impl Value {
    /// The value `content` stands for when read at guest sector `sector`,
    /// or None when it is generated data meant for another sector.
    pub fn of_content(content: Content, sector: u64) -> Option<Value> {
        match content {
            Content::Zero => Some(Value::Zero),
            Content::Written { id, sector: s } if s == sector => Some(Value::Data(id)),
            Content::Backing { sector: s } if s == sector => Some(Value::Backing),
            Content::Written { .. } | Content::Backing { .. } => None,
            Content::Garbage(_) => Some(Value::Garbage),
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Zero => write!(f, "zeroes"),
            Value::Backing => write!(f, "backing data"),
            Value::Data(id) => write!(f, "{id}"),
            Value::Garbage => write!(f, "the garbage an earlier recovery found"),
            Value::Unspecified => write!(f, "anything (discarded, the contract unspecified)"),
        }
    }
}
