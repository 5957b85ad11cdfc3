//! What `qemu-img info` reports about an image file: [`info`] gathers an
//! [`InfoReport`] ([`info_chain`] one for each image of a backing chain,
//! for `--backing-chain`), which renders as qemu-img's human layout
//! ([`InfoReport::human`]) or as its JSON, with its field names and order
//! (`virtual-size`, `cluster-size`, `actual-size`, `dirty-flag`,
//! `backing-filename`, `format-specific`, ...; [`InfoReport::json`]).
//!
//! The image is opened read-only through the engine (which validates it),
//! without its backing chain, as qemu-img info does; the qcow2 facts come
//! from the header the engine read.

pub use crate::size::human_size;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use engine::format::header::{compat, incompat};
use serde::Serialize;
use serde_json::ser::CharEscape;

use crate::files::{open_image, resolve_backing_path, Disk, Format, OpenError, OpenOptions};

/// How to look at the image.
#[derive(Debug, Clone, Copy, Default)]
pub struct InfoOptions {
    /// The format; probed when `None`.
    pub format: Option<Format>,
    /// qemu-img's `-U`: describe an image other processes have open, even
    /// for writing, without keeping them from writing it.
    pub force_share: bool,
}

/// Why an image could not be described.
#[derive(Debug, thiserror::Error)]
pub enum InfoError {
    /// The image (or a file it needs) could not be opened; the error names
    /// the file at fault.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The image opened, but its file's size on disk could not be read.
    #[error("{path}: {error}")]
    Metadata {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The image's snapshot table could not be read.
    #[error("{path}: {error}")]
    Snapshots { path: PathBuf, error: engine::Error },
}

/// Everything `info` reports, in qemu-img's JSON field order.
#[derive(Debug, Serialize)]
pub struct InfoReport {
    /// The protocol layer under the image: the file itself.
    pub children: Vec<Child>,
    #[serde(
        rename = "backing-filename-format",
        skip_serializing_if = "Option::is_none"
    )]
    pub backing_filename_format: Option<String>,
    /// The internal snapshots; left out when there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<Vec<crate::snapshot::SnapshotJson>>,
    /// The same, for the human layout's table.
    #[serde(skip)]
    pub snapshot_list: Vec<engine::Snapshot>,
    #[serde(rename = "virtual-size")]
    pub virtual_size: u64,
    pub filename: String,
    #[serde(rename = "cluster-size", skip_serializing_if = "Option::is_none")]
    pub cluster_size: Option<u64>,
    pub format: String,
    #[serde(rename = "actual-size")]
    pub actual_size: u64,
    #[serde(rename = "format-specific", skip_serializing_if = "Option::is_none")]
    pub format_specific: Option<FormatSpecific>,
    #[serde(
        rename = "full-backing-filename",
        skip_serializing_if = "Option::is_none"
    )]
    pub full_backing_filename: Option<String>,
    #[serde(rename = "backing-filename", skip_serializing_if = "Option::is_none")]
    pub backing_filename: Option<String>,
    #[serde(rename = "dirty-flag")]
    pub dirty_flag: bool,
    /// Not serialized: the file length, for the human "Child node" part.
    #[serde(skip)]
    pub file_length: u64,
}

/// A child node, as qemu-img lists the protocol layer.
#[derive(Debug, Serialize)]
pub struct Child {
    pub name: &'static str,
    pub info: FileNode,
}

/// The file under an image, as qemu-img's "file" protocol node reports it.
#[derive(Debug, Serialize)]
pub struct FileNode {
    pub children: Vec<Child>,
    #[serde(rename = "virtual-size")]
    pub virtual_size: u64,
    pub filename: String,
    pub format: &'static str,
    #[serde(rename = "actual-size")]
    pub actual_size: u64,
    #[serde(rename = "format-specific")]
    pub format_specific: FileSpecific,
    #[serde(rename = "dirty-flag")]
    pub dirty_flag: bool,
}

