//! Guest data: the 512-byte sectors a workload writes, generated from
//! (write id, guest sector), and their decoding.
//!
//! Every sector a workload writes names itself: read back, it says which
//! write put it there and for which sector it was meant, so the model can
//! keep ids instead of bytes and a violation can name the write a wrong
//! sector came from (or say it was written to the wrong place). Backing-file
//! data is generated the same way under a distinct tag.
//!
//! Layout of a generated sector (all integers little-endian):
//!
//! ```text
//! offset  size  field
//!      0     8  MAGIC
//!      8     1  tag: TAG_WRITTEN or TAG_BACKING
//!      9     7  zero
//!     16     8  write id (0 for backing data)
//!     24     8  guest sector the data was generated for
//!     32   472  filler, a pseudo-random function of (tag, id, sector)
//!    504     8  check: one more word of the same sequence
//! ```
//!
//! Decoding compares every byte with the sector its header claims to be
//! (its body regenerated and compared as one block), so a torn
//! or corrupted sector is never taken for a valid one. That comparison is
//! the whole check, so the filler and check word only have to differ
//! between sectors, not to look random: they are a Weyl sequence (one add
//! a word) from a mixed seed. Earlier layouts spent more for nothing the
//! comparison does not give: `qcsimSD1` ended with FNV-1a over the 504
//! bytes before it (504 dependent multiplies, a fifth of a campaign's
//! time), `qcsimSD2` mixed every word with splitmix64.

use serde::{Deserialize, Serialize};

/// The guest sector: the model's unit and the size of generated data.
pub const SECTOR_SIZE: usize = 512;

const MAGIC: [u8; 8] = *b"qcsimSD3";
const MAGIC_OFFSET: usize = 0;
const TAG_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const PAD_OFFSET: usize = TAG_OFFSET + 1;
const ID_OFFSET: usize = PAD_OFFSET + 7;
const SECTOR_OFFSET: usize = ID_OFFSET + 8;
const FILLER_OFFSET: usize = SECTOR_OFFSET + 8;

const TAG_WRITTEN: u8 = b'W';
const TAG_BACKING: u8 = b'B';

/// The id of one guest data write; unique within a run, across crashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WriteId(pub u64);

impl std::fmt::Display for WriteId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "write #{}", self.0)
    }
}

/// What 512 bytes read back from the guest hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Content {
    /// All zero bytes.
    Zero,
    /// Exactly the data `id` wrote for guest sector `sector`.
    Written { id: WriteId, sector: u64 },
    /// Exactly the backing file's data for guest sector `sector`.
    Backing { sector: u64 },
    /// Anything else.
    Garbage(Garbage),
}

/// What can be said about a sector that is neither zero nor generated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Garbage {
    /// The generated sector whose header it carries, if its header is
    /// intact: a torn write usually keeps one.
    pub header_of: Option<Claim>,
    /// What the bytes look like when they carry no header: a guest that
    /// reads qcow2 metadata has met a cluster mapped to a table, which
    /// says far more than "garbage".
    pub looks_like: Option<Metadata>,
}

/// qcow2 metadata recognised in a sector that holds no guest data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metadata {
    /// Starts with the qcow2 magic.
    Header,
    /// Big-endian 64-bit words, each zero or a plausible L1/L2 entry
    /// (a cluster offset with only the flag bits qcow2 defines).
    TableEntries,
    /// Big-endian 16-bit words, each a small count: a refcount block of
    /// the default width.
    Refcounts,
}

impl Metadata {
    /// The kind of metadata `buf` (one sector, neither zero nor generated
    /// data) looks like, if any. Only called on garbage, so never on the
    /// hot path of a read that matches.
    pub fn recognise(buf: &[u8]) -> Option<Metadata> {
        if buf.starts_with(b"QFI\xfb") {
            return Some(Metadata::Header);
        }
        let words = || {
            buf.chunks_exact(8)
                .map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes")))
        };
        // Two words at least: one stray byte is no table.
        if words().filter(|w| w & OFFSET_BITS != 0).count() >= 2
            && words().all(plausible_table_entry)
        {
            return Some(Metadata::TableEntries);
        }
        let counts = || {
            buf.chunks_exact(2)
                .map(|w| u16::from_be_bytes(w.try_into().expect("2 bytes")))
        };
        if counts().filter(|&c| c != 0).count() >= 2
            && counts().all(|c| c <= MAX_PLAUSIBLE_REFCOUNT)
        {
            return Some(Metadata::Refcounts);
        }
        None
    }
}

