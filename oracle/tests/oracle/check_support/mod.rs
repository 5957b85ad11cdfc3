//! Shared helpers for the checker's tests: building images with QEMU's own
//! tools, reading just enough of their layout to corrupt them on purpose,
//! and running `qemu-img check` as the reference.
//!
//! The layout reader here is deliberately separate from the checker's own
//! parser, so that a parsing bug cannot hide itself in both.

#![allow(dead_code)]

pub mod corrupt;

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn run(cmd: &str, args: &[&str]) -> std::process::Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"))
}

pub fn run_ok(cmd: &str, args: &[&str]) {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `qemu-img check` on a file: exit code and the parsed JSON report.
pub use testkit::qemu_check;

/// The fields the differential tests compare.
pub const FIELDS: &[&str] = &[
    "check-errors",
    "corruptions",
    "leaks",
    "allocated-clusters",
    "total-clusters",
    "fragmented-clusters",
    "compressed-clusters",
    "image-end-offset",
];

/// Projects a report onto `FIELDS`, absent fields as 0.
pub fn project(v: &serde_json::Value) -> Vec<(&'static str, u64)> {
    FIELDS
        .iter()
        .map(|&f| (f, v.get(f).and_then(|x| x.as_u64()).unwrap_or(0)))
        .collect()
}

pub struct Scratch {
    pub dir: tempfile::TempDir,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A clean QEMU-made image to corrupt.
#[derive(Clone)]
pub struct Base {
    pub name: &'static str,
    pub bytes: Vec<u8>,
}

fn create(s: &Scratch, name: &str, opts: &str, size: &str) -> PathBuf {
    let p = s.path(name);
    let ps = p.to_str().expect("utf-8");
    let mut args = vec!["create", "-q", "-f", "qcow2"];
    if !opts.is_empty() {
        args.push("-o");
        args.push(opts);
    }
    args.push(ps);
    args.push(size);
    run_ok("qemu-img", &args);
    p
}

fn io(p: &Path, cmds: &[&str]) {
    let mut args = Vec::new();
    for c in cmds {
        args.push("-c");
        args.push(*c);
    }
    args.push(p.to_str().expect("utf-8"));
    run("qemu-io", &args);
}

/// Builds the base images: several cluster sizes and refcount widths,
/// both compat levels, snapshots, compressed clusters, a bitmap, extended
/// L2 entries and a dirty lazy-refcounts image.
pub fn bases(s: &Scratch) -> Vec<Base> {
    let mut out = Vec::new();
    let mut add = |name: &'static str, p: &Path| {
        out.push(Base {
            name,
            bytes: std::fs::read(p).expect("read image"),
        });
    };
    let writes = [
        "write -P 0x11 0 100k",
        "write -P 0x22 1M 64k",
        "write -z 2M 64k",
        "write -P 0x33 3M 4k",
    ];

    let p = create(s, "plain.qcow2", "", "4M");
    io(&p, &writes);
    add("plain", &p);

    let p = create(s, "v2.qcow2", "compat=0.10,cluster_size=4k", "4M");
    io(&p, &writes);
    add("v2-4k", &p);

    let p = create(s, "rc1.qcow2", "refcount_bits=1,cluster_size=4k", "2M");
    io(&p, &writes[..2]);
    add("rc1-4k", &p);

    let p = create(s, "rc8.qcow2", "refcount_bits=8,cluster_size=1k", "2M");
    io(&p, &writes[..2]);
    add("rc8-1k", &p);

    for (name, opts) in [
        ("rc2-4k", "refcount_bits=2,cluster_size=4k"),
        ("rc4-2k", "refcount_bits=4,cluster_size=2k"),
        ("rc32-8k", "refcount_bits=32,cluster_size=8k"),
    ] {
        let p = create(s, &format!("{name}.qcow2"), opts, "2M");
        io(&p, &writes[..2]);
        run_ok(
            "qemu-img",
            &["snapshot", "-c", "s1", p.to_str().expect("utf-8")],
        );
        io(&p, &["write -P 0x99 0 8k"]);
        add(name, &p);
    }

    let p = create(s, "rc64.qcow2", "refcount_bits=64,cluster_size=512", "1M");
    io(&p, &["write -P 0x44 0 20k", "write -P 0x55 512k 3k"]);
    add("rc64-512", &p);

    let p = create(s, "snap.qcow2", "cluster_size=4k", "4M");
    io(&p, &writes);
    run_ok(
        "qemu-img",
        &["snapshot", "-c", "s1", p.to_str().expect("utf-8")],
    );
    io(&p, &["write -P 0x66 0 8k", "write -P 0x77 1M 4k"]);
    add("snapshot", &p);

    let src = create(s, "pre-compress.qcow2", "", "4M");
    io(&src, &writes);
    let p = s.path("compressed.qcow2");
    run_ok(
        "qemu-img",
        &[
            "convert",
            "-c",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=4k",
            src.to_str().expect("utf-8"),
            p.to_str().expect("utf-8"),
        ],
    );
    io(&p, &["write -P 0x88 8k 4k"]);
    add("compressed", &p);

    let p = create(s, "bitmap.qcow2", "cluster_size=4k", "4M");
    run_ok(
        "qemu-img",
        &["bitmap", "--add", p.to_str().expect("utf-8"), "bm0"],
    );
    io(&p, &writes);
    add("bitmap", &p);

    let p = create(s, "extl2.qcow2", "extended_l2=on,cluster_size=16k", "4M");
    io(
        &p,
        &[
            "write -P 0x11 0 2k",
            "write -P 0x22 40k 20k",
            "write -z 1M 1k",
        ],
    );
    add("extended-l2", &p);

    let p = create(s, "lazy.qcow2", "lazy_refcounts=on,cluster_size=4k", "4M");
    io(&p, &["write -P 0x11 0 4k", "flush"]);
    io(
        &p,
        &["write -P 0x22 64k 12k", "write -P 0x33 1M 4k", "abort"],
    );
    add("lazy-dirty", &p);

    out
}

fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().expect("4"))
}