#[derive(Debug, Serialize)]
pub struct FileSpecific {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub data: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct FormatSpecific {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub data: Qcow2Specific,
}

/// qemu-img reports only compat, compression type and refcount bits for a
/// version 2 image; the rest are omitted, not false.
#[derive(Debug, Serialize)]
pub struct Qcow2Specific {
    pub compat: &'static str,
    #[serde(rename = "compression-type")]
    pub compression_type: &'static str,
    #[serde(rename = "lazy-refcounts", skip_serializing_if = "Option::is_none")]
    pub lazy_refcounts: Option<bool>,
    #[serde(rename = "refcount-bits")]
    pub refcount_bits: u32,
    #[serde(rename = "data-file", skip_serializing_if = "Option::is_none")]
    pub data_file: Option<String>,
    /// Present exactly when the image has an external data file.
    #[serde(rename = "data-file-raw", skip_serializing_if = "Option::is_none")]
    pub data_file_raw: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<bool>,
    #[serde(rename = "extended-l2", skip_serializing_if = "Option::is_none")]
    pub extended_l2: Option<bool>,
}

/// Why `qemu-img info --backing-chain` stopped.
#[derive(Debug, thiserror::Error)]
pub enum ChainInfoError {
    /// The chain comes back to a file it has already been through
    /// (qemu-img's words; found before anything is reported).
    #[error("Backing file '{}' creates an infinite loop.", path.display())]
    Loop { path: PathBuf },
    /// The image of the chain at `path` could not be described.
    #[error("{}: {error}", path.display())]
    Image {
        path: PathBuf,
        #[source]
        error: Box<InfoError>,
    },
}

/// The reports of the image at `path` and of each image of its backing
/// chain, top first, as `qemu-img info --backing-chain` gathers them: each
/// backing file opened with the format its image names (probed when it
/// names none or one qcsim does not open), a file met twice (by its
/// canonical name) a loop.
pub fn info_chain(path: &Path, opts: &InfoOptions) -> Result<Vec<InfoReport>, ChainInfoError> {
    let mut seen = Vec::new();
    let mut next = Some((path.to_owned(), opts.format));
    let mut reports = Vec::new();
    while let Some((f, format)) = next.take() {
        let id = std::fs::canonicalize(&f).unwrap_or_else(|_| f.clone());
        if seen.contains(&id) {
            return Err(ChainInfoError::Loop { path: f });
        }
        seen.push(id);
        let o = InfoOptions {
            format,
            force_share: opts.force_share,
        };
        let report = info(&f, &o).map_err(|error| ChainInfoError::Image {
            path: f.clone(),
            error: Box::new(error),
        })?;
        if let Some(b) = &report.full_backing_filename {
            let format = report
                .backing_filename_format
                .as_deref()
                .and_then(|f| f.parse::<Format>().ok());
            next = Some((PathBuf::from(b), format));
        }
        reports.push(report);
    }
    Ok(reports)
}

/// Gather the report for the image at `path`.
pub fn info(path: &Path, opts: &InfoOptions) -> Result<InfoReport, InfoError> {
    let open = OpenOptions {
        format: opts.format,
        read_only: true,
        backing: false,
        force_share: opts.force_share,
        ..OpenOptions::default()
    };
    let disk = futures::executor::block_on(open_image(path, &open))?;
    let meta = std::fs::metadata(path).map_err(|error| InfoError::Metadata {
        path: path.to_owned(),
        error,
    })?;
    // QEMU's file layer reports the length rounded up to a sector.
    let file_length = meta.len().next_multiple_of(512);
    let mut info = InfoReport {
        children: vec![Child {
            name: "file",
            info: FileNode {
                children: Vec::new(),
                virtual_size: file_length,
                filename: path.display().to_string(),
                format: "file",
                actual_size: meta.blocks() * 512,
                format_specific: FileSpecific {
                    kind: "file",
                    data: serde_json::Map::new(),
                },
                dirty_flag: false,
            },
        }],
        backing_filename_format: None,
        snapshots: None,
        snapshot_list: Vec::new(),
        virtual_size: disk.virtual_size(),
        filename: path.display().to_string(),
        cluster_size: None,
        format: disk.format().to_string(),
        actual_size: meta.blocks() * 512,
        format_specific: None,
        full_backing_filename: None,
        backing_filename: None,
        dirty_flag: false,
        file_length,
    };
    if let Disk::Qcow2(image) = &disk {
        let h = image.header();
        info.cluster_size = Some(image.cluster_size());
        info.dirty_flag = h.incompatible_features & incompat::DIRTY != 0;
        if let Some((name, fmt)) = image.backing_spec() {
            info.full_backing_filename =
                Some(resolve_backing_path(path, &name).display().to_string());
            info.backing_filename = Some(name);
            info.backing_filename_format = fmt;
        }
        let snapshots =
            futures::executor::block_on(image.snapshots()).map_err(|e| InfoError::Snapshots {
                path: path.to_owned(),
                error: e,
            })?;
        if !snapshots.is_empty() {
            info.snapshots = Some(snapshots.iter().map(Into::into).collect());
        }
        info.snapshot_list = snapshots;
        let v3 = h.version >= 3;
        let bit = |features: u64, b: u64| v3.then_some(features & b != 0);
        info.format_specific = Some(FormatSpecific {
            kind: "qcow2",
            data: Qcow2Specific {
                compat: if v3 { "1.1" } else { "0.10" },
                compression_type: h.compression().name(),
                lazy_refcounts: bit(h.compatible_features, compat::LAZY_REFCOUNTS),
                // The engine validated refcount_order (at most 6) on open.
                refcount_bits: 1u32 << h.refcount_order.min(6),
                data_file: h.data_file(),
                data_file_raw: h.has_data_file().then(|| h.data_file_raw()),
                corrupt: bit(h.incompatible_features, incompat::CORRUPT),
                extended_l2: bit(h.incompatible_features, incompat::EXTENDED_L2),
            },
        });
    }
    // Nothing was written; dropping the image instead of closing it keeps
    // even the header untouched.
    drop(disk);
    Ok(info)
}

impl InfoReport {
    /// The human layout of `qemu-img info`, every line ended.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!("image: {}", self.filename));
        line(format!("file format: {}", self.format));
        line(format!(
            "virtual size: {} ({} bytes)",
            human_size(self.virtual_size),
            self.virtual_size
        ));
        line(format!("disk size: {}", human_size(self.actual_size)));
        if let Some(c) = self.cluster_size {
            line(format!("cluster_size: {c}"));
        }
        if let Some(b) = &self.backing_filename {
            match &self.full_backing_filename {
                Some(full) if full != b => {
                    line(format!("backing file: {b} (actual path: {full})"));
                }
                _ => line(format!("backing file: {b}")),
            }
        }
        if let Some(f) = &self.backing_filename_format {
            line(format!("backing file format: {f}"));
        }
        if !self.snapshot_list.is_empty() {
            let table = crate::snapshot::snapshot_table(&self.snapshot_list);
            for l in table.lines() {
                line(l.to_owned());
            }
        }
        if let Some(fs) = &self.format_specific {
            let d = &fs.data;
            line("Format specific information:".into());
            line(format!("    compat: {}", d.compat));
            line(format!("    compression type: {}", d.compression_type));
            if let Some(l) = d.lazy_refcounts {
                line(format!("    lazy refcounts: {l}"));
            }
            line(format!("    refcount bits: {}", d.refcount_bits));
            if let Some(f) = &d.data_file {
                line(format!("    data file: {f}"));
            }
            if let Some(r) = d.data_file_raw {
                line(format!("    data file raw: {r}"));
            }
            if let Some(c) = d.corrupt {
                line(format!("    corrupt: {c}"));
            }
            if let Some(e) = d.extended_l2 {
                line(format!("    extended l2: {e}"));
            }
        }
        line("Child node '/file':".into());
        line(format!("    filename: {}", self.filename));
        line("    protocol type: file".into());
        line(format!(
            "    file length: {} ({} bytes)",
            human_size(self.file_length),
            self.file_length
        ));
        line(format!("    disk size: {}", human_size(self.actual_size)));
        s
    }