/// The bits of an L1 or L2 entry that hold the offset.
const OFFSET_BITS: u64 = 0x00ff_ffff_ffff_fe00;

/// Cluster offsets the simulation's images can hold stay far below this
/// (a virtual disk of at most 1 TiB, and its metadata): a word above it
/// is not an offset.
const MAX_PLAUSIBLE_OFFSET: u64 = 1 << 42;

/// The largest count a refcount block of a simulated image plausibly
/// holds: snapshots raise counts by one each, and a case takes few.
const MAX_PLAUSIBLE_REFCOUNT: u16 = 0xff;

/// Whether `w` could be a standard L1 or L2 entry: zero, or a 512-byte
/// aligned offset below [`MAX_PLAUSIBLE_OFFSET`] with no bit set but
/// COPIED (63) and, in an L2 entry, the zero flag (0). Compressed entries
/// (bit 62) and subcluster bitmaps are not recognised; such a sector
/// stays plain garbage.
fn plausible_table_entry(w: u64) -> bool {
    let body = w & !(1 << 63) & !1;
    body & 0x1ff == 0 && body < MAX_PLAUSIBLE_OFFSET
}

/// A decoded header: the generated data a sector claims to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Claim {
    Written { id: WriteId, sector: u64 },
    Backing { sector: u64 },
}

impl std::fmt::Display for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Content::Zero => write!(f, "zeroes"),
            Content::Written { id, sector } => write!(f, "{id} (data for sector {sector})"),
            Content::Backing { sector } => write!(f, "backing data for sector {sector}"),
            Content::Garbage(Garbage {
                header_of: None,
                looks_like: None,
            }) => write!(f, "garbage"),
            Content::Garbage(Garbage {
                header_of: None,
                looks_like: Some(m),
            }) => write!(f, "{m}"),
            Content::Garbage(Garbage {
                header_of: Some(Claim::Written { id, sector }),
                ..
            }) => write!(f, "garbage with the header of {id} for sector {sector}"),
            Content::Garbage(Garbage {
                header_of: Some(Claim::Backing { sector }),
                ..
            }) => write!(f, "garbage with the header of backing sector {sector}"),
        }
    }
}

impl std::fmt::Display for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Metadata::Header => {
                "not guest data but a qcow2 header (it starts with the magic QFI\\xfb)"
            }
            Metadata::TableEntries => {
                "not guest data but what looks like qcow2 L1/L2 table entries \
                 (big-endian 64-bit cluster offsets)"
            }
            Metadata::Refcounts => {
                "not guest data but what looks like a refcount block \
                 (big-endian 16-bit counts)"
            }
        })
    }
}

/// Fills `buf` (exactly one sector) with the data write `id` puts at guest
/// sector `sector`.
pub fn fill_written(buf: &mut [u8], id: WriteId, sector: u64) {
    generate(buf, TAG_WRITTEN, id.0, sector);
}

/// Fills `buf` (exactly one sector) with the backing file's data for guest
/// sector `sector` (a sector that [`BackingPattern::has_data`] says holds
/// data; elsewhere the backing file holds zeroes).
pub fn fill_backing(buf: &mut [u8], sector: u64) {
    generate(buf, TAG_BACKING, 0, sector);
}

/// Fills `buf` (a whole number of sectors) with what write `id` puts at the
/// sectors starting at `first_sector`.
pub fn fill_write_buffer(buf: &mut [u8], id: WriteId, first_sector: u64) {
    assert_eq!(buf.len() % SECTOR_SIZE, 0, "buffer is not whole sectors");
    for (i, chunk) in buf.chunks_exact_mut(SECTOR_SIZE).enumerate() {
        fill_written(chunk, id, first_sector + i as u64);
    }
}

