//! A deterministic text dump of an image's metadata: header, extensions,
//! L1 and L2 tables, refcount table and refcounts, snapshot table. Stable
//! enough for snapshot tests: one fact per line, in offset order, only
//! what is set; runs of equal refcounts are merged.
//!
//! Like the checker, it parses the image itself. [`dump`] never fails:
//! what cannot be read is written into the dump as such (what snapshot
//! tests of damaged images want). [`try_dump`] is for a user asking about
//! a file: a file it cannot read, or one whose header is missing, cut
//! short or not a qcow2 header, is an error that says so, rather than a
//! dump of fields read as zeroes past the end of the file.

use std::cell::RefCell;
use std::fmt::Write;
use std::io;

use crate::check::ImageSource;

/// The smallest header: version 2's, and what a file must hold to be
/// parsed as any qcow2 image.
const V2_HEADER_LEN: u64 = 72;
/// The smallest version 3 header.
const V3_MIN_HEADER_LEN: u64 = 104;

/// Why an image cannot be dumped.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("cannot read the file: {0}")]
    Read(io::Error),
    /// The file ends inside the header; `version` when the file got as far
    /// as saying which.
    #[error(
        "truncated qcow2 header: the file holds {len} bytes, {} needs {needed}",
        match .version {
            Some(v) => format!("a version {v} header"),
            None => "a qcow2 header".to_string(),
        }
    )]
    Truncated {
        len: u64,
        needed: u64,
        version: Option<u32>,
    },
    #[error("not a qcow2 image (magic {found:#010x}, not 0x514649fb)")]
    BadMagic { found: u32 },
    #[error("cluster_bits {0} is outside 9..=21 (512 B to 2 MiB clusters)")]
    ClusterBits(u32),
}

/// A source that remembers the first read error, which [`read`] turns
/// into a missing table.
struct Watched<'a> {
    src: &'a dyn ImageSource,
    error: RefCell<Option<io::Error>>,
}

impl ImageSource for Watched<'_> {
    fn len(&self) -> u64 {
        self.src.len()
    }

    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let r = self.src.read_at(off, buf);
        if let Err(e) = &r {
            let mut first = self.error.borrow_mut();
            if first.is_none() {
                *first = Some(io::Error::new(e.kind(), e.to_string()));
            }
        }
        r
    }
}

/// The dump of the image in `src`, or why there is none: the file cannot
/// be read, or its header is truncated, has no qcow2 magic or an
/// impossible cluster size. Tables that cannot be shown (too large, or
/// pointing nowhere) are written into the dump, as [`dump`] does.
pub fn try_dump(src: &dyn ImageSource) -> Result<String, DumpError> {
    let watched = Watched {
        src,
        error: RefCell::new(None),
    };
    check_header(&watched)?;
    let mut out = String::new();
    let result = dump_into(&watched, &mut out);
    if let Some(e) = watched.error.into_inner() {
        return Err(DumpError::Read(e));
    }
    if let Err(e) = result {
        let _ = writeln!(out, "unreadable: {e}");
    }
    Ok(out)
}

/// The header's own checks, before any field of it is believed.
fn check_header(src: &Watched<'_>) -> Result<(), DumpError> {
    let len = src.len();
    let mut h = [0u8; V3_MIN_HEADER_LEN as usize];
    src.read_at(0, &mut h).map_err(DumpError::Read)?;
    let truncated = |needed, version| DumpError::Truncated {
        len,
        needed,
        version,
    };
    if len < 4 {
        return Err(truncated(V2_HEADER_LEN, None));
    }
    let magic = be32(&h, 0);
    if magic != 0x5146_49fb {
        return Err(DumpError::BadMagic { found: magic });
    }
    if len < 8 {
        return Err(truncated(V2_HEADER_LEN, None));
    }
    // Laid out as the dump reads them: version 3 and later as version 3.
    let version = be32(&h, 4);
    if version < 3 {
        if len < V2_HEADER_LEN {
            return Err(truncated(V2_HEADER_LEN, Some(version)));
        }
    } else {
        if len < V3_MIN_HEADER_LEN {
            return Err(truncated(V3_MIN_HEADER_LEN, Some(version)));
        }
        let header_length = u64::from(be32(&h, 100));
        if len < header_length {
            return Err(truncated(header_length, Some(version)));
        }
    }
    let cluster_bits = be32(&h, 20);
    if !(9..=21).contains(&cluster_bits) {
        return Err(DumpError::ClusterBits(cluster_bits));
    }
    Ok(())
}