    /// The JSON of `qemu-img info --output json`, with its four-space
    /// indentation and no final newline.
    pub fn json(&self) -> String {
        pretty_json(self)
    }
}

/// The JSON of `qemu-img info --backing-chain --output json`: one array
/// of the chain's reports, top first, laid out as [`InfoReport::json`]
/// lays out one report (no final newline).
pub fn chain_json(reports: &[InfoReport]) -> String {
    pretty_json(&reports)
}

/// `value` as JSON laid out as qemu-img lays it out (QEMU's
/// `qobject_to_json_pretty`): four-space indentation, `": "` after a key,
/// an empty array or object still broken over two lines (`[` newline,
/// indentation, `]`), and strings escaped as QEMU escapes them (every
/// character outside printable ASCII, DEL included, as `\uXXXX` with
/// upper-case hex digits, a surrogate pair beyond the BMP; `/` as is).
/// Fields come in the order `value` serialises them. Serialising these
/// reports into memory cannot fail: they hold no maps with non-string keys
/// and no I/O happens.
pub(crate) fn pretty_json(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, QemuFormatter::default());
    value
        .serialize(&mut ser)
        .expect("a report serialises into memory");
    String::from_utf8(out).expect("the formatter writes ASCII")
}

/// serde_json's [`Formatter`](serde_json::ser::Formatter) for QEMU's
/// pretty JSON (see [`pretty_json`]).
#[derive(Default)]
struct QemuFormatter {
    level: usize,
}

