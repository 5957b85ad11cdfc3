//! Malformed input never panics the checker: seeded random byte mutations
//! of small QEMU-made images, aimed mostly at the metadata, must yield a
//! report (corruptions, check errors or a failed check), never a panic, and
//! repair on them must return too.
//!
//! Repair runs on an in-memory sink capped at a few MiB, so that a mutated
//! refcount table pointing far away cannot make the test allocate without
//! bound; a refused resize is an I/O error repair must survive.

use std::io;

use crate::check_support::{bases, Layout, Scratch};
use oracle::check::{check, repair, ImageSink, ImageSource, RepairMode};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// An in-memory image that refuses to grow past `cap` bytes.
struct CappedVec {
    bytes: Vec<u8>,
    cap: u64,
}

impl ImageSource for CappedVec {
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.bytes.read_at(off, buf)
    }
}

impl ImageSink for CappedVec {
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        let end = off.saturating_add(buf.len() as u64);
        if end > self.cap {
            return Err(io::Error::other("capped"));
        }
        self.bytes.write_at(off, buf)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        if len > self.cap {
            return Err(io::Error::other("capped"));
        }
        ImageSink::set_len(&mut self.bytes, len)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn random_mutations_never_panic_check_or_repair() {
    let s = Scratch::new();
    let mut rng = ChaCha8Rng::seed_from_u64(0xbad_1de4);
    let mut verdicts = std::collections::BTreeMap::new();
    let start = std::time::Instant::now();
    for base in bases(&s).iter().filter(|b| b.bytes.len() <= 1 << 20) {
        let l = Layout::read(&base.bytes);
        let cs = l.cluster_size();
        // Metadata lives in the first clusters of these small images.
        let hot = (8 * cs).min(base.bytes.len() as u64);
        for _ in 0..200 {
            let mut img = base.bytes.clone();
            let flips = rng.gen_range(1..=8);
            for _ in 0..flips {
                let at = if rng.gen_bool(0.9) {
                    rng.gen_range(0..hot)
                } else {
                    rng.gen_range(0..img.len() as u64)
                } as usize;
                img[at] ^= 1 << rng.gen_range(0..8);
            }
            if rng.gen_bool(0.1) {
                let cut = rng.gen_range(0..img.len());
                img.truncate(cut);
            }
            let report = check(&img);
            *verdicts.entry(report.exit_code()).or_insert(0) += 1;
            let mut sink = CappedVec {
                bytes: img,
                cap: 8 << 20,
            };
            let _ = repair(&mut sink, RepairMode::All);
        }
    }
    let elapsed = start.elapsed();
    assert!(
        verdicts.keys().any(|&c| c != 0),
        "no mutation was noticed: {verdicts:?}"
    );
    assert!(
        elapsed.as_secs() < 60,
        "malformed-input loop took {elapsed:?}"
    );
}

#[test]
fn empty_and_tiny_sources_fail_cleanly() {
    let empty: Vec<u8> = Vec::new();
    let r = check(&empty);
    assert_eq!(r.exit_code(), 1);
    assert!(r.failure.is_some());
    let mut magic_only = b"QFI\xfb".to_vec();
    assert_eq!(check(&magic_only).exit_code(), 1);
    magic_only.extend_from_slice(&3u32.to_be_bytes());
    assert_eq!(check(&magic_only).exit_code(), 1);
}