/// What write `id` puts at `sectors` sectors from `first_sector`, as a new
/// buffer: [`fill_write_buffer`] without first zeroing a buffer it
/// overwrites whole (that memset was over 1% of a campaign).
pub fn write_buffer(id: WriteId, first_sector: u64, sectors: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(sectors as usize * SECTOR_SIZE);
    let mut block = [0u8; SECTOR_SIZE];
    for sector in first_sector..first_sector + sectors {
        fill_written(&mut block, id, sector);
        out.extend_from_slice(&block);
    }
    out
}

/// Of the sectors a compressible buffer covers, the generated ones: one
/// guest sector in [`COMPRESSIBLE_STRIDE`], the others zeroes. Generated
/// data does not compress (its filler differs word by word), so a
/// compressed write of it alone would always fall back to an ordinary one.
pub fn compressible_has_data(sector: u64) -> bool {
    sector.is_multiple_of(COMPRESSIBLE_STRIDE)
}

/// One sector in this many of a compressible buffer holds generated data.
pub const COMPRESSIBLE_STRIDE: u64 = 4;

/// Fills `buf` (a whole number of sectors) with what compressed write `id`
/// puts at the sectors starting at `first_sector`: generated data where
/// [`compressible_has_data`] says so, zeroes elsewhere.
pub fn fill_compressible_buffer(buf: &mut [u8], id: WriteId, first_sector: u64) {
    assert_eq!(buf.len() % SECTOR_SIZE, 0, "buffer is not whole sectors");
    for (i, chunk) in buf.chunks_exact_mut(SECTOR_SIZE).enumerate() {
        let sector = first_sector + i as u64;
        if compressible_has_data(sector) {
            fill_written(chunk, id, sector);
        } else {
            chunk.fill(0);
        }
    }
}

/// Decodes one sector read back.
pub fn decode(buf: &[u8]) -> Content {
    assert_eq!(buf.len(), SECTOR_SIZE, "decode takes exactly one sector");
    // A sector that starts with the magic is not all zeroes; most sectors
    // read back are one or the other, so the cheaper test goes first.
    let Some(claim) = decode_header(buf) else {
        if is_zero(buf) {
            return Content::Zero;
        }
        return Content::Garbage(Garbage {
            header_of: None,
            looks_like: Metadata::recognise(buf),
        });
    };
    let (tag, id, sector) = match claim {
        Claim::Written { id, sector } => (TAG_WRITTEN, id.0, sector),
        Claim::Backing { sector } => (TAG_BACKING, 0, sector),
    };
    if !body_matches(buf, tag, id, sector) {
        return Content::Garbage(Garbage {
            header_of: Some(claim),
            looks_like: None,
        });
    }
    match claim {
        Claim::Written { id, sector } => Content::Written { id, sector },
        Claim::Backing { sector } => Content::Backing { sector },
    }
}

fn decode_header(buf: &[u8]) -> Option<Claim> {
    if buf[MAGIC_OFFSET..TAG_OFFSET] != MAGIC || buf[PAD_OFFSET..ID_OFFSET].iter().any(|b| *b != 0)
    {
        return None;
    }
    let id = u64::from_le_bytes(buf[ID_OFFSET..SECTOR_OFFSET].try_into().ok()?);
    let sector = u64::from_le_bytes(buf[SECTOR_OFFSET..FILLER_OFFSET].try_into().ok()?);
    match buf[TAG_OFFSET] {
        TAG_WRITTEN => Some(Claim::Written {
            id: WriteId(id),
            sector,
        }),
        TAG_BACKING if id == 0 => Some(Claim::Backing { sector }),
        _ => None,
    }
}

fn generate(buf: &mut [u8], tag: u8, id: u64, sector: u64) {
    assert_eq!(buf.len(), SECTOR_SIZE, "generated data is one sector");
    buf[MAGIC_OFFSET..TAG_OFFSET].copy_from_slice(&MAGIC);
    buf[TAG_OFFSET] = tag;
    buf[PAD_OFFSET..ID_OFFSET].fill(0);
    buf[ID_OFFSET..SECTOR_OFFSET].copy_from_slice(&id.to_le_bytes());
    buf[SECTOR_OFFSET..FILLER_OFFSET].copy_from_slice(&sector.to_le_bytes());
    buf[FILLER_OFFSET..].copy_from_slice(&body(tag, id, sector));
}