fn be64(b: &[u8], o: usize) -> u64 {
    if o + 8 > b.len() {
        return 0;
    }
    u64::from_be_bytes(b[o..o + 8].try_into().expect("8"))
}

/// Just enough of a clean image's layout to aim corruptions.
#[derive(Debug, Clone)]
pub struct Layout {
    pub cluster_bits: u32,
    pub refcount_order: u32,
    pub extended_l2: bool,
    pub l1_offset: u64,
    pub l1_size: u64,
    pub reftable_offset: u64,
    pub reftable_entries: u64,
    /// Byte offsets of the active L1 entries that are in use.
    pub l1_entries: Vec<u64>,
    /// Byte offsets of active L2 entries that reference host clusters
    /// (normal or zero-allocated), with the entry's value.
    pub l2_entries: Vec<(u64, u64)>,
    /// Byte offsets of compressed L2 entries.
    pub compressed_entries: Vec<u64>,
    /// Byte offsets of refcount table entries in use.
    pub reftable_used: Vec<u64>,
    /// Byte offset of the first snapshot table entry, if any.
    pub first_snapshot: Option<u64>,
    /// Byte offset of the bitmaps header extension's body, if any.
    pub bitmaps_ext: Option<u64>,
}

impl Layout {
    pub fn read(b: &[u8]) -> Layout {
        let version = be32(b, 4);
        let cluster_bits = be32(b, 20);
        let l1_size = u64::from(be32(b, 36));
        let l1_offset = be64(b, 40);
        let reftable_offset = be64(b, 48);
        let reftable_clusters = u64::from(be32(b, 56));
        let (incompat, refcount_order) = if version >= 3 {
            (be64(b, 72), be32(b, 96))
        } else {
            (0, 4)
        };
        let extended_l2 = incompat & 16 != 0;
        let cs = 1u64 << cluster_bits;
        let entry = if extended_l2 { 16 } else { 8 };
        let mut l = Layout {
            cluster_bits,
            refcount_order,
            extended_l2,
            l1_offset,
            l1_size,
            reftable_offset,
            reftable_entries: reftable_clusters * cs / 8,
            l1_entries: vec![],
            l2_entries: vec![],
            compressed_entries: vec![],
            reftable_used: vec![],
            first_snapshot: (be32(b, 60) != 0).then(|| be64(b, 64)),
            bitmaps_ext: None,
        };
        if version >= 3 {
            let mut at = u64::from(be32(b, 100));
            while at + 8 <= cs {
                let magic = be32(b, at as usize);
                let len = u64::from(be32(b, at as usize + 4));
                if magic == 0 {
                    break;
                }
                if magic == 0x2385_2875 {
                    l.bitmaps_ext = Some(at + 8);
                }
                at += 8 + len.div_ceil(8) * 8;
            }
        }
        for i in 0..l1_size {
            let at = l1_offset + i * 8;
            let e = be64(b, at as usize);
            if e == 0 {
                continue;
            }
            l.l1_entries.push(at);
            let l2 = e & 0x00ff_ffff_ffff_fe00;
            for j in 0..cs / entry {
                let at = l2 + j * entry;
                let e = be64(b, at as usize);
                if e & (1 << 62) != 0 {
                    l.compressed_entries.push(at);
                } else if e & 0x00ff_ffff_ffff_fe00 != 0 {
                    l.l2_entries.push((at, e));
                }
            }
        }
        for i in 0..l.reftable_entries {
            let at = reftable_offset + i * 8;
            if be64(b, at as usize) != 0 {
                l.reftable_used.push(at);
            }
        }
        l
    }

    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Where the refcount of `cluster` is stored: byte offset, and bit
    /// shift and width inside it for sub-byte widths.
    pub fn refcount_slot(&self, b: &[u8], cluster: u64) -> Option<(u64, u32)> {
        let bits = self.cluster_bits + 3 - self.refcount_order;
        let idx = cluster >> bits;
        if idx >= self.reftable_entries {
            return None;
        }
        let block = be64(b, (self.reftable_offset + idx * 8) as usize) & !0x1ff;
        if block == 0 {
            return None;
        }
        let k = cluster & ((1 << bits) - 1);
        let width = 1u64 << self.refcount_order;
        Some((block + k * width / 8, ((k * width) % 8) as u32))
    }

