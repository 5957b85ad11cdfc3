//! What growing the file ahead of allocation has done this session
//! (`Growth`): the file's length before the first growth (what closing may
//! trim back to), whether growing is off after a failure, and the host
//! range growth has zeroed. Growing itself, the fresh-run rule and the
//! trim at close live in `grow`; this module does no I/O.
//!
//! Invariants: the zeroed range is one contiguous range `[lo, hi)` of
//! completed write_zeroes, each extending the last or replacing it; the
//! length before growth is recorded once, before the first zeroing is
//! issued; once off, growing stays off until the image is reopened.
//!
//! Part of `Meta`, reached only through the metadata lock's guard.

#[derive(Default)]
pub(crate) struct Growth {
    /// The file's length before the engine first grew it ahead of
    /// allocation (see `grow`); what closing may trim back to.
    grown_from: Option<u64>,
    /// Growing failed once (the device cannot zero efficiently, or an
    /// error): not tried again while the image is open.
    disabled: bool,
    /// Host bytes `[start, end)` that growing has zeroed, contiguous, in
    /// this session: a cluster there past every cluster used before it is
    /// handed out still reads as zeroes (see `grow::is_fresh`).
    zeroed: (u64, u64),
}

impl Growth {
    /// Growing failed once and is not tried again.
    pub(crate) fn disabled(&self) -> bool {
        self.disabled
    }

    pub(crate) fn disable(&mut self) {
        self.disabled = true;
    }

    /// Growing starts with the file `len` bytes long; only the first
    /// growth's length is kept.
    pub(crate) fn note_start(&mut self, len: u64) {
        self.grown_from.get_or_insert(len);
    }

    /// The file's length before the first growth, if it grew.
    pub(crate) fn grown_from(&self) -> Option<u64> {
        self.grown_from
    }

    /// A write_zeroes of `[at, at + n)` completed: it extends the zeroed
    /// range if it starts where that ends, else it replaces it.
    pub(crate) fn note_zeroed(&mut self, at: u64, n: u64) {
        self.zeroed = if self.zeroed.1 == at && self.zeroed.0 < at {
            (self.zeroed.0, at + n)
        } else {
            (at, at + n)
        };
    }

    /// Whether `[start, end)` lies inside the range growth has zeroed.
    pub(crate) fn zeroed_covers(&self, start: u64, end: u64) -> bool {
        let (lo, hi) = self.zeroed;
        start >= lo && end <= hi
    }
}