/// Whether bytes 32.. of `buf` (one sector whose header names tag, id and
/// sector) are the filler and check word generated for them.
fn body_matches(buf: &[u8], tag: u8, id: u64, sector: u64) -> bool {
    buf[FILLER_OFFSET..] == body(tag, id, sector)
}

/// Bytes 32..512 of the sector generated for (tag, id, sector).
fn body(tag: u8, id: u64, sector: u64) -> [u8; SECTOR_SIZE - FILLER_OFFSET] {
    let mut out = [0u8; SECTOR_SIZE - FILLER_OFFSET];
    for (word, value) in out.chunks_exact_mut(8).zip(body_words(tag, id, sector)) {
        word.copy_from_slice(&value.to_le_bytes());
    }
    out
}

/// The 60 words after the header: 59 of filler, then the check word: a
/// Weyl sequence from a seed that splitmix64 mixes out of (tag, id,
/// sector). Two sectors with different seeds differ in every word, and
/// each word costs one add, so generating and comparing vectorise.
/// Nothing needs the words to look random: decode compares every byte
/// with what the header claims (and the header names the write and sector
/// itself), so any change to any byte is seen however simple the filler.
fn body_words(tag: u8, id: u64, sector: u64) -> impl Iterator<Item = u64> {
    const WORDS: u64 = ((SECTOR_SIZE - FILLER_OFFSET) / 8) as u64;
    let seed = mix(mix(mix(u64::from(tag) ^ 0x5143_5349_4d00_0000) ^ id) ^ sector);
    (0..WORDS).scan(seed, |w, _| {
        *w = w.wrapping_add(0x9e37_79b9_7f4a_7c15);
        Some(*w)
    })
}

/// Whether every byte is zero: 64 bytes at a time, OR-ed together with no
/// branch inside a block, which the compiler turns into a few vector
/// instructions (a test per byte or per word was a few per cent of a
/// campaign, most sectors read back being zeroes).
pub(crate) fn is_zero(buf: &[u8]) -> bool {
    let mut blocks = buf.chunks_exact(64);
    blocks.all(|b| b.iter().fold(0u8, |acc, &x| acc | x) == 0)
        && blocks.remainder().iter().all(|&x| x == 0)
}

/// splitmix64's finaliser: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Which sectors of a backing file hold data (the rest hold zeroes): a
/// description, so a case stores a few numbers instead of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BackingPattern {
    /// Every sector holds data.
    Full,
    /// Repeating runs: `data` sectors of data then `hole` sectors of zeroes,
    /// starting at sector 0. `data + hole` must be at least 1.
    Stripes { data: u32, hole: u32 },
    /// Each sector holds data with probability `percent`/100, decided by a
    /// hash of (`seed`, sector).
    Scattered { seed: u64, percent: u8 },
}

impl BackingPattern {
    /// Whether guest sector `sector` of the backing file holds data.
    pub fn has_data(&self, sector: u64) -> bool {
        match *self {
            BackingPattern::Full => true,
            BackingPattern::Stripes { data, hole } => {
                let period = u64::from(data) + u64::from(hole);
                period != 0 && sector % period < u64::from(data)
            }
            BackingPattern::Scattered { seed, percent } => {
                mix(mix(seed) ^ sector) % 100 < u64::from(percent)
            }
        }
    }
}

/// A backing file as the model sees it: its length and where its data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackingData {
    /// Length of the backing file in sectors; guest sectors past it read as
    /// zeroes through the overlay.
    pub sectors: u64,
    pub pattern: BackingPattern,
}

impl BackingData {
    /// Whether guest sector `sector` reads backing data (not zeroes) when
    /// the overlay does not cover it.
    pub fn has_data(&self, sector: u64) -> bool {
        sector < self.sectors && self.pattern.has_data(sector)
    }