    pub fn get_refcount(&self, b: &[u8], cluster: u64) -> u64 {
        let Some((at, shift)) = self.refcount_slot(b, cluster) else {
            return 0;
        };
        let width = 1u32 << self.refcount_order;
        if width < 8 {
            u64::from((b[at as usize] >> shift) & ((1u16 << width) - 1) as u8)
        } else {
            let n = (width / 8) as usize;
            b[at as usize..at as usize + n]
                .iter()
                .fold(0, |a, &x| (a << 8) | u64::from(x))
        }
    }

    pub fn set_refcount(&self, b: &mut [u8], cluster: u64, v: u64) {
        let Some((at, shift)) = self.refcount_slot(b, cluster) else {
            return;
        };
        let width = 1u32 << self.refcount_order;
        if width < 8 {
            let mask = (((1u16 << width) - 1) as u8) << shift;
            let x = &mut b[at as usize];
            *x = (*x & !mask) | (((v as u8) << shift) & mask);
        } else {
            let n = (width / 8) as usize;
            let be = v.to_be_bytes();
            b[at as usize..at as usize + n].copy_from_slice(&be[8 - n..]);
        }
    }
}

pub fn put64(b: &mut Vec<u8>, at: u64, v: u64) {
    let at = at as usize;
    if b.len() < at + 8 {
        b.resize(at + 8, 0);
    }
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

pub fn get64(b: &[u8], at: u64) -> u64 {
    be64(b, at as usize)
}