/// Bound on the tables dumped, so a hostile image cannot make the dump
/// allocate without limit.
const MAX_TABLE_BYTES: u64 = 32 << 20;

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"))
}

fn read(src: &dyn ImageSource, off: u64, len: u64) -> Option<Vec<u8>> {
    if len > MAX_TABLE_BYTES {
        return None;
    }
    let mut b = vec![0u8; len as usize];
    src.read_at(off, &mut b).ok().map(|_| b)
}

/// The dump of the image in `src`.
pub fn dump(src: &dyn ImageSource) -> String {
    let mut out = String::new();
    if let Err(e) = dump_into(src, &mut out) {
        let _ = writeln!(out, "unreadable: {e}");
    }
    out
}

fn dump_into(src: &dyn ImageSource, o: &mut String) -> Result<(), String> {
    let h = read(src, 0, 112).ok_or("header")?;
    if be32(&h, 0) != 0x5146_49fb {
        return Err("bad magic".into());
    }
    let version = be32(&h, 4);
    let cluster_bits = be32(&h, 20);
    if !(9..=21).contains(&cluster_bits) {
        return Err(format!("cluster_bits {cluster_bits}"));
    }
    let cs = 1u64 << cluster_bits;
    let size = be64(&h, 24);
    let l1_size = be32(&h, 36) as u64;
    let l1_off = be64(&h, 40);
    let rt_off = be64(&h, 48);
    let rt_clusters = be32(&h, 56) as u64;
    let nb_snapshots = be32(&h, 60);
    let snap_off = be64(&h, 64);
    let (incompat, compat, autoclear, order, hlen) = if version >= 3 {
        (
            be64(&h, 72),
            be64(&h, 80),
            be64(&h, 88),
            be32(&h, 96),
            be32(&h, 100),
        )
    } else {
        (0, 0, 0, 4, 72)
    };
    let _ = writeln!(o, "header");
    let _ = writeln!(o, "  version {version}");
    let _ = writeln!(o, "  cluster_size {cs}");
    let _ = writeln!(o, "  size {size}");
    let _ = writeln!(
        o,
        "  backing_file_offset {:#x} size {}",
        be64(&h, 8),
        be32(&h, 16)
    );
    let _ = writeln!(o, "  crypt_method {}", be32(&h, 32));
    let _ = writeln!(o, "  l1 {l1_size} entries at {l1_off:#x}");
    let _ = writeln!(o, "  refcount_table {rt_clusters} clusters at {rt_off:#x}");
    let _ = writeln!(o, "  snapshots {nb_snapshots} at {snap_off:#x}");
    let _ = writeln!(
        o,
        "  features incompatible {incompat:#x} compatible {compat:#x} autoclear {autoclear:#x}"
    );
    let _ = writeln!(o, "  refcount_bits {}", 1u32 << order.min(6));
    let _ = writeln!(o, "  header_length {hlen}");
    if let Some(c) = read(src, 0, cs.min(1 << 16)) {
        let mut p = if version >= 3 { hlen as usize } else { 72 };
        while p + 8 <= c.len() {
            let (kind, len) = (be32(&c, p), be32(&c, p + 4) as usize);
            if kind == 0 {
                break;
            }
            let _ = writeln!(o, "  extension {kind:#010x} length {len}");
            p += 8 + len.div_ceil(8) * 8;
        }
    }
    let entries = |off: u64, n: u64| -> Option<Vec<u64>> {
        read(src, off, n.checked_mul(8)?).map(|b| b.chunks_exact(8).map(|c| be64(c, 0)).collect())
    };
    let l1 = entries(l1_off, l1_size).ok_or("L1 table")?;
    let _ = writeln!(o, "l1");
    // Extended L2 entries (incompatible bit 4) are a descriptor and a
    // subcluster bitmap, 16 bytes.
    let extended = incompat & (1 << 4) != 0;
    let words_per_entry = if extended { 2 } else { 1 };
    let l2_entries = cs / (8 * words_per_entry);
    for (i, &e) in l1.iter().enumerate() {
        if e == 0 {
            continue;
        }
        let l2 = e & 0x00ff_ffff_ffff_fe00;
        let copied = if e >> 63 != 0 { " copied" } else { "" };
        let _ = writeln!(o, "  [{i}] l2 {l2:#x}{copied}");
        let Some(t) = entries(l2, cs / 8) else {
            let _ = writeln!(o, "    unreadable");
            continue;
        };
        for (j, w) in t.chunks_exact(words_per_entry as usize).enumerate() {
            let bitmap = if extended { w[1] } else { 0 };
            if w[0] == 0 && bitmap == 0 {
                continue;
            }
            let guest = (i as u64 * l2_entries + j as u64) * cs;
            let mut line = l2_entry(w[0], cluster_bits, version);
            if extended && w[0] & (1 << 62) == 0 && w[0] & 0x00ff_ffff_ffff_fe00 == 0 {
                line = "no host cluster".into();
            }
            if extended {
                line = format!(
                    "{line} subclusters allocated {:#010x} zero {:#010x}",
                    bitmap & 0xffff_ffff,
                    bitmap >> 32
                );
            }
            let _ = writeln!(o, "    guest {guest:#x} {line}");
        }
    }
    let rt = entries(rt_off, rt_clusters * cs / 8).ok_or("refcount table")?;
    let _ = writeln!(o, "refcount table");
    let bits = 1u64 << order.min(6);
    let per_block = cs * 8 / bits;
    let mut runs: Vec<(u64, u64, u64)> = Vec::new();
    for (i, &b) in rt.iter().enumerate() {
        if b == 0 {
            continue;
        }
        let _ = writeln!(o, "  [{i}] block {b:#x}");
        let Some(block) = read(src, b, cs) else {
            continue;
        };
        for k in 0..per_block {
            let v = refcount(&block, bits, k as usize);
            let c = i as u64 * per_block + k;
            match runs.last_mut() {
                Some((_, end, rv)) if *rv == v && *end == c => *end += 1,
                _ => runs.push((c, c + 1, v)),
            }
        }
    }
    let _ = writeln!(o, "refcounts");
    for (a, b, v) in runs.into_iter().filter(|r| r.2 != 0) {
        let _ = writeln!(o, "  clusters {a}..{b}: {v}");
    }
    if nb_snapshots > 0 {
        let _ = writeln!(o, "snapshot table at {snap_off:#x}");
        let mut p = snap_off;
        for i in 0..nb_snapshots.min(1024) {
            let Some(s) = read(src, p, 40) else { break };
            let (sl1, n) = (be64(&s, 0), be32(&s, 8));
            let (id, name, extra) = (
                u16::from_be_bytes([s[12], s[13]]) as u64,
                u16::from_be_bytes([s[14], s[15]]) as u64,
                be32(&s, 36) as u64,
            );
            let _ = writeln!(o, "  [{i}] l1 {n} entries at {sl1:#x}");
            p += (40 + extra + id + name).next_multiple_of(8);
        }
    }
    Ok(())
}