    /// The whole backing file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; (self.sectors * SECTOR_SIZE as u64) as usize];
        self.fill(&mut bytes, 0);
        bytes
    }

    /// Fills `buf` (a whole number of sectors) with the backing file's bytes
    /// for the sectors starting at `first_sector`.
    pub fn fill(&self, buf: &mut [u8], first_sector: u64) {
        assert_eq!(buf.len() % SECTOR_SIZE, 0, "buffer is not whole sectors");
        for (i, chunk) in buf.chunks_exact_mut(SECTOR_SIZE).enumerate() {
            let sector = first_sector + i as u64;
            if self.has_data(sector) {
                fill_backing(chunk, sector);
            } else {
                chunk.fill(0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_buffer_is_the_filled_buffer() {
        let mut filled = vec![0xa5u8; 3 * SECTOR_SIZE];
        fill_write_buffer(&mut filled, WriteId(12), 40);
        assert_eq!(write_buffer(WriteId(12), 40, 3), filled);
        assert_ne!(write_buffer(WriteId(12), 41, 3), filled);
        assert!(write_buffer(WriteId(12), 40, 0).is_empty());
    }

    #[test]
    fn generated_sectors_decode_as_themselves_and_any_changed_byte_is_garbage() {
        let mut buf = [0u8; SECTOR_SIZE];
        fill_written(&mut buf, WriteId(9), 77);
        let claim = Some(Claim::Written {
            id: WriteId(9),
            sector: 77,
        });
        assert_eq!(
            decode(&buf),
            Content::Written {
                id: WriteId(9),
                sector: 77
            }
        );
        for i in FILLER_OFFSET..SECTOR_SIZE {
            let mut torn = buf;
            torn[i] ^= 0x40;
            assert_eq!(
                decode(&torn),
                Content::Garbage(Garbage {
                    header_of: claim,
                    looks_like: None
                }),
                "byte {i} changed"
            );
        }
        for i in 0..FILLER_OFFSET {
            let mut bad = buf;
            bad[i] ^= 0x40;
            assert_ne!(decode(&bad), decode(&buf), "header byte {i} changed");
        }
    }

    #[test]
    fn zeroes_backing_and_garbage_are_told_apart() {
        assert_eq!(decode(&[0u8; SECTOR_SIZE]), Content::Zero);
        let mut one = [0u8; SECTOR_SIZE];
        one[SECTOR_SIZE - 1] = 1;
        assert_eq!(
            decode(&one),
            Content::Garbage(Garbage {
                header_of: None,
                looks_like: None
            })
        );
        let mut b = [0u8; SECTOR_SIZE];
        fill_backing(&mut b, 5);
        assert_eq!(decode(&b), Content::Backing { sector: 5 });
        // The same sector's data differs between writes, sectors and tags.
        let mut w = [0u8; SECTOR_SIZE];
        fill_written(&mut w, WriteId(0), 5);
        assert_ne!(w[FILLER_OFFSET..], b[FILLER_OFFSET..]);
        let mut w2 = [0u8; SECTOR_SIZE];
        fill_written(&mut w2, WriteId(0), 6);
        assert_ne!(w[FILLER_OFFSET..], w2[FILLER_OFFSET..]);
    }

    /// A guest that reads metadata is told what it read: L2 entries,
    /// refcounts or a header, not "garbage"; data that is none of them
    /// stays garbage.
    #[test]
    fn metadata_read_as_guest_data_is_named() {
        let mut l2 = [0u8; SECTOR_SIZE];
        for (i, w) in l2.chunks_exact_mut(8).take(5).enumerate() {
            let entry = (1u64 << 63) | (0x50000 + 0x10000 * i as u64);
            w.copy_from_slice(&entry.to_be_bytes());
        }
        let shown = decode(&l2).to_string();
        assert!(shown.contains("L1/L2 table entries"), "{shown}");
        let mut refcounts = [0u8; SECTOR_SIZE];
        for w in refcounts.chunks_exact_mut(2).take(9) {
            w.copy_from_slice(&1u16.to_be_bytes());
        }
        assert!(decode(&refcounts).to_string().contains("refcount block"));
        let mut header = [0u8; SECTOR_SIZE];
        header[..4].copy_from_slice(b"QFI\xfb");
        header[7] = 3;
        assert!(decode(&header).to_string().contains("qcow2 header"));
        // A compressed entry's bits, or a high word: not recognised.
        let mut data = l2;
        data[8..16].copy_from_slice(&(0x4000_0000_0005_0000u64).to_be_bytes());
        assert_eq!(decode(&data).to_string(), "garbage");
    }
}
