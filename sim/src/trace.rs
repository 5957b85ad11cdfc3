//! A stable 64-bit hash of everything a run did: every scheduling choice of
//! the executor and every request the simulated disk served.
//!
//! Two runs of one case must print the same trace hash, on any machine and
//! any Rust version, so this is FNV-1a with fixed constants and explicit
//! little-endian encoding (write payloads by XXH3-64, see [`hash_bytes`]),
//! never std's `DefaultHasher` (whose algorithm is unspecified and may
//! change).

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// An FNV-1a hasher fed field by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceHasher {
    state: u64,
    /// How many events were recorded, for reports ("N events, hash H").
    events: u64,
}

impl Default for TraceHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceHasher {
    pub fn new() -> Self {
        Self {
            state: FNV_OFFSET,
            events: 0,
        }
    }

    pub fn write_bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state ^= u64::from(b);
            self.state = self.state.wrapping_mul(FNV_PRIME);
        }
    }

    pub fn write_u64(&mut self, v: u64) {
        self.write_bytes(&v.to_le_bytes());
    }

    pub fn write_str(&mut self, s: &str) {
        self.write_u64(s.len() as u64);
        self.write_bytes(s.as_bytes());
    }

    /// Start a new event: a tag naming its kind, so that two different event
    /// sequences with the same fields do not hash alike.
    pub fn event(&mut self, tag: &str) {
        self.events += 1;
        self.write_str(tag);
    }

    pub fn finish(&self) -> u64 {
        self.state
    }

    pub fn events(&self) -> u64 {
        self.events
    }
}

/// The hash of a write's data in the trace: XXH3-64 with seed 0, whose
/// output its specification fixes for every platform and version.
///
/// What a read returned is not hashed. It is a function of the writes
/// before it (hashed here), the order the trace records and the crash
/// states drawn from the seed, so it adds nothing to a replay's identity
/// (and the model checks every byte a guest read returns). Hashing it was
/// 4.4% of a campaign's time (perf over `campaign --seeds 0..2000` after
/// 955e6ae).
///
/// Not FNV-1a like the events: data is most of what a run moves, and
/// FNV-1a's one multiply per byte in a dependent chain was a third of a
/// campaign's time (perf over `campaign --seeds 0..200` on 1f5709b: 21% in
/// hashing reads, 9.5% writes), where XXH3 reads many bytes a cycle.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}