fn l2_entry(x: u64, cluster_bits: u32, version: u32) -> String {
    if x & (1 << 62) != 0 {
        let shift = 62 - (cluster_bits - 8);
        let host = x & ((1 << shift) - 1);
        let sectors = ((x >> shift) & ((1 << (62 - shift)) - 1)) + 1;
        return format!("compressed {host:#x} sectors {sectors}");
    }
    let host = x & 0x00ff_ffff_ffff_fe00;
    let copied = if x >> 63 != 0 { " copied" } else { "" };
    if version >= 3 && x & 1 != 0 {
        if host == 0 {
            return "zero".into();
        }
        return format!("zero, allocated {host:#x}{copied}");
    }
    format!("data {host:#x}{copied}")
}

fn refcount(block: &[u8], bits: u64, i: usize) -> u64 {
    match bits {
        1 | 2 | 4 => {
            let per = 8 / bits as usize;
            ((block[i / per] >> ((i % per) * bits as usize)) as u64) & ((1 << bits) - 1)
        }
        8 => block[i] as u64,
        16 => u16::from_be_bytes([block[2 * i], block[2 * i + 1]]) as u64,
        32 => be32(block, 4 * i) as u64,
        _ => be64(block, 8 * i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `len` bytes of a header of `version` with 64 KiB clusters
    /// and no tables.
    fn header(version: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; 112];
        b[..4].copy_from_slice(b"QFI\xfb");
        b[4..8].copy_from_slice(&version.to_be_bytes());
        b[20..24].copy_from_slice(&16u32.to_be_bytes());
        b[96..100].copy_from_slice(&4u32.to_be_bytes());
        b[100..104].copy_from_slice(&104u32.to_be_bytes());
        b.truncate(len);
        b
    }

    #[test]
    fn try_dump_refuses_what_it_cannot_read_as_a_header() {
        let truncated = |b: Vec<u8>| match try_dump(&b) {
            Err(DumpError::Truncated {
                len,
                needed,
                version,
            }) => (len, needed, version),
            other => panic!("{other:?}"),
        };
        assert_eq!(truncated(header(3, 50)), (50, 104, Some(3)));
        assert_eq!(truncated(header(2, 71)), (71, 72, Some(2)));
        assert_eq!(truncated(header(3, 6)), (6, 72, None));
        assert_eq!(truncated(Vec::new()), (0, 72, None));
        let mut long = header(3, 112);
        long[100..104].copy_from_slice(&4096u32.to_be_bytes());
        assert_eq!(truncated(long), (112, 4096, Some(3)));
        let msg = try_dump(&header(3, 50)).unwrap_err().to_string();
        assert_eq!(
            msg,
            "truncated qcow2 header: the file holds 50 bytes, a version 3 header needs 104"
        );
        let mut foreign = header(3, 112);
        foreign[0] = b'X';
        assert!(matches!(
            try_dump(&foreign),
            Err(DumpError::BadMagic { .. })
        ));
        let mut bits = header(3, 112);
        bits[20..24].copy_from_slice(&30u32.to_be_bytes());
        assert!(matches!(try_dump(&bits), Err(DumpError::ClusterBits(30))));
        // Whole headers dump, as `dump` does.
        for (v, len) in [(2, 72), (3, 104)] {
            let b = header(v, len);
            assert_eq!(try_dump(&b).unwrap(), dump(&b), "version {v}");
        }
    }

    /// A source whose every read fails, as a directory's does.
    struct Unreadable;

    impl ImageSource for Unreadable {
        fn len(&self) -> u64 {
            1 << 20
        }

        fn read_at(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
            Err(io::Error::other("no reading here"))
        }
    }

    #[test]
    fn try_dump_reports_read_errors() {
        let err = try_dump(&Unreadable).unwrap_err();
        assert!(matches!(err, DumpError::Read(_)), "{err:?}");
        assert!(err.to_string().contains("no reading here"), "{err}");
        assert!(dump(&Unreadable).starts_with("unreadable"));
    }
}