impl QemuFormatter {
    fn newline<W: ?Sized + io::Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.level {
            w.write_all(b"    ")?;
        }
        Ok(())
    }

    /// `[` or `{`: what follows is a level deeper.
    fn open<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level += 1;
        w.write_all(bracket)
    }

    /// `]` or `}` on a line of its own, even after no item.
    fn close<W: ?Sized + io::Write>(&mut self, w: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.level -= 1;
        self.newline(w)?;
        w.write_all(bracket)
    }

    /// An array value or an object key: on a line of its own, after a
    /// comma unless it is the first.
    fn item<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for QemuFormatter {
    fn begin_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        Ok(())
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _: &mut W) -> io::Result<()> {
        Ok(())
    }

    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        for c in fragment.chars() {
            let cp = u32::from(c);
            if cp > 0xFFFF {
                let v = cp - 0x10000;
                write!(
                    w,
                    "\\u{:04X}\\u{:04X}",
                    0xD800 + (v >> 10),
                    0xDC00 + (v & 0x3FF)
                )?;
            } else if cp >= 0x7F {
                write!(w, "\\u{cp:04X}")?;
            } else {
                w.write_all(&[cp as u8])?;
            }
        }
        Ok(())
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        w: &mut W,
        escape: CharEscape,
    ) -> io::Result<()> {
        match escape {
            CharEscape::Quote => w.write_all(b"\\\""),
            CharEscape::ReverseSolidus => w.write_all(b"\\\\"),
            CharEscape::Solidus => w.write_all(b"/"),
            CharEscape::Backspace => w.write_all(b"\\b"),
            CharEscape::FormFeed => w.write_all(b"\\f"),
            CharEscape::LineFeed => w.write_all(b"\\n"),
            CharEscape::CarriageReturn => w.write_all(b"\\r"),
            CharEscape::Tab => w.write_all(b"\\t"),
            CharEscape::AsciiControl(b) => write!(w, "\\u{b:04X}"),
        }
    }
}
