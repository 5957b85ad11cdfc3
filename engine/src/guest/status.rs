//! What a guest byte range holds (`Status`), the answer of block status
//! (`block_status`).

/// What a guest byte range holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Status {
    /// Allocated in this image: data clusters (compressed ones too), or
    /// clusters whose allocation is in flight.
    Data,
    /// Zero clusters: read as zeroes, whatever the backing file holds.
    Zero,
    /// Not allocated, and no backing file under it (or the backing file
    /// ends before it): reads as zeroes.
    Unallocated,
    /// Not allocated: the data comes from the backing file.
    Backing,
}

impl Status {
    /// Whether the range reads as zeroes without looking any further.
    pub fn reads_as_zero(self) -> bool {
        matches!(self, Status::Zero | Status::Unallocated)
    }
}
